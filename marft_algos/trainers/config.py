"""Settings every trainer shares (:class:`TrainerConfig`) and the checks its subclasses reuse."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from marft_algos.common.behaviour_weights import BEHAVIOUR_WEIGHT_CAP, BEHAVIOUR_WEIGHT_MODES
from marft_algos.rollout.branch_settings import parse_branch
from marft_algos.rollout.collector import GenerationSettings
from marft_algos.runs.trace_settings import TraceSettings
from marft_algos.trainers.branched import check_branch
from marft_algos.trainers.schedule import check_agent_names, check_agent_settings

__all__ = ["TrainerConfig", "check_clip_range", "check_finite_numbers", "check_num_minibatches"]


@dataclass
class TrainerConfig:
    """Settings shared by every trainer (defaults: the paper's Table 3 where it gives one)."""

    iterations: int = 100
    """Training iterations (one rollout batch and its update each); passes over each batch are ppo_epochs (GRPO: num_iterations)."""
    episodes_per_iteration: int = 16
    """Episodes collected per iteration."""
    rollout_threads: int = 4
    """Env copies stepped together; generation is batched across them (paper: 4)."""
    seed: int = 0
    """Seeds episode resets, sampling and minibatch order."""
    branch: dict[str, dict[str, int]] | None = dataclasses.field(
        default=None, metadata={"type": parse_branch}
    )
    """Branch each episode at these agents' turns, e.g. {"router": {"width": 3, "rollouts": 4}}
    (CLI: --branch router=3x4): sample width alternatives from the same state and continue each
    rollouts times; several agents nest (width × rollouts per level, in the order they act). An
    agent's choices are then compared from the same state (docs/maths.md, "Branched
    advantages"); episodes_per_iteration counts the finished episodes. GRPO, RLOO (beta=0),
    MARFT and PPO (the critic's values replaced by the tree's there); REINFORCE++ refuses it."""
    max_new_tokens: int = 512
    """Longest action in tokens (paper: 512)."""
    max_new_tokens_per_agent: dict[str, int] | None = None
    """Per-agent overrides of max_new_tokens, e.g. {"actor": 16}."""
    temperature: float = 1.0
    """Sampling temperature for rollouts; rollout and update log-probs are those of the
    temperature-scaled distribution that was sampled."""
    top_p: float = 1.0
    """Nucleus sampling threshold for rollouts (1 disables); log-probs are those of the truncated
    distribution that was sampled (a token the current policy cuts has probability 0)."""
    top_k: int = 0
    """Top-k sampling for rollouts (0 disables); log-probs as for ``top_p``."""
    gradient_accumulation_steps: int = 1
    """Chunks each agent's share of a (mini)batch is split into for the forward and backward
    passes: bounds memory, and leaves the gradient unchanged (every loss weight comes from the
    whole batch)."""
    max_chunk_tokens: int | None = None
    """Most padded tokens (rows times the longest prompt plus action) one forward and backward
    pass takes: a share that would hold more is split into more chunks than
    ``gradient_accumulation_steps``. Bounds memory whatever the batch and message sizes (long
    observations of later agents, longer actions); the gradient is unchanged. None: no bound."""
    learning_rate: float = 1e-6
    """Adam learning rate of every agent's adapter (paper: 1e-6)."""
    agent_learning_rates: dict[str, float] | None = None
    """Per-agent Adam learning rates, e.g. {"router": 1e-5}; agents not named take
    learning_rate. Agents sharing one adapter take one value (name them all alike). 0 keeps an
    agent's weights where they are (its Adam moments still update; agent_schedule freezes both)."""
    agent_schedule: list[list[str]] | None = None
    """Train agents in turns: windows of agents, e.g. [["router"], ["specialist", "reviewer"]],
    each trained for schedule_period iterations, cycling; the agents outside the current window
    act with frozen weights and untouched optimizer state. None: every agent, every iteration."""
    schedule_period: int = 1
    """Iterations per window of agent_schedule."""
    agent_by_agent_interval: int = 0
    """> 0: train one agent at a time, switching every this many iterations (paper §4.1.1): the
    agent_schedule of each trainable agent alone, with this schedule_period."""
    adam_eps: float = 1e-5
    """Adam epsilon (paper: 1e-5)."""
    max_grad_norm: float = 0.5
    """Gradient clipping per adapter (paper: 0.5)."""
    eval_every: int = 0
    """Evaluate every K iterations (0: only before and after training)."""
    eval_episodes: int = 64
    """Held-out episodes per evaluation (greedy decoding)."""
    eval_sampled: bool = False
    """Also evaluate the policy as it is trained, sampling with the rollout settings (temperature,
    top-p, top-k), logged as ``eval_sampled/...`` beside the greedy ``eval/...``."""
    eval_samples: int = 4
    """Greedy held-out episodes written to samples.jsonl in output_dir at each evaluation, with
    every agent's observation, action and reward (0: none)."""
    output_dir: str | None = None
    """Run directory for metrics.jsonl, config.json and checkpoints (None: nothing written)."""
    checkpoint_every: int = 1
    """Save a checkpoint every K iterations (0: only at the end) when output_dir is set; the
    default, every iteration, means a killed run loses at most the iteration in progress."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept in output_dir; older ones are deleted (0: keep all)."""
    overwrite: bool = False
    """Replace an earlier run found in output_dir instead of refusing to start."""
    max_nonfinite_iterations: int = 3
    """Stop (TrainingDiverged) after this many iterations in a row whose policy updates were all
    skipped as non-finite (0: never stop)."""
    tensorboard: bool = False
    """Also write TensorBoard scalars."""
    trace_otlp: str | None = dataclasses.field(default=None, metadata={"nargs": "?", "const": ""})
    """Send every episode as an OpenTelemetry trace over OTLP/HTTP to this collector's URL (the
    flag without a URL, or "": the endpoint the standard OTEL_EXPORTER_OTLP_* variables name);
    needs the otel extra (docs/tracing.md)."""
    trace_file: str | None = None
    """Append every episode's spans to this file, one OTLP/JSON request per line (docs/tracing.md)."""
    trace_content: bool = False
    """Record message text in the spans (gen_ai.input.messages, gen_ai.output.messages); also on
    with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true."""
    entropy_blowup_factor: float | None = 3.0
    """Flag an entropy blow-up when train/entropy exceeds this multiple of its early average."""
    rollback_on_blowup: bool = False
    """On a blow-up, restore the last good adapters, critic and optimizer states."""
    sync_check_every: int = 10
    """With several processes: compare a checksum of every rank's adapters and critic every K
    iterations and stop with an error if they differ (0: never)."""
    max_staleness: int = 0
    """Asynchronous rollouts: 0 runs rollout and update one after the other; k >= 1 generates
    the next iteration's rollouts in a worker process while this one updates, and drops batches
    sampled more than k versions ago (docs/scaling.md). Stale decisions are trained with the
    decoupled objective (docs/maths.md, "Stale rollouts")."""
    behaviour_weight_cap: float = BEHAVIOUR_WEIGHT_CAP
    """Bound of the importance weight π_prox/π_behav on stale decisions (max_staleness >= 1) and
    on an engine's decisions (engine_correction): truncated to it, or 0 above it, as
    behaviour_weight_mode says (AReaL's behav_imp_weight_cap; TRL's vllm_importance_sampling_cap,
    whose default is 3, against 5 here); unused otherwise."""
    behaviour_weight_mode: Literal[
        "token_truncate", "token_mask", "sequence_truncate", "sequence_mask"
    ] = "token_truncate"
    """How that weight is formed (TRL's vllm_importance_sampling_mode): per token, or per
    sequence (the product of its tokens' ratios, shared by them; a sequence is one decision);
    truncated at the cap, or set to 0 above it (mask). TRL's default is sequence_mask (with cap
    3); token_truncate (with cap 5) is AReaL's."""
    engine_correction: Literal["auto", "on", "off"] = "auto"
    """Correct the mismatch between the rollout's log-probs and the update's when they come from
    another engine or precision (vLLM; 16-bit weights): the update recomputes them with the
    trainer's weights at rollout time (one forward pass without gradient) and weights each entry
    by π_trainer/π_engine, bounded by behaviour_weight_cap and behaviour_weight_mode (truncated
    importance sampling; TRL's vllm_importance_sampling_correction). auto: on with a rollout
    backend or a 16-bit base model. While on, rollout/logprob_mismatch_* are logged."""
    fsdp: bool = False
    """Shard the frozen base model(s) over the processes of a torchrun launch with torch's FSDP2
    (one layer whole at a time; the adapters stay whole on every rank): bases larger than one
    device train (docs/scaling.md, "Sharded training")."""
    fsdp_replicas: int = 1
    """With fsdp: hybrid sharding, the base sharded within groups of world_size / fsdp_replicas
    processes and replicated across the fsdp_replicas groups (e.g. one group per node)."""
    fsdp_mixed_precision: Literal["none", "bf16", "fp16"] = "none"
    """With fsdp: the dtype the gathered base weights compute in ("none": their stored dtype);
    adapters and their optimizer states keep theirs (float32)."""

    branches: ClassVar[bool] = False
    """Whether this trainer trains on branched episodes (``branch``); the others refuse it."""

    def __post_init__(self) -> None:
        check_finite_numbers(self)
        check_branch(self)
        TraceSettings.of_config(self)  # checks the trace destinations
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not 0 <= self.seed < 2**32
        ):
            raise ValueError(
                f"seed (--seed) must be an integer from 0 to {2**32 - 1} (numpy and torch take "
                f"no other), got {self.seed!r}."
            )
        positive = (
            "iterations",
            "episodes_per_iteration",
            "rollout_threads",
            "max_new_tokens",
            "eval_episodes",
            "gradient_accumulation_steps",
        )
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(
                    f"{type(self).__name__}.{name} must be >= 1, got {getattr(self, name)}."
                )
        chunk = self.max_chunk_tokens
        if chunk is not None and (
            isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1
        ):
            raise ValueError(
                f"max_chunk_tokens must be a positive number of tokens (or None: no bound), got "
                f"{chunk!r}."
            )
        check_agent_settings(self)
        for name in (
            "eval_every",
            "checkpoint_every",
            "top_k",
            "sync_check_every",
            "keep_checkpoints",
            "max_nonfinite_iterations",
            "eval_samples",
            "max_staleness",
        ):
            if getattr(self, name) < 0:
                raise ValueError(
                    f"{type(self).__name__}.{name} must be >= 0, got {getattr(self, name)}."
                )
        if not self.behaviour_weight_cap > 0:
            raise ValueError(
                f"behaviour_weight_cap must be > 0 (the largest importance weight kept), got "
                f"{self.behaviour_weight_cap}; the default is {BEHAVIOUR_WEIGHT_CAP}."
            )
        if self.behaviour_weight_mode not in BEHAVIOUR_WEIGHT_MODES:
            raise ValueError(
                f"behaviour_weight_mode must be one of {BEHAVIOUR_WEIGHT_MODES}, got "
                f"{self.behaviour_weight_mode!r}."
            )
        if self.engine_correction not in ("auto", "on", "off"):
            raise ValueError(
                f"engine_correction must be 'auto', 'on' or 'off', got {self.engine_correction!r}."
            )
        if self.fsdp_mixed_precision not in ("none", "bf16", "fp16"):
            raise ValueError(
                f"fsdp_mixed_precision must be 'none', 'bf16' or 'fp16', got "
                f"{self.fsdp_mixed_precision!r}."
            )
        if self.fsdp_replicas < 1 or (self.fsdp_replicas > 1 and not self.fsdp):
            raise ValueError(
                f"fsdp_replicas must be >= 1 and needs fsdp (hybrid sharding), got "
                f"{self.fsdp_replicas} with fsdp={self.fsdp}."
            )
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}.")
        if self.adam_eps <= 0:
            raise ValueError(
                f"adam_eps must be > 0, got {self.adam_eps}: Adam divides by sqrt(v) + eps, so 0 "
                f"turns a parameter whose gradient is 0 into 0/0 = NaN. Use e.g. 1e-8 (paper: 1e-5)."
            )
        if self.max_grad_norm <= 0:
            raise ValueError(
                f"max_grad_norm must be > 0, got {self.max_grad_norm} (paper: 0.5; a large value "
                f"such as 1e9 effectively turns clipping off)."
            )
        if self.temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (use greedy evaluation for 0), got {self.temperature}."
            )
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")

    @property
    def generation(self) -> GenerationSettings:
        """Rollout sampling settings."""
        return GenerationSettings(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            do_sample=True,
            max_new_tokens_per_agent=dict(self.max_new_tokens_per_agent or {}),
        )

    @property
    def sampling(self) -> dict[str, Any]:
        """The rollout distribution's settings, as :meth:`MultiAgentPolicy.token_log_probs` takes them."""
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_finite_numbers(config: Any) -> None:
    """Refuse NaN and infinity in any float field of a config dataclass (every subclass's too).

    A non-finite learning rate, epsilon, coefficient or threshold does not fail where it is set:
    it turns the weights into NaN, and the run then stops inside sampling with a message about
    probabilities. Checked when the config is built, it names the field and the value.
    """
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(
                f"{type(config).__name__}.{f.name} must be a finite number, got {value}; pass a "
                f"finite value (its default is {f.default!r})."
            )


def check_clip_range(epsilon: float, epsilon_high: float | None) -> None:
    """Validate PPO's clip ranges (ε_low, ε_high) with a message that says how to fix them."""
    if epsilon <= 0 or (epsilon_high is not None and epsilon_high <= 0):
        raise ValueError(f"epsilon and epsilon_high must be > 0; got {epsilon}, {epsilon_high}.")
    if epsilon_high is not None and epsilon_high < epsilon:
        raise ValueError(
            f"epsilon_high={epsilon_high} is below epsilon={epsilon}: the upper clip range must be at "
            f"least the lower one (DAPO's clip-higher raises it, e.g. epsilon_high=0.28); set "
            f"epsilon_high >= epsilon, or leave it unset for symmetric clipping."
        )


def check_num_minibatches(num_minibatches: int, episodes_per_iteration: int) -> None:
    """Validate a minibatch count against the episodes it splits, saying how to fix it."""
    if num_minibatches < 1:
        raise ValueError(f"num_minibatches must be >= 1, got {num_minibatches}.")
    if num_minibatches > episodes_per_iteration:
        raise ValueError(
            f"num_minibatches={num_minibatches} exceeds episodes_per_iteration="
            f"{episodes_per_iteration}; lower num_minibatches or collect more episodes."
        )


def check_world_size(world_size: int, shards: int, config: TrainerConfig) -> None:
    """Refuse more processes than an iteration has units of work (episodes; GRPO: groups)."""
    if world_size > shards:
        unit = "groups" if shards != config.episodes_per_iteration else "episodes"
        raise ValueError(
            f"{world_size} processes share {shards} {unit} per iteration, so some would have "
            f"nothing to run; collect at least one per process (raise episodes_per_iteration) or "
            f"launch fewer processes."
        )


def check_agents(config: TrainerConfig, agents: list[str], policy_agents: list[str]) -> None:
    """Refuse a policy without every env agent, and token caps for agents the env lacks."""
    missing = [a for a in agents if a not in policy_agents]
    if missing:
        raise ValueError(
            f"The policy has no entry for env agent(s) {missing}; it covers {policy_agents}. "
            f"Build the policy with the env's agents: MultiAgentPolicy.from_pretrained(model, env.possible_agents)."
        )
    unknown_caps = sorted(set(config.max_new_tokens_per_agent or {}) - set(agents))
    if unknown_caps:
        raise ValueError(
            f"max_new_tokens_per_agent names agent(s) {unknown_caps} that the env does not have; its "
            f"agents are {agents}. Name only those (e.g. {{{agents[-1]!r}: 16}})."
        )
    check_agent_names(config, agents)
