"""Supervised warm start: each agent's adapter fine-tuned on its own replies in recorded episodes.

Read top to bottom: keep the episodes that pass the filter (team reward >= ``min_reward``, a user
function), turn every kept reply into an example of its agent (:mod:`~marft_algos.trainers.sft_examples`:
rendered as a rollout renders it, loss on the reply tokens only), then for each epoch and each
adapter, step its own Adam on shuffled batches of its agents' examples. An agent's examples reach
only its adapter (agents sharing an adapter pool theirs); a frozen agent's are left out.

The loss of a step is the summed negative log-likelihood of its labelled tokens divided by their
number (the mean over the step's tokens, as TRL's ``SFTTrainer`` averages over the tokens of a
batch with gradient accumulation). The run folder holds ``config.json``, ``metrics.jsonl`` (one
record per epoch) and ``checkpoint-<epochs>`` (the adapters, in the checkpoint layout of
:mod:`marft_algos.runs.checkpoint`; ``marft train --init-from`` starts RL from them).
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from marft_algos.runs.checkpoint import save_checkpoint
from marft_algos.runs.folder import RunDirectory, RunExistsError, write_atomic
from marft_algos.runs.metrics import MetricsLogger
from marft_algos.trainers.optimizers import adapter_optimizers, clip_and_step
from marft_algos.trainers.sft_config import SFTConfig
from marft_algos.trainers.sft_data import Transcript, keep_transcripts, load_filter
from marft_algos.trainers.sft_examples import SFTExample, build_examples, reply_log_likelihood

__all__ = ["SFTConfig", "SFTTrainer"]

logger = logging.getLogger(__name__)


class SFTTrainer:
    """Fine-tunes each agent's adapter on its own recorded replies (completion-only loss).

    Args:
        policy: The team's :class:`~marft_algos.policy.MultiAgentPolicy`, built for the agents of
            the env that RL will train (same order, base model and LoRA settings).
        transcripts: Recorded episodes (:func:`~marft_algos.trainers.sft_data.read_transcripts`).
        config: The settings.
        run_info: What the run folder records about the run (model, sources, env).

    Raises:
        ValueError: No example is left after the filter and the length limits.
    """

    algorithm = "sft"

    def __init__(
        self,
        policy: Any,
        transcripts: Sequence[Transcript],
        config: SFTConfig,
        *,
        run_info: Mapping[str, Any] | None = None,
    ) -> None:
        self.policy = policy
        self.config = config
        self.run_info = dict(run_info or {})
        keep = load_filter(config.filter) if config.filter else None
        self.kept = keep_transcripts(
            transcripts,
            min_reward=config.min_reward,
            keep=keep,
            allow_held_out=config.allow_held_out,
        )
        held_out = 0 if config.allow_held_out else sum(t.held_out for t in transcripts)
        self.examples, counts = build_examples(
            policy, self.kept, config.generation(), max_length=config.max_length
        )
        self.counts: Counter[str] = Counter(
            episodes_read=len(transcripts),
            episodes_held_out=held_out,
            episodes_kept=len(self.kept),
            **counts,
        )
        if held_out and not self.kept:
            raise ValueError(
                f"No example to train on: all {held_out} episodes read were recorded in an "
                f"evaluation (held-out problems: a run's samples.jsonl, marft eval's JSON, trace "
                f"episodes whose marft.split is not 'train'). Record training episodes instead "
                f"(marft train --trace-file F --trace-content), or pass --allow-held-out if these "
                f"problems will never be used to evaluate the tuned team."
            )
        if not self.examples:
            raise ValueError(
                f"No example to train on: {len(transcripts)} episodes read, {len(self.kept)} kept "
                f"by the filter (min_reward={config.min_reward}, filter={config.filter}), "
                f"{self._left_out()}. Lower --min-reward, check --filter, or raise --max-length."
            )
        agents = list(policy.agents)
        self.optimizers, self.optimizer_of = adapter_optimizers(
            policy, agents, config.learning_rate, config.adam_eps
        )
        self.logger = MetricsLogger(config.output_dir)
        self.epoch = 0

    def _left_out(self) -> str:
        parts = ("too_long", "empty", "tool_calls", "frozen", "cut_at_budget")
        return ", ".join(f"{k.replace('_', ' ')}: {self.counts[k]}" for k in parts)

    # ------------------------------------------------------------------ the loop
    def train(self) -> list[dict[str, Any]]:
        """Run every epoch; returns the metric records (one per epoch). With ``output_dir`` the
        run folder is written and the adapters saved as ``checkpoint-<epochs>``."""
        run_dir = None
        if self.config.output_dir is not None:
            run_dir = RunDirectory(self.config.output_dir)
            run_dir.acquire()
        try:
            if run_dir is not None:
                self._start_folder(run_dir)
            rng = np.random.default_rng(self.config.seed)
            for epoch in range(1, self.config.num_train_epochs + 1):
                self.epoch = epoch
                self.logger.log(epoch, self._epoch(rng))
            if run_dir is not None:
                self.save(run_dir.path / f"checkpoint-{self.config.num_train_epochs}")
        finally:
            if run_dir is not None:
                run_dir.release()
            self.logger.close()
        return self.logger.records

    def _start_folder(self, run_dir: RunDirectory) -> None:
        if run_dir.has_run():
            if not self.config.overwrite:
                raise RunExistsError(
                    f"{str(run_dir.path)!r} already holds {run_dir.describe()}; pass --overwrite "
                    f"to replace it, or choose another --output-dir."
                )
            run_dir.clear()
        record = {
            "algorithm": self.algorithm,
            **self.config.to_json(),
            "run": {**self.run_info, "counts": dict(self.counts)},
        }
        write_atomic(run_dir.config_path, json.dumps(record, indent=2, default=repr) + "\n")

    def _epoch(self, rng: np.random.Generator) -> dict[str, float]:
        per_key: dict[str, list[SFTExample]] = defaultdict(list)
        for example in self.examples:
            per_key[self.optimizer_of[example.agent]].append(example)
        nll: dict[str, float] = defaultdict(float)
        tokens: Counter[str] = Counter()
        steps: Counter[str] = Counter()
        rows = self.config.per_device_train_batch_size
        per_step = rows * self.config.gradient_accumulation_steps
        for key, pool in per_key.items():
            order = rng.permutation(len(pool))
            for start in range(0, len(pool), per_step):
                batch = [pool[i] for i in order[start : start + per_step]]
                step_nll, step_tokens = self._step(key, batch, rows)
                for agent, value in step_nll.items():
                    nll[agent] += value
                tokens.update(step_tokens)
                steps[key] += 1
        metrics: dict[str, float] = {}
        for agent in sorted(tokens):
            metrics[f"sft/loss/{agent}"] = nll[agent] / tokens[agent]
            metrics[f"sft/tokens/{agent}"] = float(tokens[agent])
            metrics[f"sft/examples/{agent}"] = float(sum(e.agent == agent for e in self.examples))
        for key, count in steps.items():
            metrics[f"sft/steps/{key}"] = float(count)
        return metrics

    def _step(
        self, key: str, batch: Sequence[SFTExample], rows: int
    ) -> tuple[dict[str, float], Counter[str]]:
        """One optimizer step of adapter ``key`` on ``batch`` (in passes of ``rows`` examples);
        returns each agent's summed negative log-likelihood and token count (before the step)."""
        optimizer = self.optimizers[key]
        optimizer.zero_grad(set_to_none=True)
        completion_only = self.config.completion_only_loss
        labelled = sum(
            len(e.completion_ids) if completion_only else len(e.input_ids) - 1 for e in batch
        )
        nll: dict[str, float] = defaultdict(float)
        tokens: Counter[str] = Counter()
        for start in range(0, len(batch), rows):
            chunk = batch[start : start + rows]
            by_agent: dict[str, list[SFTExample]] = defaultdict(list)
            for example in chunk:
                by_agent[example.agent].append(example)
            for agent, examples in by_agent.items():
                log_likelihood, count = reply_log_likelihood(
                    self.policy, agent, examples, completion_only=completion_only
                )
                # The step's mean over its labelled tokens, whatever the split into passes.
                (-log_likelihood / labelled).backward()
                nll[agent] += -float(log_likelihood.detach())
                tokens[agent] += count
        _, applied = clip_and_step([optimizer], self.config.max_grad_norm)
        if not applied:
            logger.warning("SFT step of adapter %s skipped: its gradient is not finite.", key)
        return nll, tokens

    # ------------------------------------------------------------------ saving
    def save(self, path: str | Path) -> Path:
        """Write the adapters as a checkpoint folder (what ``--init-from`` reads)."""
        metadata = {
            **self.run_info,
            "algorithm": self.algorithm,
            "sft": self.config.to_json(),
            "generation": {
                "max_new_tokens": self.config.max_new_tokens,
                "max_new_tokens_per_agent": dict(self.config.max_new_tokens_per_agent or {}),
            },
        }
        return save_checkpoint(
            path,
            self.policy,
            optimizers=self.optimizers,
            state={"epoch": self.epoch, "counts": dict(self.counts)},
            save_rng=False,
            metadata=metadata,
        )

    def mean_loss(self) -> dict[str, float]:
        """Each agent's mean negative log-likelihood per labelled token over all examples, under
        the current adapters (no gradient)."""
        by_agent: dict[str, list[SFTExample]] = defaultdict(list)
        for example in self.examples:
            by_agent[example.agent].append(example)
        out = {}
        rows = self.config.per_device_train_batch_size
        with torch.no_grad():
            for agent, examples in by_agent.items():
                total, count = 0.0, 0
                for start in range(0, len(examples), rows):
                    ll, n = reply_log_likelihood(
                        self.policy,
                        agent,
                        examples[start : start + rows],
                        completion_only=self.config.completion_only_loss,
                    )
                    total, count = total - float(ll), count + n
                out[agent] = total / count if count else math.nan
        return out
