"""Train ``marft-tiny-math``, the small pretrained math model shipped with marft.

The model is a small Llama causal LM with a byte-level BPE tokenizer (ChatML chat template, every
whole number up to 999 one token), trained from scratch, supervised, on the built-in generated
problems (``builtin:train``, ``digits`` family, levels 1-3; ``builtin:test`` is held out). Every
training prompt is rendered from the real environment observations of ``math-dual-v7`` and
``math-single-v7``, with the tokenizer's chat template, so the model sees at RL time exactly the
prompts it was trained on. Targets:

- reasoner (dual team): the worked steps of the solution, without the final ``\\boxed{}`` line;
- actor (dual team): ``\\boxed{<answer>}`` only, read off the reasoner's steps in its observation;
- actor (single agent): the full worked solution ending in ``\\boxed{<answer>}``.

For 80% of the problems that contain a product (``--long-style``), the reasoner's and the single
actor's targets are written in a long style instead: the task restated, the same steps, the result
repeated. Both styles are correct; the long one does not fit the 32-token message budget of the
demo for multi-step problems, so the untuned team loses those problems, and RL fine-tuning can
learn to answer in the short style (docs/builtin_model.md says what this means for the results).

Each target ends with ``<|im_end|>``, the token on which ``MultiAgentPolicy.generate`` stops. The
loss covers target tokens only. After training the script saves the model (float16 weights) and
tokenizer in Hugging Face format and evaluates the saved folder with the library itself
(``MultiAgentPolicy`` + ``RolloutCollector``, greedy and sampled) on ``builtin:test``.

Run from the repository root (the defaults are the packaged build's settings)::

    python scripts/train_builtin_model.py --output marft_algos/policy/pretrained/marft-tiny-math

``--eval-only`` measures an existing folder without training.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import marft_envs
from marft_algos.policy import MultiAgentPolicy, build_tiny_tokenizer
from marft_algos.policy.rendering import render_prompt_ids
from marft_algos.rollout.collector import GenerationSettings, RolloutCollector
from marft_algos.rollout.evaluation import evaluation_requests, summarize_episodes
from marft_envs.math.data import MathDataset, MathProblem, load_dataset
from marft_envs.math.profiles import DUAL_PROFILES, SINGLE_PROFILES, TRIO_PROFILES

DUAL_ENV = "math-dual-v7"
SINGLE_ENV = "math-single-v7"
EOS = "<|im_end|>"


# --- data --------------------------------------------------------------------------------------


def reasoner_target(problem: MathProblem) -> str:
    """The worked steps without the final ``\\boxed{}`` line (the reasoner must not box)."""
    lines = problem.solution.split("\n")
    return "\n".join(line for line in lines if "\\boxed" not in line)


def actor_target(problem: MathProblem) -> str:
    """The dual actor's short final answer."""
    return f"\\boxed{{{problem.answer}}}"


def single_target(problem: MathProblem) -> str:
    """The single actor's full solution, ending in ``\\boxed{}``."""
    return problem.solution


def long_preamble(problem: MathProblem) -> str:
    """The opening of the long style: the task restated before the worked steps."""
    task = problem.problem.strip().rstrip(".")
    if task.startswith("Compute "):
        task = task[len("Compute ") :]
    return f"We need {task}, one operation at a time:\n"


def long_reasoner_target(problem: MathProblem) -> str:
    """The reasoner's long style: the task restated, the worked steps, then the result in words."""
    return f"{long_preamble(problem)}{reasoner_target(problem)}\nSo the result is {problem.answer}."


def long_single_target(problem: MathProblem) -> str:
    """The single actor's long style: the task restated, then the full solution."""
    return f"{long_preamble(problem)}{problem.solution}"


def env_observations(problem_index: int, dual: Any, single: Any, steps: str) -> dict[str, list]:
    """The chat messages each role reads for problem ``problem_index``, straight from the envs.

    The dual actor's observation is taken after the reasoner has "said" ``steps``, so the env
    itself formats the reasoner's message exactly as it will at RL time.
    """
    out: dict[str, list] = {}
    dual.reset(options={"index": problem_index})
    assert dual.agent_selection == "reasoner"
    out["reasoner"] = dual.observe("reasoner")["messages"]
    dual.step(steps)
    assert dual.agent_selection == "actor"
    out["actor"] = dual.observe("actor")["messages"]
    single.reset(options={"index": problem_index})
    out["single"] = single.observe("actor")["messages"]
    return out


def tokenizer_corpus(problems: Sequence[MathProblem]) -> list[str]:
    """Tokenizer training text: every profile prompt (repeated, so they merge into few tokens),
    the env's message framing, problem texts and solutions."""
    prompts = [p.system_prompt for p in (*SINGLE_PROFILES, *DUAL_PROFILES, *TRIO_PROFILES)]
    corpus = prompts * 50
    # The chat template's role names and the env's message framing appear in every prompt.
    framing = [
        "system\n",
        "user\n",
        "assistant\n",
        "Problem: ",
        "[reasoner]\n",
        "[actor]\n",
        "\\boxed{",
    ]
    corpus += [*framing, "Attempt 1: the team answered 7, which is incorrect."] * 50
    corpus += [f"Problem: {p.problem}" for p in problems]
    corpus += [p.solution for p in problems]
    corpus += [long_reasoner_target(p) for p in problems]
    return corpus


def build_examples(
    tokenizer: Any,
    problems: Sequence[MathProblem],
    dataset: MathDataset,
    mix: dict[str, float],
    rng: random.Random,
    long_style: float = 0.0,
) -> list[tuple[list[int], list[int], str]]:
    """``(prompt ids, target ids + EOS, role)`` triples rendered from the real env observations.

    ``mix`` gives the fraction of problems that give an example for each role (1.0 = every
    problem). With probability ``long_style``, a problem with a product (``\\times``) gets reasoner
    and single-actor targets in the long style (the task restated first, every step kept, the
    result repeated): correct, but longer than a 32-token message budget for multi-step problems.
    The dual actor always boxes the last result of the reasoner's message, whichever style it is.
    """
    dual = marft_envs.make(DUAL_ENV, dataset=dataset)
    single = marft_envs.make(SINGLE_ENV, dataset=dataset)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    examples = []
    for i, problem in enumerate(problems):
        long = "\\times" in problem.problem and rng.random() < long_style
        steps = long_reasoner_target(problem) if long else reasoner_target(problem)
        obs = env_observations(i, dual, single, steps)
        single_text = long_single_target(problem) if long else single_target(problem)
        targets = {"reasoner": steps, "actor": actor_target(problem), "single": single_text}
        for role, target in targets.items():
            if rng.random() >= mix[role]:
                continue
            prompt = render_prompt_ids(tokenizer, obs[role])
            ids = [*tokenizer.encode(target, add_special_tokens=False), eos_id]
            examples.append((prompt, ids, role))
    return examples


# --- model and training ------------------------------------------------------------------------


def build_model(tokenizer: Any, args: argparse.Namespace) -> Any:
    """A freshly initialised Llama causal LM sized by the command line.

    Llama rather than Qwen2: ``AutoTokenizer`` rebuilds a Qwen2 folder's pre-tokeniser (every digit
    split), which would undo the whole-number tokens; for a Llama folder it loads
    ``tokenizer.json`` as saved, which is how Llama 3 ships its byte-level BPE tokenizer.
    """
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=args.hidden,
        intermediate_size=args.intermediate or 4 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads or args.heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        attention_dropout=0.0,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    return model


def make_batch(
    examples: Sequence[tuple[list[int], list[int], str]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``(input_ids, attention_mask, labels)``; labels are -100 outside targets."""
    width = max(len(p) + len(t) for p, t, _ in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(examples), width), dtype=torch.long)  # (B, T)
    labels = torch.full((len(examples), width), -100, dtype=torch.long)  # (B, T)
    for row, (prompt, target, _) in enumerate(examples):
        seq = prompt + target
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
        labels[row, len(prompt) : len(seq)] = torch.tensor(target)
    return ids, mask, labels


def batches(
    examples: list[tuple[list[int], list[int], str]], batch_size: int, rng: random.Random
) -> list[list[tuple[list[int], list[int], str]]]:
    """One epoch of batches of similar lengths (less padding), in random order."""
    order = sorted(examples, key=lambda e: (len(e[0]) + len(e[1]), rng.random()))
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(chunks)
    return chunks


def train(model: Any, examples: list, pad_id: int, args: argparse.Namespace) -> None:
    """AdamW with linear warm-up and cosine decay, for ``args.steps`` steps or ``args.minutes``."""
    rng = random.Random(args.seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=args.lr, betas=(0.9, 0.98), weight_decay=0.01, eps=1e-8
    )
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    model.train()
    queue: list = []
    start, cpu_start = time.time(), time.process_time()
    running = 0.0
    for step in range(args.steps):
        if not queue:
            queue = batches(examples, args.batch_size, rng)
        ids, mask, labels = make_batch(queue.pop(), pad_id)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        running = loss.item() if step == 0 else 0.95 * running + 0.05 * loss.item()
        if step % 50 == 0 or step == args.steps - 1:
            # Wall time depends on what else the machine runs; process CPU time does not.
            wall, cpu = time.time() - start, time.process_time() - cpu_start
            print(
                f"step {step:5d}  loss {running:.4f}  lr {lr_at(step):.2e}  wall {wall:5.0f}s  cpu {cpu:5.0f}s",
                flush=True,
            )
    model.eval()


# --- evaluation with the library -----------------------------------------------------------------


def _shift_digits(text: str) -> str:
    """Every digit replaced by the next one (9 -> 0): same shape, wrong numbers."""
    return re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), text)


class CorruptReasoner:
    """Wraps a policy so the reasoner's message, as the env receives it, has its digits shifted.

    Used to check that the dual actor really reads the reasoner's steps: if it does, its accuracy
    collapses when those steps carry wrong numbers.
    """

    def __init__(self, policy: MultiAgentPolicy) -> None:
        self.policy = policy

    def generate(
        self,
        agent: str,
        messages_batch: list,
        settings: GenerationSettings,
        *,
        generator: torch.Generator | None = None,
    ) -> list[Any]:
        out = self.policy.generate(agent, messages_batch, settings, generator=generator)
        if agent != "reasoner":
            return out
        return [g._replace(text=_shift_digits(g.text)) for g in out]


def _settings(caps: dict[str, int], **kwargs: Any) -> GenerationSettings:
    """Generation settings with a length cap per agent where the collector supports one."""
    fields = getattr(GenerationSettings, "__dataclass_fields__", {})
    if "max_new_tokens_per_agent" in fields:
        return GenerationSettings(
            max_new_tokens=max(caps.values()), max_new_tokens_per_agent=caps, **kwargs
        )
    return GenerationSettings(max_new_tokens=max(caps.values()), **kwargs)


def evaluate(
    path: str | Path,
    dataset: MathDataset,
    num_problems: int,
    *,
    max_new_tokens: dict[str, int],
    sampled: bool = True,
    corrupt: bool = True,
    num_envs: int = 100,
    seed: int = 0,
) -> dict[str, Any]:
    """Accuracy of the saved model on ``dataset`` through MultiAgentPolicy + RolloutCollector."""
    results: dict[str, Any] = {}
    runs = [("dual", DUAL_ENV), ("single", SINGLE_ENV)]
    for team, env_id in runs:
        agents = marft_envs.make(env_id, dataset=dataset).possible_agents
        policy = MultiAgentPolicy.from_pretrained(str(path), agents, seed=seed)
        caps = {a: max_new_tokens[a if team == "dual" else "single"] for a in agents}
        modes = [("greedy", _settings(caps, do_sample=False))]
        if sampled:
            modes.append(("sampled", _settings(caps, do_sample=True, temperature=1.0)))
        wrappers: list[tuple[str, Any]] = [("", policy)]
        if corrupt and team == "dual":
            wrappers.append(("corrupt_reasoner_", CorruptReasoner(policy)))
        for prefix, pol in wrappers:
            for mode, settings in modes:
                if prefix and mode == "sampled":
                    continue
                collector = RolloutCollector.from_factory(
                    pol,
                    lambda env_id=env_id: marft_envs.make(env_id, dataset=dataset),
                    num_envs,
                    settings,
                    seed=seed,
                )
                t0 = time.time()
                episodes = collector.collect(evaluation_requests(collector, num_problems))
                metrics = summarize_episodes(episodes, "eval")
                key = f"{prefix}{team}_{mode}"
                results[key] = {
                    "accuracy": metrics["eval/accuracy"],
                    "n": len(episodes),
                    "action_tokens_mean": metrics.get("eval/action_tokens_mean"),
                    "action_cut_fraction": metrics.get("eval/action_cut_fraction"),
                    "seconds": round(time.time() - t0, 1),
                }
                print(f"{key:28s} {json.dumps(results[key])}", flush=True)
                if key in ("dual_greedy", "single_greedy"):
                    for e in episodes[:4]:
                        texts = " || ".join(repr(d.text) for d in e.decisions)
                        print(f"    gold={e.info.get('gold')!r}  {texts}", flush=True)
    return results


# --- entry point -------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--output", default="marft_algos/policy/pretrained/marft-tiny-math")
    p.add_argument("--levels", default="1,2,3", help="generator levels to train and evaluate on")
    p.add_argument(
        "--families", default="digits", help="comma-separated generator families (empty: all)"
    )
    p.add_argument("--train-size", type=int, default=8000, help="problems drawn from builtin:train")
    p.add_argument(
        "--mix",
        default="reasoner=1,actor=0.6,single=0.25",
        help="fraction of problems giving an example for each role",
    )
    p.add_argument(
        "--long-style",
        type=float,
        default=0.8,
        help="fraction of product problems whose reasoner and single-actor targets use the long style",
    )
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=0)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--vocab", type=int, default=1536)
    p.add_argument(
        "--number-digits",
        type=int,
        default=3,
        help="numbers are cut into pieces of up to this many digits, each one token (1: every digit)",
    )
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--seed", type=int, default=0)
    # One intra-op thread: for a model this small, a second thread buys little, and on a busy
    # machine OpenMP threads spin waiting for each other (measured: 10x slower per step).
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--eval-problems", type=int, default=200)
    p.add_argument("--eval-only", action="store_true", help="evaluate --output without training")
    p.add_argument("--no-sampled", action="store_true", help="skip the sampled evaluation")
    p.add_argument("--max-new-tokens", default="reasoner=32,actor=8,single=32")
    p.add_argument(
        "--results", default="", help="also write the evaluation results to this JSON file"
    )
    return p.parse_args(argv)


def _kv(text: str, cast: type) -> dict[str, Any]:
    return {k: cast(v) for k, v in (item.split("=") for item in text.split(","))}


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    torch.manual_seed(args.seed)
    levels = [int(v) for v in args.levels.split(",")]
    families = [f for f in args.families.split(",") if f] or None
    out = Path(args.output)
    max_new = _kv(args.max_new_tokens, int)
    print(f"levels={levels} families={families or 'all'}", flush=True)

    if not args.eval_only:
        t0 = time.time()
        train_set = load_dataset(
            "builtin:train", size=args.train_size, levels=levels, subjects=families
        )
        problems = list(train_set)
        print(f"train problems: {len(problems)} from builtin:train", flush=True)
        tokenizer = build_tiny_tokenizer(
            vocab_size=args.vocab,
            corpus=tokenizer_corpus(problems),
            number_digits=args.number_digits,
        )
        examples = build_examples(
            tokenizer,
            problems,
            train_set,
            _kv(args.mix, float),
            random.Random(args.seed),
            long_style=args.long_style,
        )
        counts: dict[str, list[int]] = {}
        for _prompt, target, role in examples:
            counts.setdefault(role, []).append(len(target))
        for role, lengths in counts.items():
            print(
                f"  {role:8s} examples {len(lengths):6d}  target tokens mean {sum(lengths) / len(lengths):.1f} "
                f"max {max(lengths)}",
                flush=True,
            )
        prompt_lengths = [len(p) for p, _, _ in examples]
        print(
            f"  prompt tokens mean {sum(prompt_lengths) / len(prompt_lengths):.1f} max {max(prompt_lengths)}",
            flush=True,
        )
        model = build_model(tokenizer, args)
        n_params = sum(p.numel() for p in model.parameters())
        print(
            f"model: Llama hidden={args.hidden} layers={args.layers} heads={args.heads} "
            f"vocab={len(tokenizer)} params={n_params:,}",
            flush=True,
        )
        train(model, examples, tokenizer.pad_token_id, args)
        out.mkdir(parents=True, exist_ok=True)
        model.to(torch.float16).save_pretrained(out)
        tokenizer.save_pretrained(out)
        size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
        print(f"saved to {out} ({size / 1e6:.2f} MB) after {time.time() - t0:.0f}s", flush=True)
        (out / "training_args.json").write_text(json.dumps(vars(args), indent=2) + "\n")

    test_set = load_dataset("builtin:test", levels=levels, subjects=families)
    t1 = time.time()
    results = evaluate(
        out, test_set, args.eval_problems, max_new_tokens=max_new, sampled=not args.no_sampled
    )
    print(f"evaluation took {time.time() - t1:.0f}s", flush=True)
    print(json.dumps(results, indent=2))
    if args.results:
        record = {
            "levels": levels,
            "families": families,
            "split": "builtin:test",
            "max_new_tokens": max_new,
            "results": results,
        }
        Path(args.results).write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
