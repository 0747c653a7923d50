"""marft vs TRL GRPO on a real model at equal work, one process, alternating; and generate speed.

Two measurements, both on SmolLM2-135M-Instruct (``smollm2-135m-instruct``) in float32 on CPU, one
torch thread:

**GRPO update** (``--phase grpo``). marft's ``GRPOTrainer`` and TRL's ``GRPOTrainer`` (1.16) each
train a fresh LoRA adapter (r 8, alpha 16, every linear layer: the same ``LoraSettings`` → peft
``LoraConfig``) with the same settings. Equal work per update, defined here:

- the same ``--prompts`` GSM8K problems (``math-single-v1`` chat messages, problems ``k·P`` to
  ``k·P + P − 1`` in update ``k``), each sampled ``--num-generations`` times (4 x 4 = 16
  completions) at temperature 1, no top-k / top-p, at most ``--max-new-tokens`` (128) tokens;
- the same reward (``marft_envs.math.grade_answer`` of the completion against the gold answer);
- ``loss_type="dapo"``, ``scale_rewards="group"``, ``beta=0``, ε 0.2, one optimizer step
  (Adam(W), weight decay 0, eps 1e-5, grad-norm clip 0.5) per update, ``num_iterations`` 1;
- **every row trained**: marft runs the forward/backward of every completion, also those whose
  advantage is 0 (``GRPOConfig(skip_zero_advantages=False)``), as TRL does.

The two alternate update by update in one process (marft 1, TRL 1, marft 2, TRL 2, ...): TRL's
training loop runs, and a callback runs one marft update before each TRL step. A TRL update is
timed from its step's start to its end (generation, reward, loss, backward, optimizer step); a
marft update is one ``train_iteration()``. The first ``--warmup-updates`` of each are left out;
the medians of the rest are reported, with generated tokens counted per update (marft: the action
tokens its rollout returned; TRL: the completion ids its reward function received).

**Generation** (``--phase generate``). ``MultiAgentPolicy.generate`` for 16 prompts x 128 new
tokens against plain ``generate`` of a transformers model with the same adapter merged into its
weights (peft ``merge_and_unload``), the same prompts and sampling settings. Both run with the
end-of-turn tokens disabled, so both generate exactly 16 x 128 tokens. They alternate,
``--generate-repeats`` times each; medians reported. The adapter's B matrices are set to small
random values first (a fresh adapter is the identity).

**Ceilings.** This CPU's float32 matmul FLOP/s and read bandwidth are measured in the same process
(``benchmarks/real_model/speed.py``), and each time is compared with the work it must do (FLOPs
counted as there: 2 x block parameters per token, the head where logits are needed, attention over
the context; a backward pass through frozen weights costs one forward again; a decode step reads
every weight once).

``trl`` is a benchmark-only dependency: ``pip install -c constraints.txt trl==1.16.0``.

    python benchmarks/trl_grpo/real_model.py                          # both, as in RESULTS.md
    python benchmarks/trl_grpo/real_model.py --phase generate
    python benchmarks/trl_grpo/real_model.py --updates 2 --max-new-tokens 16 --generate-repeats 1   # smoke

**On a GPU** (``benchmarks/gpu/suite.py`` runs it so): ``--device cuda --dtype bfloat16
--fixed-length --phase grpo``, with a local model folder (random weights and a real tokenizer do:
``--fixed-length`` disables end of turn in both trainers, so both generate exactly
``--max-new-tokens`` per completion: marft without end-of-turn ids, TRL with
``generation_kwargs={"min_new_tokens": N}``). ``--rollout-backend vllm`` generates both trainers'
rollouts on vLLM (marft's ``VLLMRolloutBackend``; TRL's ``use_vllm`` in colocate mode), each
engine at ``--vllm-gpu-memory-utilization``. The ceilings are then the GPU's: bf16 matmul FLOP/s
and device-to-device copy bandwidth, measured in the same process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
ENV_ID = "math-single-v1"
GSM8K = "gsm8k_test.jsonl"  # in --data-dir or $MARFT_DATA (docs/benchmarks.md, "Data files")

sys.path.insert(0, str(HERE.parent))  # benchmarks/: the shared runner
from runner import find_data_file, run_info  # noqa: E402


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--phase", choices=["grpo", "generate", "both"], default="both")
    parser.add_argument("--prompts", type=int, default=4, help="Prompts per update (default 4).")
    parser.add_argument("--num-generations", type=int, default=4, help="G (default 4).")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument(
        "--updates", type=int, default=4, help="Updates of each trainer, warm-up included."
    )
    parser.add_argument("--warmup-updates", type=int, default=1)
    parser.add_argument("--generate-repeats", type=int, default=3)
    parser.add_argument("--generate-batch", type=int, default=16)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (GRPO phase only on cuda).")
    parser.add_argument(
        "--dtype", choices=["float32", "bfloat16"], default="float32", help="Weight dtype."
    )
    parser.add_argument(
        "--fixed-length",
        action="store_true",
        help="No end of turn in either trainer: every completion has --max-new-tokens tokens.",
    )
    parser.add_argument(
        "--rollout-backend",
        choices=["transformers", "vllm"],
        default="transformers",
        help="Who generates the GRPO rollouts (vllm: both trainers on vLLM, CUDA only).",
    )
    parser.add_argument("--vllm-gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument(
        "--data",
        default=None,
        help=f"GSM8K jsonl (default: {GSM8K} in --data-dir or $MARFT_DATA, else builtin:test).",
    )
    parser.add_argument("--data-dir", default=None, help="Folder of the data files ($MARFT_DATA).")
    parser.add_argument(
        "--results", default=str(HERE / "real_model_results.json"), help="Results JSON."
    )
    return parser.parse_args(argv)


def _speed_module() -> Any:
    """``benchmarks/real_model/speed.py`` (ceilings and per-token costs), loaded by path."""
    spec = importlib.util.spec_from_file_location(
        "real_model_speed", HERE.parent / "real_model" / "speed.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ceilings(device: str = "cpu") -> dict[str, float]:
    """This CPU's float32 matmul FLOP/s and read bytes/s, or a GPU's bf16 matmul FLOP/s and
    device-to-device copy bytes/s (read + write), measured now."""
    if not device.startswith("cuda"):
        speed = _speed_module()
        return {"matmul_flops": speed.matmul_flops(), "bandwidth": speed.memory_bandwidth()}

    def best(fn: Callable[[], Any], repeats: int = 5) -> float:
        fn()
        times = []
        for _ in range(repeats):
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
        return min(times)

    n = 8192
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    flops = 2 * n**3 / best(lambda: torch.mm(a, a))
    x = torch.empty(2**30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    bandwidth = 2 * x.numel() / best(lambda: y.copy_(x))
    return {"matmul_flops": flops, "bandwidth": bandwidth}


def work(
    costs: dict[str, float],
    prompt_lens: Sequence[int],
    action_lens: Sequence[int],
    group: int = 1,
) -> dict:
    """FLOPs and weight bytes one GRPO update must spend (the cheaper way of each part).

    Rollout: each distinct prompt prefilled once (blocks only, the head for its last token),
    every generated token decoded (blocks, head, attention over its context), every decode step
    reading the weights once. Update: forward + backward (one more forward's FLOPs: the base
    weights are frozen) of every row's prompt and action, the head on action tokens only.
    """
    distinct = prompt_lens[::group]  # the ``group`` consecutive rows of a group share their prompt
    attn = costs["attention_flops_per_context"]
    prefill = sum(
        n * costs["block_flops"] + attn * n * n / 2 + costs["head_flops"] for n in distinct
    )
    decode = sum(
        a * (costs["block_flops"] + costs["head_flops"]) + attn * a * (p + a / 2)
        for p, a in zip(prompt_lens, action_lens, strict=True)
    )
    update = 2 * sum(
        (p + a) * costs["block_flops"] + a * costs["head_flops"] + attn * (p + a) ** 2 / 2
        for p, a in zip(prompt_lens, action_lens, strict=True)
    )
    steps = max(action_lens)
    return {
        "rollout_flops": prefill + decode,
        "update_flops": update,
        "total_flops": prefill + decode + update,
        "decode_weight_bytes": steps * costs["decode_weight_bytes"],
    }


# ---------------------------------------------------------------------------------------- GRPO
def _data_source(args: argparse.Namespace) -> str:
    """``--data``, else the GSM8K file in ``--data-dir`` / ``$MARFT_DATA``, else ``builtin:test``."""
    path = Path(args.data) if args.data else find_data_file(GSM8K, args.data_dir)
    return str(path) if path is not None and path.is_file() else "builtin:test"


def _problems(args: argparse.Namespace) -> Any:
    from marft_envs.math.data import load_dataset

    return load_dataset(_data_source(args))


def build_marft(args: argparse.Namespace, data: Any) -> tuple[Any, dict[str, Any]]:
    """marft's trainer, fed problems ``k·P .. k·P+P−1`` in update ``k``; returns (trainer, info)."""
    import marft_envs
    from marft_algos.policy import LoraSettings, MultiAgentPolicy
    from marft_algos.rollout.collector import EpisodeRequest
    from marft_algos.trainers.grpo import GRPOConfig, GRPOTrainer

    env_fn = lambda: marft_envs.make(ENV_ID, dataset=data)  # noqa: E731
    agents = env_fn().possible_agents
    batch = args.prompts * args.num_generations
    every_row: dict[str, Any] = {}
    if "skip_zero_advantages" in GRPOConfig.__dataclass_fields__:
        every_row = {"skip_zero_advantages": False}
        how = "skip_zero_advantages=False"
    else:  # older marft: an entropy bonus of 1e-9 forces every row through the update
        every_row = {"entropy_coef": 1e-9}
        how = "entropy_coef=1e-9"
    config = GRPOConfig(
        iterations=args.updates,
        episodes_per_iteration=batch,
        rollout_threads=batch,
        num_generations=args.num_generations,
        max_new_tokens=args.max_new_tokens,
        learning_rate=args.learning_rate,
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        seed=0,
        **every_row,
    )
    served = [0]

    class FixedProblemsGRPO(GRPOTrainer):
        """Draws the benchmark's problems in order instead of random seeds; keeps the last batch."""

        last_episodes: list[Any] = []

        def collect_with_stats(self) -> tuple[list[Any], dict[str, Any]]:
            episodes, stats = super().collect_with_stats()
            self.last_episodes = episodes
            return episodes, stats

        def _group_requests(self, n_groups: int, first_group: int) -> list[EpisodeRequest]:
            start = served[0]
            served[0] += n_groups
            return [
                EpisodeRequest(seed=i, options={"index": i}, group=first_group + g)
                for g, i in enumerate(range(start, start + n_groups))
                for _ in range(self.config.num_generations)
            ]

    policy = MultiAgentPolicy.from_pretrained(
        args.model,
        agents,
        lora=LoraSettings(),
        seed=0,
        device=args.device,
        torch_dtype=getattr(torch, args.dtype),
    )
    if args.fixed_length:
        for agent in agents:
            policy.backbone(agent).eos_ids = []
    backend = None
    if args.rollout_backend == "vllm":
        from marft_algos.rollout.vllm import VLLMRolloutBackend, VLLMSettings

        settings = VLLMSettings(gpu_memory_utilization=args.vllm_gpu_memory_utilization)
        backend = VLLMRolloutBackend(policy, settings)
    trainer = FixedProblemsGRPO(policy, env_fn, config, rollout_backend=backend)
    return trainer, {"every_row": how, "agents": agents}


def trl_rows(args: argparse.Namespace, data: Any) -> list[dict[str, Any]]:
    """The same problems as marft's, as TRL dataset rows (chat messages + gold answer)."""
    import marft_envs

    env = marft_envs.make(ENV_ID, dataset=data)
    rows = []
    for i in range(args.updates * args.prompts):
        env.reset(seed=i, options={"index": i})
        messages = env.observe(env.agent_selection)["messages"]
        rows.append({"prompt": [dict(m) for m in messages], "gold": data[i].answer})
    return rows


def run_grpo(args: argparse.Namespace, costs: dict[str, float], peaks: dict[str, float]) -> dict:
    """Alternate marft and TRL updates; per-update times, tokens and ceiling shares."""
    import trl
    from datasets import Dataset
    from transformers import TrainerCallback

    from marft_algos.policy import LoraSettings
    from marft_algos.policy.pretrained import resolve_model
    from marft_envs.math import grade_answer

    data = _problems(args)
    marft_trainer, info = build_marft(args, data)
    tokenizer = marft_trainer.policy.tokenizer(info["agents"][0])
    marft_rows: list[dict[str, Any]] = []
    trl_updates: list[dict[str, Any]] = []
    pending: dict[str, Any] = {"tokens": [], "prompt_lens": [], "generate_s": 0.0}

    def math_reward(
        completions: list[list[dict[str, str]]],
        gold: list[str],
        completion_ids: list[list[int]] | None = None,
        prompts: list[Any] | None = None,
        **_: Any,
    ) -> list[float]:
        """1.0 when the completion's boxed answer grades equal to the gold answer."""
        if completion_ids is not None:
            pending["tokens"] = [len(c) for c in completion_ids]
        if prompts is not None:
            pending["prompt_lens"] = [
                len(
                    tokenizer.apply_chat_template(
                        p, add_generation_prompt=True, tokenize=True, return_dict=False
                    )
                )
                for p in prompts
            ]
        return [
            float(grade_answer(c[0]["content"], g)) for c, g in zip(completions, gold, strict=True)
        ]

    def marft_update() -> None:
        start = time.perf_counter()
        record = marft_trainer.train_iteration()
        seconds = time.perf_counter() - start
        decisions = [d for e in marft_trainer.last_episodes for d in e.decisions]
        tokens = float(sum(len(d.action_ids) for d in decisions))
        marft_rows.append(
            {
                "seconds": seconds,
                "rollout_s": float(record["time/rollout_s"]),
                "update_s": float(record["time/update_s"]),
                "generated_tokens": tokens,
                "prompt_lens": [len(d.prompt_ids) for d in decisions],
                "action_lens": [len(d.action_ids) for d in decisions],
                "reward_mean": float(record["rollout/reward_mean"]),
            }
        )
        print(f"marft update {len(marft_rows)}: {seconds:.1f} s, {tokens:.0f} tokens", flush=True)

    class Alternate(TrainerCallback):
        """Runs one marft update before each TRL step and times the TRL step."""

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            marft_update()
            pending["generate_s"] = 0.0
            pending["start"] = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            seconds = time.perf_counter() - pending["start"]
            trl_updates.append(
                {
                    "seconds": seconds,
                    "rollout_s": pending["generate_s"],
                    "generated_tokens": float(sum(pending["tokens"])),
                    "prompt_lens": list(pending["prompt_lens"]),
                    "action_lens": list(pending["tokens"]),
                }
            )
            print(
                f"TRL update {len(trl_updates)}: {seconds:.1f} s, {sum(pending['tokens'])} tokens",
                flush=True,
            )

    batch = args.prompts * args.num_generations
    trl_extra: dict[str, Any] = {}
    if args.fixed_length:
        trl_extra["generation_kwargs"] = {"min_new_tokens": args.max_new_tokens}
    if args.rollout_backend == "vllm":
        trl_extra.update(
            use_vllm=True,
            vllm_mode="colocate",
            vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization,
        )
    config = trl.GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-real-"),
        use_cpu=args.device == "cpu",
        bf16=args.dtype == "bfloat16",
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        seed=0,
        max_steps=args.updates,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=args.num_generations,
        max_completion_length=args.max_new_tokens,
        learning_rate=args.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        optim="adamw_torch",
        weight_decay=0.0,
        adam_epsilon=1e-5,
        max_grad_norm=0.5,
        beta=0.0,
        epsilon=0.2,
        loss_type="dapo",
        scale_rewards="group",
        num_iterations=1,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        shuffle_dataset=False,
        gradient_checkpointing=False,
        disable_dropout=True,
        model_init_kwargs={"dtype": getattr(torch, args.dtype)},
        **trl_extra,
    )
    trainer = trl.GRPOTrainer(
        model=resolve_model(args.model),
        reward_funcs=math_reward,
        args=config,
        train_dataset=Dataset.from_list(trl_rows(args, data)),
        peft_config=LoraSettings().to_peft(),
        callbacks=[Alternate()],
    )
    generate = trainer.model.generate

    def timed_generate(*a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return generate(*a, **k)
        finally:
            pending["generate_s"] += time.perf_counter() - start

    trainer.model.generate = timed_generate
    trainer.train()

    w = args.warmup_updates
    result: dict[str, Any] = {"every_row": info["every_row"], "trl_version": trl.__version__}
    for name, rows in (("marft", marft_rows), ("trl", trl_updates)):
        timed = rows[w:]
        med = statistics.median(r["seconds"] for r in timed)
        tokens = statistics.median(r["generated_tokens"] for r in timed)
        rollout = statistics.median(r["rollout_s"] for r in timed)
        shares = []
        for r in timed:
            budget = work(costs, r["prompt_lens"], r["action_lens"], args.num_generations)
            shares.append(
                {
                    "flop_share_update": budget["total_flops"]
                    / r["seconds"]
                    / peaks["matmul_flops"],
                    "flop_share_rollout": budget["rollout_flops"]
                    / r["rollout_s"]
                    / peaks["matmul_flops"],
                    "bandwidth_share_rollout": budget["decode_weight_bytes"]
                    / r["rollout_s"]
                    / peaks["bandwidth"],
                }
            )
        result[name] = {
            "updates": rows,
            "median_update_s": med,
            "median_rollout_s": rollout,
            "median_generated_tokens": tokens,
            "generated_tokens_per_s": statistics.median(
                r["generated_tokens"] / r["seconds"] for r in timed
            ),
            **{k: statistics.median(s[k] for s in shares) for k in shares[0]},
        }
    result["time_ratio_marft_over_trl"] = (
        result["marft"]["median_update_s"] / result["trl"]["median_update_s"]
    )
    print(
        f"GRPO update, median: marft {result['marft']['median_update_s']:.1f} s, TRL "
        f"{result['trl']['median_update_s']:.1f} s -> marft/TRL "
        f"{result['time_ratio_marft_over_trl']:.2f}x",
        flush=True,
    )
    return result


# ------------------------------------------------------------------------------------ generate
def run_generate(
    args: argparse.Namespace, costs: dict[str, float], peaks: dict[str, float]
) -> dict:
    """``MultiAgentPolicy.generate`` vs plain ``generate`` of the merged model, same tokens."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, GenerationConfig

    import marft_envs
    from marft_algos.policy import LoraSettings, MultiAgentPolicy
    from marft_algos.policy.forward import left_pad
    from marft_algos.policy.pretrained import resolve_model
    from marft_algos.protocols import GenerationSettings

    data = _problems(args)
    policy = MultiAgentPolicy.from_pretrained(args.model, ["actor"], lora=LoraSettings(), seed=0)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in policy.backbone("actor").named_adapter_parameters("actor"):
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.01)
    env = marft_envs.make(ENV_ID, dataset=data)
    prompts = []
    for i in range(args.generate_batch):
        env.reset(seed=i, options={"index": i})
        prompts.append(policy.render("actor", env.observe("actor")))

    with tempfile.TemporaryDirectory() as tmp:
        policy.save_adapters(tmp)
        base = AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32)
        plain = PeftModel.from_pretrained(base, str(Path(tmp) / "actor")).merge_and_unload()
    plain.eval()
    backbone = policy.backbone("actor")
    plain.generation_config = GenerationConfig(pad_token_id=backbone.pad_id, eos_token_id=None)
    ids, mask = left_pad(prompts, backbone.pad_id, "cpu")
    n = args.max_new_tokens
    eos = backbone.eos_ids

    def ours() -> int:
        backbone.eos_ids = []  # no end-of-turn: every row generates n tokens
        try:
            gens = policy.generate_from_ids(
                "actor", prompts, GenerationSettings(max_new_tokens=n, seed=1)
            )
        finally:
            backbone.eos_ids = eos
        return sum(len(g.action_ids) for g in gens)

    def merged() -> int:
        with torch.no_grad():
            out = plain.generate(
                input_ids=ids,
                attention_mask=mask,
                max_new_tokens=n,
                do_sample=True,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                use_cache=True,
            )
        return int(out.shape[0] * (out.shape[1] - ids.shape[1]))

    timings: dict[str, list[float]] = {"marft": [], "merged_plain": []}
    tokens: dict[str, int] = {}
    runs: list[tuple[str, Callable[[], int]]] = [("marft", ours), ("merged_plain", merged)]
    for r in range(args.generate_repeats):
        for name, fn in runs if r % 2 == 0 else runs[::-1]:
            start = time.perf_counter()
            tokens[name] = fn()
            timings[name].append(time.perf_counter() - start)
            print(f"generate {name}: {timings[name][-1]:.1f} s, {tokens[name]} tokens", flush=True)
    prompt_lens = [len(p) for p in prompts]
    budget = work(costs, prompt_lens, [n] * len(prompts))
    result: dict[str, Any] = {"batch": len(prompts), "max_new_tokens": n}
    for name in timings:
        med = statistics.median(timings[name])
        result[name] = {
            "seconds": timings[name],
            "median_s": med,
            "tokens": tokens[name],
            "tokens_per_s": tokens[name] / med,
            "flop_share": budget["rollout_flops"] / med / peaks["matmul_flops"],
            "bandwidth_share": budget["decode_weight_bytes"] / med / peaks["bandwidth"],
        }
    result["time_ratio_marft_over_merged"] = (
        result["marft"]["median_s"] / result["merged_plain"]["median_s"]
    )
    print(
        f"generate {len(prompts)} x {n}: marft {result['marft']['median_s']:.1f} s, merged plain "
        f"{result['merged_plain']['median_s']:.1f} s -> {result['time_ratio_marft_over_merged']:.2f}x",
        flush=True,
    )
    return result


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the phases, write the results JSON."""
    args = parse_args(argv)
    if args.updates <= args.warmup_updates:
        raise SystemExit(
            f"--updates ({args.updates}) must exceed --warmup-updates ({args.warmup_updates})."
        )
    if args.device != "cpu" and args.phase != "grpo":
        raise SystemExit(f"--device {args.device} needs --phase grpo (generate runs on the CPU).")
    import transformers

    from marft_algos.policy import MultiAgentPolicy

    torch.set_num_threads(args.threads)
    peaks = ceilings(args.device)
    probe = MultiAgentPolicy.from_pretrained(
        args.model, ["actor"], seed=0, device=args.device, torch_dtype=getattr(torch, args.dtype)
    )
    costs = _speed_module().model_costs(probe, "actor")
    costs["decode_weight_bytes"] *= (
        torch.finfo(getattr(torch, args.dtype)).bits / 32
    )  # counted in fp32
    del probe
    print(
        f"ceilings: {peaks['matmul_flops'] / 1e9:.1f} GFLOP/s, {peaks['bandwidth'] / 1e9:.2f} GB/s",
        flush=True,
    )
    results: dict[str, Any] = {
        "settings": {
            k: v for k, v in vars(args).items() if k not in ("results", "data", "data_dir")
        },
        "data": Path(_data_source(args)).name,  # the file's name only: no machine's folders
        "run_info": run_info([ENV_ID]),
        "ceilings": peaks,
        "model_costs": costs,
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads(),
            "load_average": os.getloadavg(),
        },
    }
    if args.phase in ("generate", "both"):
        results["generate"] = run_generate(args, costs, peaks)
        Path(args.results).write_text(json.dumps(results, indent=2))  # kept if GRPO fails
    if args.phase in ("grpo", "both"):
        results["grpo"] = run_grpo(args, costs, peaks)
    results["machine"]["load_average_end"] = os.getloadavg()
    Path(args.results).write_text(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
