"""marft_algos.rollout.evaluation.NoisyMessages: the message-noise ablation used by the comparison."""

from __future__ import annotations

from typing import Any

import pytest

from marft_algos.policy.multi_agent import Generation
from marft_algos.protocols import GenerationSettings
from marft_algos.rollout.evaluation import NoisyMessages

SETTINGS = GenerationSettings(max_new_tokens=8)


class EchoPolicy:
    """Answers every prompt with a fixed text per agent (no model needed)."""

    agents = ("reasoner", "actor")

    def generate(
        self,
        agent: str,
        messages_batch: list[Any],
        settings: GenerationSettings,
        *,
        generator: Any = None,
    ) -> list[Generation]:
        text = "7 \\times 8 = 56\n56 + 3 = 59" if agent == "reasoner" else "\\boxed{59}"
        return [
            Generation([1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], text, True, agent)
            for _ in messages_batch
        ]


def test_replaces_only_the_chosen_agents_text() -> None:
    policy = EchoPolicy()
    noisy = NoisyMessages(policy, ["reasoner"], seed=0)
    original = policy.generate("reasoner", [[], []], SETTINGS)[0]
    out = noisy.generate("reasoner", [[], []], SETTINGS)
    for g in out:
        assert g.text != original.text
        assert len(g.text) == len(original.text)
        assert set(g.text) <= set(NoisyMessages.DEFAULT_CHARSET)
        # What the agent generated (ids, log-probs) is kept; only what the env reads changes.
        assert (g.action_ids, g.log_probs, g.finished) == (
            original.action_ids,
            original.log_probs,
            True,
        )
    assert noisy.generate("actor", [[]], SETTINGS)[0].text == "\\boxed{59}"
    # Anything else is the wrapped policy's.
    assert noisy.agents == frozenset({"reasoner"})
    assert noisy.policy.agents == ("reasoner", "actor")


def test_noise_repeats_with_the_seed_and_differs_across_seeds() -> None:
    first = [
        g.text
        for g in NoisyMessages(EchoPolicy(), ["reasoner"], seed=3).generate(
            "reasoner", [[]] * 4, SETTINGS
        )
    ]
    again = [
        g.text
        for g in NoisyMessages(EchoPolicy(), ["reasoner"], seed=3).generate(
            "reasoner", [[]] * 4, SETTINGS
        )
    ]
    other = [
        g.text
        for g in NoisyMessages(EchoPolicy(), ["reasoner"], seed=4).generate(
            "reasoner", [[]] * 4, SETTINGS
        )
    ]
    assert first == again
    assert first != other
    assert len(set(first)) == 4  # every message gets its own noise


def test_bad_arguments_say_what_to_give() -> None:
    with pytest.raises(ValueError, match="at least one agent"):
        NoisyMessages(EchoPolicy(), [])
    with pytest.raises(ValueError, match="charset"):
        NoisyMessages(EchoPolicy(), ["reasoner"], charset="")
