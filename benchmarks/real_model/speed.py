"""Rollout and update speed of SmolLM2-135M-Instruct in the policy, against this machine's limits.

Measured in one process, on the same threads, so that the ratios hold on a shared, noisy machine:

- **ceilings**: float32 matmul FLOP/s (a large square ``torch.mm``) and memory bandwidth (reading
  a tensor far larger than the caches);
- **rollout**: ``MultiAgentPolicy.generate`` for 1, 2 and 4 agents (one LoRA adapter each, one
  batched call per agent, KV cache on), counting every decode step of every row (``batch x
  steps``, the work the model does) and the action tokens actually returned;
- **update**: ``token_log_probs`` forward + backward through the LoRA adapters over the rollout's
  prompts and actions, counting every real (unpadded) token.

The model's limits come from counting the work per token: the matmul FLOPs of the transformer
blocks (``2 x`` their parameters) for every token, plus the tied output head (``2 x vocab x
hidden``) where logits are needed, attention scores ``4 x layers x hidden x context``; the update's
backward costs the same FLOPs again (gradients w.r.t. activations; the frozen base weights get
none). A decode step must also read every weight once, so one step of batch ``B`` takes at least
``max(FLOPs / peak FLOP/s, weight bytes / bandwidth)``: memory-bound at small batch, FLOP-bound at
large batch. The fraction of that limit reached is the figure of merit.

Run::

    python benchmarks/real_model/speed.py                       # 1 thread, batch 16, 64 tokens
    python benchmarks/real_model/speed.py --batch 4 16 64 --json speed.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.protocols import GenerationSettings
from marft_envs.math.data import load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared runner
from runner import find_data_file, run_info

#: In $MARFT_DATA (docs/benchmarks.md, "Data files"); without it the built-in problems.
GSM8K = "gsm8k_test.jsonl"


def matmul_flops(size: int = 2048, repeats: int = 5) -> float:
    """Best-of-``repeats`` float32 FLOP/s of a ``size x size`` matrix product."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * size**3 / best


def memory_bandwidth(megabytes: int = 1024, repeats: int = 5) -> float:
    """Best-of-``repeats`` bytes/s of reading a float32 tensor (``sum``) far larger than caches."""
    x = torch.ones(megabytes * 2**20 // 4)
    x.sum()
    best = min(_timed(lambda: x.sum()) for _ in range(repeats))
    return x.numel() * 4 / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def model_costs(policy: MultiAgentPolicy, agent: str) -> dict[str, float]:
    """Per-token matmul FLOPs of the blocks and the head, and the bytes a decode step reads."""
    model = policy.backbone(agent).model
    config = model.config
    head = config.vocab_size * config.hidden_size
    base = {
        n: p
        for n, p in model.named_parameters()
        if "lora_" not in n and "embed_tokens" not in n and "lm_head" not in n
    }
    block_params = sum(p.numel() for n, p in base.items() if p.dim() == 2)
    weight_bytes = (block_params + head) * 4  # every block matrix + the tied head, float32
    return {
        "block_flops": 2.0 * block_params,
        "head_flops": 2.0 * head,
        "attention_flops_per_context": 4.0 * config.num_hidden_layers * config.hidden_size,
        "decode_weight_bytes": float(weight_bytes),
    }


def prompts_for(policy: MultiAgentPolicy, agent: str, batch: int) -> list[list[int]]:
    """Rendered actor prompts of the first ``batch`` GSM8K problems (or built-in ones)."""
    gsm8k = find_data_file(GSM8K)
    data = load_dataset(str(gsm8k) if gsm8k is not None else "builtin:test")
    env = marft_envs.make("math-single-v7", dataset=data)
    out = []
    for i in range(batch):
        env.reset(options={"index": i})
        out.append(policy.render(agent, env.observe("actor")))
    return out


def rollout(policy, agents, prompts, max_new_tokens, seed):
    """Generate for every agent once; return (seconds, decode slots, action tokens, gens)."""
    slots = tokens = 0
    gens_by_agent = {}
    start = time.perf_counter()
    for i, agent in enumerate(agents):
        gens = policy.generate_from_ids(
            agent, prompts, GenerationSettings(max_new_tokens=max_new_tokens, seed=seed + i)
        )
        steps = max(len(g.action_ids) for g in gens)
        slots += steps * len(gens)
        tokens += sum(len(g.action_ids) for g in gens)
        gens_by_agent[agent] = gens
    return time.perf_counter() - start, slots, tokens, gens_by_agent


def base_rollout(policy, agent, prompts, max_new_tokens, seed):
    """The same generation on the base model with the adapters switched off (no LoRA layers
    in the compute): what un-merged LoRA costs a rollout. Returns (seconds, decode slots)."""
    from marft_algos.policy.backbone import seeded_rng
    from marft_algos.policy.forward import left_pad

    backbone = policy.backbone(agent)
    ids, mask = left_pad(prompts, backbone.pad_id, backbone.device)
    start = time.perf_counter()
    with (
        seeded_rng(seed, backbone.device),
        torch.no_grad(),
        policy.acting(agent, reference=True) as model,
    ):
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=True,
            top_k=0,
            use_cache=True,
        )
    secs = time.perf_counter() - start
    return secs, (out.shape[1] - ids.shape[1]) * len(prompts)


def update(policy, gens_by_agent):
    """Forward + backward of every agent's actions; return (seconds, real tokens)."""
    tokens = 0
    start = time.perf_counter()
    for agent, gens in gens_by_agent.items():
        out = policy.token_log_probs(
            agent, [g.prompt_ids for g in gens], [g.action_ids for g in gens]
        )
        (-out.log_probs.sum()).backward()
        for p in policy.trainable_parameters(agent):
            p.grad = None
        tokens += sum(len(g.prompt_ids) + len(g.action_ids) for g in gens)
    return time.perf_counter() - start, tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--agents", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--batch", type=int, nargs="+", default=[16])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    flops = matmul_flops() if args.device == "cpu" else float("nan")
    bandwidth = memory_bandwidth() if args.device == "cpu" else float("nan")
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{args.threads} thread(s); matmul {flops / 1e9:.1f} GFLOP/s, read {bandwidth / 1e9:.2f} GB/s"
    )
    agents = [f"agent{i}" for i in range(max(args.agents))]
    policy = MultiAgentPolicy.from_pretrained(args.model, agents, seed=0, device=args.device)
    costs = model_costs(policy, agents[0])
    attn = policy.backbone(agents[0]).model.config._attn_implementation
    print(
        f"model: {args.model}, attention {attn}; per token {costs['block_flops'] / 1e6:.0f} MFLOP "
        f"blocks + {costs['head_flops'] / 1e6:.0f} MFLOP head; a decode step reads "
        f"{costs['decode_weight_bytes'] / 2**20:.0f} MiB of weights"
    )
    rows = []
    for batch in args.batch:
        prompts = prompts_for(policy, agents[0], batch)
        prompt_len = statistics.mean(len(p) for p in prompts)
        for n in args.agents:
            team = agents[:n]
            best_roll = best_upd = None
            for r in range(args.repeats):
                secs, slots, tokens, gens = rollout(policy, team, prompts, args.max_new_tokens, r)
                usecs, utokens = update(policy, gens)
                if best_roll is None or secs < best_roll[0]:
                    best_roll = (secs, slots, tokens)
                if best_upd is None or usecs < best_upd[0]:
                    best_upd = (usecs, utokens, gens)
            secs, slots, tokens = best_roll
            steps = slots / (n * batch)
            context = prompt_len + steps / 2
            step_flops = batch * (
                costs["block_flops"]
                + costs["head_flops"]
                + costs["attention_flops_per_context"] * context
            )
            step_floor = max(step_flops / flops, costs["decode_weight_bytes"] / bandwidth)
            roll_limit = batch / step_floor  # decode slots per second at the limit
            usecs, utokens, ugens = best_upd
            action_tokens = sum(len(g.action_ids) for gs in ugens.values() for g in gs)
            upd_flops = 2 * (
                utokens * costs["block_flops"]
                + action_tokens * costs["head_flops"]
                + utokens * costs["attention_flops_per_context"] * (prompt_len + steps) / 2
            )
            upd_limit = utokens / (upd_flops / flops)
            row = {
                "agents": n,
                "batch": batch,
                "prompt_tokens_mean": prompt_len,
                "rollout_seconds": secs,
                "rollout_slots_per_s": slots / secs,
                "rollout_action_tokens_per_s": tokens / secs,
                "rollout_limit_slots_per_s": roll_limit,
                "rollout_fraction": slots / secs / roll_limit,
                "rollout_bound": "flops"
                if step_flops / flops > costs["decode_weight_bytes"] / bandwidth
                else "memory",
                "update_seconds": usecs,
                "update_tokens_per_s": utokens / usecs,
                "update_limit_tokens_per_s": upd_limit,
                "update_fraction": utokens / usecs / upd_limit,
            }
            rows.append(row)
            print(
                f"agents {n} batch {batch:3d}: rollout {row['rollout_slots_per_s']:7.1f} slots/s "
                f"({row['rollout_action_tokens_per_s']:6.1f} action tok/s), limit {roll_limit:7.1f} "
                f"({row['rollout_bound']}-bound) -> {100 * row['rollout_fraction']:5.1f}%; update "
                f"{row['update_tokens_per_s']:7.1f} tok/s, limit {upd_limit:7.1f} -> "
                f"{100 * row['update_fraction']:5.1f}%",
                flush=True,
            )
            if n == 1:
                base = min(
                    (
                        base_rollout(policy, team[0], prompts, args.max_new_tokens, r)
                        for r in range(args.repeats)
                    ),
                    key=lambda t: t[0] / t[1],
                )
                row["base_model_slots_per_s"] = base[1] / base[0]
                row["lora_rollout_cost"] = (
                    row["base_model_slots_per_s"] / row["rollout_slots_per_s"] - 1
                )
                print(
                    f"  same batch on the base model (adapters off): {row['base_model_slots_per_s']:.1f} "
                    f"slots/s; LoRA costs the rollout {100 * row['lora_rollout_cost']:+.0f}%"
                )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "matmul_flops": flops,
                    "bandwidth": bandwidth,
                    **costs,
                    "rows": rows,
                    "run_info": run_info(),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
