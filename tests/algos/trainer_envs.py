"""A team task for trainer tests whose reward a random tiny model earns some of."""

from __future__ import annotations

from marft_envs import AgentProfile, FlexPOMDPEnv, Transition


class DigitsEnv(FlexPOMDPEnv):
    """A dense reward any random model earns some of: the share of ASCII letters in the graded text.

    Rewards differ between samples, so every trainer (GRPO included) gets non-zero advantages.
    """

    def __init__(self, team: int = 2, **kwargs):
        profiles = [AgentProfile("writer", "Write digits.")] if team == 2 else []
        profiles.append(AgentProfile("answerer", "Answer with digits only.", graded=True))
        super().__init__(profiles, **kwargs)

    def _reset_task(self, options):
        self.target = int(self.np_random.integers(10, 99))

    def _observation(self, agent):
        return f"Number {self.target}."

    def _transition(self, actions):
        text = actions["answerer"]
        score = sum(ch.isascii() and ch.isalpha() for ch in text) / max(1, len(text))
        return Transition(reward=score, terminated=True, info={"correct": score > 0.5})
