"""The metrics table and its sinks: ``metrics.jsonl`` (one record per iteration), optional TensorBoard.

:data:`METRICS` names every metric a trainer logs, with its one meaning; every trainer uses these
names with these meanings, and the table in ``docs/training.md`` is :func:`metrics_table` (a test
compares them).
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["METRICS", "MetricsLogger", "is_documented", "metrics_table"]

logger = logging.getLogger(__name__)

#: Every name a metrics record holds, with its meaning. ``<agent>`` stands for an agent's name
#: and ``<name>`` for the rest of a name. Statistics of policy steps (``train/policy_loss`` to
#: ``train/grad_norm``) are absent from an iteration that took no policy step
#: (``train/skipped_empty`` is then 1).
METRICS: dict[str, str] = {
    "iteration": "the iteration the record follows (0: the evaluation before training)",
    "iteration_kind": "`initial_eval` on the record of the evaluation before training",
    "rollout/episodes": "episodes the iteration ran (every process's), failed ones included",
    "rollout/reward_mean": "mean team return (the sum of the round rewards) of those episodes "
    "that finished (failed ones, `rollout/episodes_failed`, are left out; absent when none "
    "finished)",
    "rollout/accuracy": "share of those episodes the team solved (a failed one counts as wrong)",
    "rollout/accuracy_se": "binomial standard error of `rollout/accuracy`, √(p(1−p)/n)",
    "rollout/accuracy/<agent>": "share of those episodes in which the agent's graded answer was right",
    "rollout/action_tokens_mean": "generated tokens per decision, mean over the decisions",
    "rollout/action_cut_fraction": "share of decisions cut at their token cap (`max_new_tokens`)",
    "rollout/reward_mean/<agent>": "reward the agent received per episode (the sum of its "
    "decisions' rewards), mean over the finished episodes",
    "rollout/action_tokens_mean/<agent>": "the agent's generated tokens per decision",
    "rollout/action_cut_fraction/<agent>": "share of the agent's decisions cut at their token cap",
    "rollout/info/<name>": "mean of the numeric or boolean value `info[<name>]` of the episodes' "
    "final info, over the episodes that report it (an env's own counters)",
    "rollout/reward/<name>": 'mean of the named reward part (`info["reward_parts"]` of an env or '
    "agent program; a program's before its weight) over the finished episodes",
    "rollout/prefill_tokens": "prompt tokens the rollouts ran through the model (the policy's own "
    "generation; absent when a vLLM engine or an asynchronous worker generated)",
    "rollout/prefill_tokens_saved": "prompt tokens of the rollouts' calls not run: repeated "
    "prompts, beginnings shared within a call, beginnings kept from earlier calls under the same "
    "weights (`prefix_store_tokens`)",
    "train/prompt_tokens": "prompt tokens the update's forward passes ran through the model "
    "(every pass: current policy, reference, proximal)",
    "train/prompt_tokens_saved": "prompt tokens of the update's rows not run: repeated prompts "
    "and beginnings shared within a chunk (`shared_prefix_tokens`)",
    "rollout/calls/<agent>": "the agent's model calls (decisions) per episode",
    "rollout/episodes_failed": "agent programs: share of the iteration's episodes that failed "
    "(the program raised, returned no finite reward, timed out, passed a bound or used up "
    "`max_calls`)",
    "rollout/program_errors": "agent programs: how many episodes failed (as `rollout/episodes_failed`)",
    "rollout/program_errors/<name>": "agent programs: how many failed of the kind `<name>` "
    "(`Timeout`, `ValueError`, `PromptTooLong`, `max_calls`, ...)",
    "rollout/episodes_dropped": "failed episodes left out of the update (agent programs' on_error='drop'; transcripts in program_errors.jsonl)",
    "rollout/nothing_to_learn": "1 when the rewards carry no signal (every critic-free group "
    "flat, or every decision rewarded alike); a warning says so",
    "rollout/zero_std_fraction": "critic-free, `num_generations` ≥ 2: share of (episode, agent) "
    "samples whose group's rewards are all equal (advantage 0)",
    "rollout/groups_dropped": "critic-free: groups dropped by dynamic sampling for equal rewards "
    "(0 without it)",
    "rollout/resample_rounds": "critic-free: extra sampling rounds dynamic sampling ran to refill "
    "the batch (0 without it)",
    "branch/<agent>/value_spread": "`branch`: mean over the agent's sibling groups (same state, "
    "same upstream choice) of the largest minus the smallest sibling value; for a branched agent, "
    "how much its choice changed the team's return",
    "branch/<agent>/flat_share": "`branch`: share of the agent's sibling groups whose values are "
    "all equal (advantage 0, nothing to learn)",
    "branch/alone_samples": "`branch`: (node, agent) samples without a valued sibling, trained "
    "on advantage 0",
    "branch/dropped_samples": "`branch`: (node, agent) samples whose every episode was dropped",
    "rollout/staleness": "`max_staleness` ≥ 1: mean over the batch's decisions of the updates "
    "applied since the adapters that sampled them (0: fresh)",
    "rollout/staleness_max": "`max_staleness` ≥ 1: the largest staleness of the batch's decisions",
    "rollout/dropped_stale": "`max_staleness` ≥ 1: batches dropped for being more than "
    "`max_staleness` versions old (sampled again)",
    "rollout/logprob_mismatch_mean": "`engine_correction` on: mean over the tokens of the fresh decisions the update trains "
    "(critic-free: those with a non-zero advantage) of the absolute gap log π_trainer − log π_engine, the update's recomputation against the rollout's "
    "log-probs (tokens the trainer's top-k/top-p cut excludes are left out)",
    "rollout/logprob_mismatch_max": "`engine_correction` on: the largest such gap",
    "rollout/logprob_mismatch_cut": "`engine_correction` on: share of those tokens that the "
    "trainer's top-k/top-p cut excludes (the engine sampled them; their weight is 0)",
    "rollout/logprob_mismatch_mean/<agent>": "as `rollout/logprob_mismatch_mean`, the agent's tokens",
    "rollout/logprob_mismatch_max/<agent>": "as `rollout/logprob_mismatch_max`, the agent's tokens",
    "eval/episodes": "held-out episodes of the greedy evaluation (before training, every "
    "`eval_every`, at the end)",
    "eval/reward_mean": "mean team return of those episodes that finished (failed ones left out)",
    "eval/accuracy": "share of those episodes the team solved (a failed one counts as wrong)",
    "eval/accuracy_se": "binomial standard error of `eval/accuracy`, √(p(1−p)/n)",
    "eval/reward/<name>": "as `rollout/reward/<name>`, on the held-out episodes",
    "eval/calls/<agent>": "as `rollout/calls/<agent>`, on the held-out episodes",
    "eval/episodes_failed": "agent programs: as `rollout/episodes_failed`, on the held-out "
    "episodes (each has a console line and its transcript in program_errors.jsonl)",
    "eval/program_errors": "agent programs: as `rollout/program_errors`, on the held-out episodes",
    "eval/program_errors/<name>": "agent programs: as `rollout/program_errors/<name>`, on the "
    "held-out episodes",
    "eval/accuracy/<agent>": "share of those episodes in which the agent's graded answer was right",
    "eval/action_tokens_mean": "generated tokens per decision of those episodes",
    "eval/action_cut_fraction": "share of their decisions cut at the token cap",
    "eval/reward_mean/<agent>": "as `rollout/reward_mean/<agent>`, on the held-out episodes",
    "eval/action_tokens_mean/<agent>": "as `rollout/action_tokens_mean/<agent>`, on the held-out "
    "episodes",
    "eval/action_cut_fraction/<agent>": "as `rollout/action_cut_fraction/<agent>`, on the "
    "held-out episodes",
    "eval/info/<name>": "as `rollout/info/<name>`, on the held-out episodes",
    "eval_sampled/<name>": "with `eval_sampled=True`: `eval/<name>` of the same episodes sampled "
    "as in training",
    "train/agents": "the agents whose adapters the iteration trained, comma-separated",
    "train/policy_loss": "the clipped surrogate term of the policy objective (weighted as the "
    "loss), mean over the policy steps",
    "train/entropy": "token entropy of the trained actions, weighted as the loss, mean over the "
    "policy steps",
    "train/ratio_mean": "ratio π_θ/π_old over a step's entries (decisions at action level, tokens "
    'at token level), mean over the policy steps; with `importance_sampling_level="sequence"` '
    "(GSPO) each token carries its sequence's ratio, so it is a mean over tokens, where TRL's is "
    'over sequences ({doc}`maths`, "Sequence-level ratios")',
    "train/approx_kl": "k3 approx-KL(π_old ‖ π_θ) over the entries of the first policy step, "
    "before its optimizer step (≈0: rollout and update log-probs agree)",
    "train/clip_fraction": "share of the first policy step's entries whose clipped term is "
    "active, before its optimizer step (under GSPO a share of tokens, as `train/ratio_mean`)",
    "train/approx_kl_last": "`train/approx_kl` of the last policy step, before its optimizer step "
    "(how far the earlier steps moved the policy)",
    "train/approx_kl_after": "with `trust_region_kl`: approx-KL after each step on its own "
    "minibatch (what the cut compares), mean over the policy steps",
    "train/kl": "with `beta` > 0: KL to the reference policy (adapters off) per token: GRPO's k3 "
    "term of the loss, mean over the policy steps; RLOO's and REINFORCE++'s penalty in the reward",
    "train/grad_norm": "gradient norm of the adapters before clipping (summed over optimizers), "
    "mean over the policy steps",
    "train/skipped_nonfinite": "policy steps skipped or undone for a non-finite loss, gradient "
    "or weight",
    "train/skipped_trust_region": "policy steps undone by the trust-region cut (`trust_region_kl`)",
    "train/skipped_empty": "1 when the update took no policy step (no trained decision, or every "
    "advantage 0)",
    "train/advantage_abs_mean": "mean absolute advantage over the trained agents' entries (decisions at action "
    "level, tokens at token level), as the objective uses them",
    "train/policy_loss/<agent>": "`train/policy_loss` over the agent's own entries (their "
    "weighted mean), mean over the policy steps",
    "train/entropy/<agent>": "`train/entropy` over the agent's own entries",
    "train/approx_kl/<agent>": "`train/approx_kl` over the agent's own entries (first policy step)",
    "train/clip_fraction/<agent>": "`train/clip_fraction` over the agent's own entries (first "
    "policy step)",
    "train/advantage_mean/<agent>": "mean advantage over the agent's entries",
    "train/advantage_abs_mean/<agent>": "`train/advantage_abs_mean` over the agent's entries",
    "train/grad_norm/<agent>": "gradient norm of the agent's adapter before clipping, mean over "
    "the applied policy steps; an adapter that several agents share is named by them joined "
    "with `+` (e.g. `critic+planner`)",
    "train/learning_rate/<agent>": "the Adam learning rate the agent's adapter stepped with "
    "(`learning_rate`, `agent_learning_rates`); 0 while `agent_schedule` freezes it",
    "train/value_mean": "actor-critic: mean critic value of the batch's entries at rollout",
    "train/value_loss": "actor-critic: critic loss (Huber or MSE to the returns), mean over "
    "minibatches",
    "train/entropy_blowup": "1 when `train/entropy` exceeds `entropy_blowup_factor` × its early "
    "average (the entropy guard)",
    "train/rolled_back": "1 when the guard restored the last good iteration (`rollback_on_blowup`)",
    "time/rollout_s": "wall time of the rollouts, seconds",
    "time/update_s": "wall time of the update, seconds",
    "memory/rollout_peak_gib": "on GPUs: the most device memory any process held in tensors "
    "during the iteration's rollout, GiB (`torch.cuda.max_memory_allocated`; with asynchronous "
    "rollouts, while it waited for the batch); absent on CPUs",
    "memory/update_peak_gib": "on GPUs: the same during the update (under `--fsdp`, what the "
    "sharding saves); absent on CPUs",
    "sft/loss/<agent>": "`marft sft` (one record per epoch, `iteration` the epoch): the agent's "
    "negative log-likelihood per trained token over the epoch, each step's taken before its update",
    "sft/tokens/<agent>": "`marft sft`: tokens the agent's loss covered in the epoch (its replies' "
    "with `completion_only_loss`)",
    "sft/examples/<agent>": "`marft sft`: the agent's replies trained on in each epoch",
    "sft/steps/<agent>": "`marft sft`: optimizer steps of the agent's adapter in the epoch (an "
    "adapter several agents share is named by the first)",
}

_PLACEHOLDERS = {"<agent>": "[^/]+", "<name>": ".+"}


def _pattern(name: str) -> re.Pattern[str]:
    parts = re.split(r"(<agent>|<name>)", name)
    return re.compile("".join(_PLACEHOLDERS.get(p, re.escape(p)) for p in parts) + r"\Z")


_PATTERNS = [_pattern(name) for name in METRICS]


def is_documented(name: str) -> bool:
    """Whether ``name`` is in :data:`METRICS` (placeholders match any agent or name)."""
    return any(p.match(name) for p in _PATTERNS)


def metrics_table() -> str:
    """:data:`METRICS` as the Markdown table of ``docs/training.md``."""
    rows = ["| name | meaning |", "|---|---|"]
    rows += [f"| `{name}` | {meaning} |" for name, meaning in METRICS.items()]
    return "\n".join(rows) + "\n"


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them visible instead of crashing
    return value


class MetricsLogger:
    """Appends metric records to ``<output_dir>/metrics.jsonl`` and, optionally, TensorBoard.

    Args:
        output_dir: Run directory; None keeps records in memory only.
        tensorboard: Also write TensorBoard scalars under ``<output_dir>/tensorboard`` (without the
            tensorboard package: one warning, and the records go to metrics.jsonl only).
    """

    def __init__(self, output_dir: str | Path | None, *, tensorboard: bool = False) -> None:
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.records: list[dict[str, Any]] = []
        self._writer = None
        if self.output_dir is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            if tensorboard:
                try:
                    from torch.utils.tensorboard import SummaryWriter
                except ImportError:
                    # An optional extra never stops a run: the records still go to metrics.jsonl.
                    logger.warning(
                        "tensorboard=True but the tensorboard package is not installed (pip "
                        "install tensorboard); this run logs to %s only.",
                        self.path,
                    )
                else:
                    self._writer = SummaryWriter(str(self.output_dir / "tensorboard"))
        elif tensorboard:
            raise ValueError("tensorboard=True needs an output_dir to write to.")

    @property
    def path(self) -> Path | None:
        return self.output_dir / "metrics.jsonl" if self.output_dir is not None else None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Record one iteration's metrics."""
        record = {"iteration": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        self.records.append(record)
        if self.path is not None:
            try:
                with self.path.open("a") as f:
                    f.write(json.dumps(record) + "\n")
            except OSError as exc:
                from marft_algos.runs.folder import disk_full_error

                full = disk_full_error(exc, self.path.parent)
                if full is None:
                    raise
                # A torn last line is dropped on reading, so the folder stays resumable.
                raise full from exc
        if self._writer is not None:
            for key, value in metrics.items():
                if isinstance(value, int | float):
                    self._writer.add_scalar(key, value, step)
            self._writer.flush()

    def log_text(self, tag: str, text: str, step: int) -> None:
        """Send text (e.g. held-out transcripts) to TensorBoard, when it is on."""
        if self._writer is not None:
            self._writer.add_text(tag, text, step)
            self._writer.flush()

    def read(self) -> list[dict[str, Any]]:
        """The records in ``metrics.jsonl``; a torn last line (a kill mid-write) is dropped with a
        warning, any other unreadable line is an error naming it."""
        if self.path is None or not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                if number == len(lines):
                    logger.warning(
                        "Dropping the torn last line of %s (the run was killed while writing it).",
                        self.path,
                    )
                    continue
                raise ValueError(
                    f"Line {number} of {self.path} is not JSON ({line[:80]!r}); the file was edited or "
                    f"corrupted. Fix or delete that line to resume."
                ) from None
        return records

    def warn_missing(self, iteration: int) -> None:
        """Say so when ``metrics.jsonl`` lacks records of iterations 1..``iteration`` (a resumed
        run whose file was deleted or replaced)."""
        if self.path is None:
            return
        have = {r.get("iteration") for r in self.read()} if self.path.is_file() else set()
        lost = [i for i in range(1, iteration + 1) if i not in have]
        if lost:
            logger.warning(
                "%s lacks the records of %d of the %d iterations before the checkpoint (%s); the "
                "run continues and its table, plots and learning curve will miss them. Restore "
                "the file from a backup to keep them.",
                self.path,
                len(lost),
                iteration,
                "missing" if not self.path.is_file() else f"first lost: {lost[0]}",
            )

    def truncate_after(self, step: int) -> None:
        """Keep only records up to ``step`` (a resumed run rewrites the iterations after its
        checkpoint); the file is replaced atomically and :attr:`records` reloaded from it."""
        kept = [
            r
            for r in (self.read() if self.path is not None else self.records)
            if r["iteration"] <= step
        ]
        self.records = kept
        if self.path is not None and self.path.exists():
            from marft_algos.runs.folder import write_atomic

            write_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
