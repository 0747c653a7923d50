"""A team task for trainer tests whose reward a random tiny model earns some of."""

from __future__ import annotations

from marft_envs import AgentProfile, FlexPOMDPEnv, Transition


class DigitsEnv(FlexPOMDPEnv):
    """A dense reward any random model earns some of: the share of ASCII letters in the graded text.

    Rewards differ between samples, so every trainer (GRPO included) gets non-zero advantages.
    With ``rounds`` > 1 every agent acts in each of that many rounds (the reward is paid every
    round). ``binary=True`` pays 1 when that share exceeds a half and 0 otherwise, so some
    groups tie and their advantages are exactly 0.
    """

    def __init__(self, team: int = 2, rounds: int = 1, binary: bool = False, **kwargs):
        profiles = [AgentProfile("writer", "Write digits.")] if team == 2 else []
        profiles.append(AgentProfile("answerer", "Answer with digits only.", graded=True))
        self.rounds = rounds
        self.binary = binary
        super().__init__(profiles, horizon=rounds, **kwargs)

    def _reset_task(self, options):
        self.target = int(self.np_random.integers(10, 99))

    def _observation(self, agent):
        return f"Number {self.target}."

    def _transition(self, actions):
        text = actions["answerer"]
        score = sum(ch.isascii() and ch.isalpha() for ch in text) / max(1, len(text))
        return Transition(
            reward=float(score > 0.5) if self.binary else score,
            terminated=self.timestep == self.rounds - 1,
            info={"correct": score > 0.5},
        )
