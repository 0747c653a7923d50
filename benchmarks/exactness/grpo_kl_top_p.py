"""How close marft's float32 gradient of GRPO's β·KL term (and of the whole GRPO loss) is to an
independent float64 computation, with and without a top-p cut, near the reference policy.

The audit's claim: under top_p 0.9 the β-KL gradient differs from a float64 implementation by
1.4e-4 relative when the policy is very close to the reference, not with β = 0 or top_p = 1.

For each adapter scale (LoRA B = scale · N(0, 1), A as initialised: the policy moves away from the
reference in proportion) and each top_p, the script prints the relative (‖g − g₆₄‖/‖g₆₄‖) and
absolute (max |g − g₆₄|) differences of:

* ``marft``: :class:`~marft_algos.trainers.policy_gradient.PolicyGradient`'s own code path;
* ``ind32``: the independent implementation below in float32 (model and log-softmax);
* ``m64h32``: the model in float64, log-softmax / k3 in float32 (the head's share of round-off);
* ``m32h64``: the model in float32, log-softmax / k3 in float64 (the model's share);
* ``round``: as ``ind64``, but the two log-probs rounded to float32 before k3 (nothing else);
* ``expm1``: as ``ind32``, k3 written with ``expm1`` (and its gradient with ``-expm1``);
* ``delta`` (β·KL rows only): marft's whole-loss gradient minus marft's at β = 0, the β term
  obtained by subtracting two float32 gradients;

all against ``ind64`` (the same formula, model and head in float64). The independent
implementation: one plain forward of ``prompt + action`` (no shared-prompt cache), the policy's
log-probs ``log_softmax(z / T)`` (cut: transformers' top-p warper first), the reference's the
same with the adapter off, ``k3 = exp(x) − x − 1`` with ``x = log π_ref − log π_θ``, and GRPO's
surrogate (marft's ``clipped_surrogate`` on these log-probs) with the trainer's weights.

Run from the repository root (2 CPU threads at most, about 2 minutes)::

    OMP_NUM_THREADS=1 python benchmarks/exactness/grpo_kl_top_p.py

The trainer tests' ``DigitsEnv`` (``tests/algos/trainers/trainer_envs.py``) gives rewards that
differ between samples, so the advantages are not all 0.
"""

from __future__ import annotations

import argparse
import copy
import sys
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "algos" / "trainers"))

from trainer_envs import DigitsEnv  # noqa: E402

from marft_algos.policy import MultiAgentPolicy, tiny_model_path  # noqa: E402
from marft_algos.policy.forward import pack  # noqa: E402
from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer  # noqa: E402

TEMPERATURE = 0.7


def build(beta: float, top_p: float, seed: int = 0) -> GRPOTrainer:
    policy = MultiAgentPolicy.from_pretrained(str(tiny_model_path()), ["answerer"], seed=seed)
    config = GRPOConfig(
        iterations=1,
        episodes_per_iteration=16,
        rollout_threads=2,
        max_new_tokens=12,
        learning_rate=5e-3,
        eval_episodes=4,
        num_generations=4,
        beta=beta,
        temperature=TEMPERATURE,
        top_p=top_p,
        seed=seed,
    )
    env_fn = lambda: DigitsEnv(team=1)  # noqa: E731
    return GRPOTrainer(policy, env_fn, config, eval_env_fn=env_fn)


def adapter(trainer: GRPOTrainer, agent: str):
    """``(backbone, adapter name, [(name, parameter)])`` of the agent."""
    policy = trainer.policy
    name = policy.adapter_name(agent)
    backbone = policy.backbone(agent)
    return backbone, name, backbone.named_adapter_parameters(name)


def grads(params) -> torch.Tensor:
    out = [
        torch.zeros(p.numel(), dtype=torch.float64) if p.grad is None else p.grad.double().flatten()
        for p in params
    ]
    return torch.cat(out)


def zero(params) -> None:
    for p in params:
        p.grad = None


def independent(
    trainer, step, batch, *, model_dtype, head_dtype, top_p, beta, which, expm1=False, round32=False
):
    """The gradient of ``which`` ("kl": β·Σ w k3, "loss": the GRPO loss) in the given dtypes,
    w.r.t. the agent's adapter: ``(gradient, mean |x| over the tokens)``."""
    agent = "answerer"
    backbone, name, named = adapter(trainer, agent)
    model = copy.deepcopy(backbone.model).to(model_dtype)
    model.set_adapter(name)
    params = dict(model.named_parameters())
    mine = [params[n] for n, _ in named]
    for p in mine:
        p.requires_grad_(True)
    part = batch[batch.indices_of(agent)]
    packed = pack(list(part.prompt_ids), part.action_lists(), backbone.pad_id, "cpu")
    width = packed.action_ids.shape[1]
    start = packed.prompt_width - 1
    inputs = {
        "input_ids": packed.input_ids,
        "attention_mask": packed.attention_mask,
        "position_ids": packed.position_ids,
        "use_cache": False,
    }
    z = model(**inputs).logits[:, start : start + width].to(head_dtype)  # (B, T, V)
    with torch.no_grad(), model.disable_adapter():
        z_ref = model(**inputs).logits[:, start : start + width].to(head_dtype)
    mask = packed.action_mask
    targets = packed.action_ids.unsqueeze(-1)

    def gather(scores):
        return torch.log_softmax(scores, dim=-1).gather(-1, targets).squeeze(-1)  # (B, T)

    lp = gather(z / TEMPERATURE).masked_fill(~mask, 0.0)
    ref = gather(z_ref / TEMPERATURE).masked_fill(~mask, 0.0)
    if round32:  # only the two log-probs rounded to float32 (the gradient passes straight through)
        lp = lp + (lp.float().to(head_dtype) - lp).detach()
        ref = ref.float().to(head_dtype)
    x = ref - lp
    k3 = _K3Expm1.apply(x) if expm1 else torch.exp(x) - x - 1.0
    totals = (float(batch.action_mask.sum()), float(len(batch)))
    weights = step._weights(part, mask, totals).to(head_dtype)  # (B, T)
    kl = (torch.where(mask, k3, torch.zeros_like(k3)) * weights).sum()
    if which == "kl":
        objective = beta * kl
    else:
        from transformers.generation.logits_process import TopPLogitsWarper

        scaled = z / TEMPERATURE
        if top_p < 1.0:
            flat = scaled.reshape(-1, scaled.shape[-1])
            cut = TopPLogitsWarper(top_p=top_p)(None, flat).reshape(scaled.shape)
        else:
            cut = scaled
        lp_cut = gather(cut).masked_fill(~mask, 0.0)
        new, old, adv, entry_mask, entry_w, prox = step._entries(lp_cut, mask, part, weights)
        per_entry, _ = step._surrogate(
            new, old.to(head_dtype), adv.to(head_dtype), entry_mask, prox
        )
        objective = (per_entry * entry_w).sum() + beta * kl
    objective.backward()
    g = torch.cat([p.grad.double().flatten() for p in mine])
    return g, float(x.detach().abs()[mask].mean())


class _K3Expm1(torch.autograd.Function):
    """k3 = expm1(x) − x, with its derivative expm1(x) computed directly (no 1 − e^x cancellation)."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[override]
        em1 = torch.expm1(x)
        ctx.save_for_backward(em1)
        return em1 - x

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        (em1,) = ctx.saved_tensors
        return grad * em1


def marft_grad(trainer, step, batch, which, beta):
    """marft's gradient of β·KL ("kl"), of the whole loss ("loss"), or of the whole loss minus
    the whole loss at β = 0 ("delta": the β term as two full backward passes subtracted)."""
    agent = "answerer"
    _, _, named = adapter(trainer, agent)
    params = [p for _, p in named]
    zero(params)
    if which == "delta":
        g = marft_grad(trainer, step, batch, "loss", beta)
        step0 = copy.copy(step)
        step0.objective = replace(step.objective, beta=0.0)
        return g - marft_grad(trainer, step0, batch, "loss", 0.0)
    if which == "loss":
        step.backward(batch)
    else:
        totals = (float(batch.action_mask.sum()), float(len(batch)))
        part = batch[batch.indices_of(agent)]
        lp, uncut = step._log_probs(agent, part, with_entropy=True, with_uncut=True)
        weights = step._weights(part, lp.mask, totals)
        (beta * step._reference_kl(agent, part, uncut, lp.mask, weights)).backward()
    g = grads(params)
    zero(params)
    return g


def compare(g, ref):
    diff = g - ref
    return float(diff.norm() / ref.norm()), float(diff.abs().max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--beta", type=float, default=0.04)
    parser.add_argument("--scales", type=float, nargs="+", default=[1e-4, 1e-3, 1e-2, 1e-1])
    parser.add_argument("--top-p", type=float, nargs="+", default=[0.9, 1.0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    beta = args.beta
    trainer = build(beta, 0.9)
    episodes = trainer.collect()  # fresh adapters: sampled by the reference, under top-p 0.9
    batch = trainer.rollout_batch(episodes)
    adv, _ = trainer.batch_advantages(episodes, batch)
    batch = batch.with_targets(advantages=adv)
    _, _, named = adapter(trainer, "answerer")
    gen = torch.Generator().manual_seed(1)
    noise = {n: torch.randn(p.shape, generator=gen) for n, p in named if ".lora_B." in n}
    print(
        f"tiny model, GRPO beta={beta}, T={TEMPERATURE}, {int(batch.action_mask.sum())} tokens; "
        "rel = |g - g64| / |g64|, abs = max |g - g64|"
    )
    header = "top_p  scale    term  mean|x|    |g64|      " + "".join(
        f"{k:>22}" for k in ("marft", "ind32", "m64h32", "m32h64", "round", "expm1", "delta")
    )
    print(header)
    same_kl = []
    for scale in args.scales:
        kl_grads = []
        with torch.no_grad():
            for n, p in named:
                if n in noise:
                    p.copy_(noise[n] * scale)
        for top_p in args.top_p:
            step = trainer.policy_gradient()
            step.sampling["top_p"] = top_p
            for which in ("kl", "loss"):
                common = dict(top_p=top_p, beta=beta, which=which)
                f64, f32 = torch.float64, torch.float32
                g64, mean_x = independent(
                    trainer, step, batch, model_dtype=f64, head_dtype=f64, **common
                )
                rows = {
                    "marft": marft_grad(trainer, step, batch, which, beta),
                    "ind32": independent(
                        trainer, step, batch, model_dtype=f32, head_dtype=f32, **common
                    )[0],
                    "m64h32": independent(
                        trainer, step, batch, model_dtype=f64, head_dtype=f32, **common
                    )[0],
                    "m32h64": independent(
                        trainer, step, batch, model_dtype=f32, head_dtype=f64, **common
                    )[0],
                    "round": independent(
                        trainer,
                        step,
                        batch,
                        model_dtype=f64,
                        head_dtype=f64,
                        round32=True,
                        **common,
                    )[0],
                    "expm1": independent(
                        trainer, step, batch, model_dtype=f32, head_dtype=f32, expm1=True, **common
                    )[0],
                }
                if which == "kl":
                    rows["delta"] = marft_grad(trainer, step, batch, "delta", beta)
                    kl_grads.append(rows["marft"])
                cells = "".join(
                    f"{'{:.1e} / {:.1e}'.format(*compare(g, g64)):>22}" for g in rows.values()
                )
                print(
                    f"{top_p:<6} {scale:<8.0e} {which:<5} {mean_x:<10.2e} {float(g64.norm()):<10.2e} "
                    + cells,
                    flush=True,
                )
        same_kl.append(all(torch.equal(g, kl_grads[0]) for g in kl_grads))
    print(f"marft's beta-KL gradient bit-identical across top_p {args.top_p}: {all(same_kl)}")


if __name__ == "__main__":
    main()
