"""A trained team, loaded for serving: the policy, each agent's budget, and how calls are rendered.

Everything is read from what training recorded, so a served call is rendered and decoded as the
run's held-out evaluation decoded it:

- a checkpoint (or a run folder's newest): :func:`~marft_algos.runs.checkpoint.policy_from_checkpoint`
  rebuilds the policy; the manifest's ``run`` holds the generation settings (each agent's
  ``max_new_tokens``), the chat template given to template-less tokenizers, and the env's spec,
  whose kwargs hold a program env's ``tool_prompt`` and ``tool_parser``;
- an export (``marft export``: ``marft_export.json``): each agent's base model and peft adapter
  folder, and the same ``run`` record.

A served call becomes the observation a :class:`~marft_envs.programs.ProgramEnv` would give the
policy for the same messages and tools (:meth:`ServedTeam.observation`), and the generated text
the reply the env would hand the program (:meth:`ServedTeam.reply`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marft_algos.policy.prompt_length import PolicyMeter, policy_meter
from marft_algos.policy.rendering import fill_chat_template
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.evaluation import greedy
from marft_envs.wire.prompts import PromptBudget
from marft_envs.wire.protocol import Reply
from marft_envs.wire.tools import (
    TOOL_PARSERS,
    TOOL_PROMPTS,
    ToolParser,
    parse_tool_calls,
    policy_messages,
    resolve_parser,
)

__all__ = ["EXPORT_INDEX", "ServedTeam", "is_export", "team_from_checkpoint", "team_from_export"]

logger = logging.getLogger(__name__)

#: The index file ``marft export`` writes at the top of an export folder.
EXPORT_INDEX = "marft_export.json"


@dataclass
class ServedTeam:
    """What a server needs to answer calls for a trained team.

    Attributes:
        policy: Anything with the policy's ``generate(agent, messages_batch, settings, *,
            generator)`` (a :class:`~marft_algos.policy.MultiAgentPolicy`).
        settings: The run's generation settings, greedy (each agent's ``max_new_tokens`` kept).
        tool_parser: Turns a reply to a call with tools into content and tool calls (the env's).
        tool_prompt: The env's ``tool_prompt`` (None: tools go to the chat template).
        env_id: The env the team was trained on (for messages and logs).
        source: The checkpoint or export folder served.
        max_prompt_tokens: Tokens of one rendered prompt, below the context's bound (the model's
            context less the agent's reply budget); None: that bound alone.
    """

    policy: Any
    settings: GenerationSettings
    tool_parser: ToolParser
    tool_prompt: str | None = None
    env_id: str | None = None
    source: str = ""
    max_prompt_tokens: int | None = None
    meter: PolicyMeter | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.meter = policy_meter(self.policy, self.agents)

    @property
    def agents(self) -> tuple[str, ...]:
        """The agents, i.e. the valid ``model`` names."""
        return tuple(self.policy.agents)

    def observation(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None
    ) -> Any:
        """What the policy renders for a call, as the program env and the collector hand it over:
        with ``tool_prompt`` the transcript written as text; otherwise the messages with tool-call
        arguments as objects, and ``{"messages": ..., "tools": ...}`` when the call offers tools."""
        plain = policy_messages(messages, tools, self.tool_prompt)
        if self.tool_prompt is None and tools:
            return {"messages": plain, "tools": [dict(t) for t in tools]}
        return plain

    def prompt_ids(
        self, agent: str, observation: Any, settings: GenerationSettings
    ) -> list[int] | None:
        """The call's prompt ids, counted against its bound before anything is generated
        (None for a policy without tokenizers to count with: it renders the call itself).

        Raises:
            RequestRefused: The prompt passes ``max_prompt_tokens`` or the model's context less
                the agent's reply budget under ``settings`` (400 ``context_length_exceeded``).
        """
        if self.meter is None:
            return None
        budget = PromptBudget(self.meter, settings.tokens_for)
        fix = "send fewer or shorter messages, or ask for a shorter reply (max_tokens)" + (
            ""
            if self.max_prompt_tokens is None
            else " or start marft serve with a larger --max-prompt-tokens"
        )
        return budget.check(agent, observation, self.max_prompt_tokens, fix)

    def reply(self, generation: Any, offered_tools: bool, call_index: int) -> Reply:
        """The reply of one generation, parsed into tool calls when the call offered tools."""
        reply = Reply(
            generation.text,
            bool(generation.finished),
            len(generation.prompt_ids),
            len(generation.action_ids),
        )
        if offered_tools:
            reply.content, reply.tool_calls = parse_tool_calls(
                generation.text, self.tool_parser, call_index
            )
        return reply


def is_export(folder: str | Path) -> bool:
    """Whether ``folder`` is a ``marft export`` folder (it holds ``marft_export.json``)."""
    return (Path(folder) / EXPORT_INDEX).is_file()


def team_from_checkpoint(
    checkpoint: str | Path,
    *,
    model: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
) -> ServedTeam:
    """The team of a checkpoint, loaded as ``marft eval`` loads it.

    Args:
        checkpoint: A checkpoint folder (``checkpoint-N``).
        model: Replace the recorded base model (the same model, moved).
        device: Torch device of the models.
        dtype: Weight dtype (default: the run's, float32 when it recorded none).
    """
    import torch

    from marft_algos.runs.checkpoint import policy_from_checkpoint, read_manifest

    run = read_manifest(checkpoint).get("run") or {}
    attn = run.get("attn_implementation")
    policy = policy_from_checkpoint(
        str(checkpoint),
        model=model,
        device=device,
        torch_dtype=getattr(torch, dtype or str(run.get("dtype") or "float32")),
        model_kwargs={"attn_implementation": attn} if attn else None,
    )
    return _team(policy, run, str(checkpoint))


def team_from_export(
    folder: str | Path,
    *,
    model: str | None = None,
    device: str = "cpu",
    dtype: str | None = None,
) -> ServedTeam:
    """The team of a ``marft export`` folder: each agent's base model with its adapter folder.

    Args:
        folder: The export folder (holding ``marft_export.json``).
        model: Replace every agent's base model (needed when the export names a folder of the
            training machine, ``"portable": false`` in its index).
        device: Torch device of the models.
        dtype: Weight dtype (default: the run's, float32 when it recorded none).
    """
    import torch

    from marft_algos.policy import AgentSpec, MultiAgentPolicy

    root = Path(folder)
    index = json.loads((root / EXPORT_INDEX).read_text(encoding="utf-8"))
    run = index.get("run") or {}
    agents = list(index["agents"])
    specs = {}
    for agent, entry in index["agents"].items():
        adapter = entry.get("adapter")
        specs[agent] = AgentSpec(
            model=model or entry["base_model"],
            adapter=agent if adapter else None,
            trainable=False,
            adapter_path=str(root / adapter) if adapter else None,
        )
    attn = run.get("attn_implementation")
    policy = MultiAgentPolicy.from_pretrained(
        model or index["agents"][agents[0]]["base_model"],
        agents,
        specs=specs,
        device=device,
        torch_dtype=getattr(torch, dtype or str(run.get("dtype") or "float32")),
        model_kwargs={"attn_implementation": attn} if attn else None,
    )
    return _team(policy, {**run, "chat_template": index.get("chat_template")}, str(root))


def _team(policy: Any, run: Mapping[str, Any], source: str) -> ServedTeam:
    recorded = dict(run.get("generation") or {})
    if not recorded:
        raise ValueError(
            f"{source} does not record its generation settings (an older run); serve a run "
            f"trained with this marft version."
        )
    fill_chat_template(policy, run.get("chat_template"))
    settings = greedy(GenerationSettings(**recorded))
    spec = run.get("eval_env") or run.get("env") or {}
    env_id = run.get("env_id") or spec.get("id")
    kwargs = {**(spec.get("kwargs") or {}), **(run.get("env_kwargs") or {})}
    tool_prompt = kwargs.get("tool_prompt")
    if tool_prompt is not None and tool_prompt not in TOOL_PROMPTS:
        raise ValueError(
            f"{source} was trained with tool_prompt={tool_prompt!r}, which this marft does not "
            f"know (it knows {sorted(TOOL_PROMPTS)}); serve it with the marft version it trained with."
        )
    return ServedTeam(
        policy=policy,
        settings=settings,
        tool_parser=_tool_parser(kwargs.get("tool_parser", "hermes"), env_id, source),
        tool_prompt=tool_prompt,
        env_id=env_id,
        source=source,
        max_prompt_tokens=kwargs.get("max_prompt_tokens"),
    )


def _tool_parser(recorded: Any, env_id: str | None, source: str) -> ToolParser:
    """The env's tool parser: a built-in one by name, else the registered env's own (which
    imports the module that registered it, e.g. ``my_team:support-v0``)."""
    if isinstance(recorded, str) and recorded in TOOL_PARSERS:
        return TOOL_PARSERS[recorded]
    if env_id is not None:
        import marft_envs

        try:
            live = marft_envs.spec(env_id).kwargs.get("tool_parser", recorded)
            return resolve_parser(live)
        except (LookupError, ImportError, ValueError, TypeError) as err:
            logger.debug("the env's own tool parser is not reachable: %s", err)
    raise ValueError(
        f"{source} parses tool calls with tool_parser={recorded!r}, which is neither built in "
        f"({sorted(TOOL_PARSERS)}) nor reachable through the env {env_id!r}; make the module that "
        f"registers the env importable (PYTHONPATH) so its parser is registered."
    )
