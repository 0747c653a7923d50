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


#: A ChatML template with tool support (tools listed first, assistant tool calls as blocks), the
#: shape of the Qwen2.5 and Hermes templates.
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %}\n{{ t['function'] | tojson }}"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "{% if m.tool_calls is defined %}{% for c in m.tool_calls %}<tool_call>"
    "{{ c['function'] | tojson }}</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
