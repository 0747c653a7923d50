"""Supervised examples from recorded turns, and their loss: each agent on its own replies only.

An example is what the agent read, rendered exactly as a rollout renders it (the policy's own
:meth:`~marft_algos.policy.MultiAgentPolicy.render`: the agent's chat template, with the tools the
call offered), followed by what it wrote: the reply's tokens, then the end-of-turn token a rollout
stops at (the tokenizer's ``eos_token``) when the reply ended its turn, all cut at the agent's
token budget as a rollout is cut. Its labels follow TRL's completion-only convention: ``-100`` on
every prompt token, the token ids on the reply (:attr:`SFTExample.labels`).

The loss (:func:`reply_log_likelihood`) is the negative log-likelihood of the labelled tokens
under the agent's adapter, through the same forward pass the RL update runs
(:meth:`~marft_algos.policy.MultiAgentPolicy.token_log_probs`, at temperature 1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch

from marft_algos.protocols import GenerationSettings
from marft_algos.trainers.sft_data import Transcript, TranscriptError, Turn

__all__ = ["IGNORE_INDEX", "SFTExample", "build_examples", "reply_ids", "reply_log_likelihood"]

#: The label of a token the loss skips (PyTorch's and TRL's ``-100``).
IGNORE_INDEX = -100


class SFTExample(NamedTuple):
    """One agent reply to train on."""

    agent: str
    """The agent whose adapter learns it."""
    prompt_ids: list[int]
    """The rendered prompt, assistant turn opened (what the agent read)."""
    completion_ids: list[int]
    """The reply's tokens (and the end-of-turn token when it ended its turn)."""
    source: str
    """``file:line`` of its transcript."""

    @property
    def input_ids(self) -> list[int]:
        """Prompt then reply, one sequence."""
        return self.prompt_ids + self.completion_ids

    @property
    def labels(self) -> list[int]:
        """``-100`` on every prompt token, the reply's ids on the reply (TRL's convention)."""
        return [IGNORE_INDEX] * len(self.prompt_ids) + self.completion_ids


def reply_ids(tokenizer: Any, eos_id: int, turn: Turn, budget: int) -> tuple[list[int], bool]:
    """The tokens of ``turn``'s reply as the agent would have generated them, and whether they
    were cut at ``budget`` (then no end-of-turn token: a rollout cut there has none either)."""
    ids = [int(i) for i in tokenizer(turn.reply, add_special_tokens=False)["input_ids"]]
    if turn.finished:
        ids.append(int(eos_id))
    cut = len(ids) > budget
    return ids[:budget], cut


def _agent_of(turn: Turn, agents: Sequence[str], source: str) -> str:
    if turn.agent is None:
        if len(agents) == 1:
            return agents[0]
        raise TranscriptError(
            f"{source}: a call without 'agent', and the team has agents {list(agents)}; record "
            f"which agent made each call."
        )
    if turn.agent not in agents:
        raise TranscriptError(
            f"{source}: agent {turn.agent!r} is not in the team {list(agents)}; train the team "
            f"that wrote the transcripts (marft sft --env or --agents)."
        )
    return turn.agent


def build_examples(
    policy: Any,
    transcripts: Sequence[Transcript],
    settings: GenerationSettings,
    *,
    max_length: int | None = None,
) -> tuple[list[SFTExample], Counter[str]]:
    """Every turn of ``transcripts`` as an :class:`SFTExample` of its agent.

    Args:
        policy: The team's :class:`~marft_algos.policy.MultiAgentPolicy` (its rendering and tokenizers).
        transcripts: The kept episodes.
        settings: The agents' token budgets (:meth:`GenerationSettings.tokens_for`).
        max_length: Leave out examples longer than this (prompt + reply tokens).

    Returns:
        ``(examples, counts)``: counts of ``replies`` read, ``examples`` made, ``cut_at_budget``,
        ``too_long``, ``empty`` and ``tool_calls`` (structured tool calls, whose text in the
        model's own format is not recorded) replies left out, and ``frozen`` (an agent that does
        not train).

    Raises:
        TranscriptError: A turn names an agent the policy does not have.
    """
    agents = list(policy.agents)
    examples: list[SFTExample] = []
    counts: Counter[str] = Counter()
    for transcript in transcripts:
        for turn in transcript.turns:
            counts["replies"] += 1
            agent = _agent_of(turn, agents, transcript.source)
            if not policy.is_trainable(agent):
                counts["frozen"] += 1
                continue
            if turn.tool_calls:
                counts["tool_calls"] += 1
                continue
            observation: Any = {"messages": turn.messages}
            if turn.tools:
                observation["tools"] = turn.tools
            prompt = policy.render(agent, observation)
            backbone = policy.backbone(agent)
            reply, cut = reply_ids(
                backbone.tokenizer, backbone.eos_ids[0], turn, settings.tokens_for(agent)
            )
            if not reply:
                counts["empty"] += 1
                continue
            if max_length is not None and len(prompt) + len(reply) > max_length:
                counts["too_long"] += 1
                continue
            counts["cut_at_budget"] += int(cut)
            counts["examples"] += 1
            examples.append(SFTExample(agent, prompt, reply, transcript.source))
    return examples, counts


def reply_log_likelihood(
    policy: Any,
    agent: str,
    examples: Sequence[SFTExample],
    *,
    completion_only: bool = True,
) -> tuple[torch.Tensor, int]:
    """Sum of the log-probabilities of the labelled tokens of ``agent``'s ``examples`` under its
    adapter (differentiable), and how many tokens that is.

    With ``completion_only`` the labelled tokens are the replies'; without, every token after the
    first (TRL's ``completion_only_loss=False``).
    """
    if completion_only:
        prompts = [e.prompt_ids for e in examples]
        targets = [e.completion_ids for e in examples]
    else:
        prompts = [e.input_ids[:1] for e in examples]
        targets = [e.input_ids[1:] for e in examples]
    out = policy.token_log_probs(agent, prompts, targets, temperature=1.0)
    return out.log_probs[out.mask].sum(), int(out.mask.sum())  # log_probs: (batch, T_act)
