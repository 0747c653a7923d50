"""Register a small custom agentic environment and train a team on it with MARFT.

The task: a "reader" sees two numbers and passes them on; a router sends the team to the "adder"
or the "multiplier" depending on the operation asked; that specialist must answer in \\boxed{}.
Only the routed specialist acts, and it sees the reader's message (a custom dependency function).

    python examples/custom_env.py --iterations 10
"""

from __future__ import annotations

import argparse

import marft_envs
from marft_algos.policy import MultiAgentPolicy
from marft_algos.policy.critic import Critic
from marft_algos.trainers.action_marft import ActionMARFTConfig, ActionMARFTTrainer
from marft_envs import AgentProfile, DependencyFunction, FlexPOMDPEnv, Transition, Turn
from marft_envs.math import grade_answer

PROFILES = [
    AgentProfile("reader", "Read the problem and restate the two numbers."),
    AgentProfile("adder", "Add the numbers. Give the answer in \\boxed{}.", graded=True),
    AgentProfile("multiplier", "Multiply the numbers. Give the answer in \\boxed{}.", graded=True),
]


class OperationRouter(DependencyFunction):
    """Reader first; then the specialist for the requested operation, seeing the reader."""

    def next_turn(self, state):
        if not state.actions:
            return Turn("reader")
        if len(state.actions) == 1:
            specialist = "adder" if state.context["operation"] == "+" else "multiplier"
            return Turn(specialist, sees=("reader",))
        return None


class ArithmeticTeamEnv(FlexPOMDPEnv):
    metadata = {**FlexPOMDPEnv.metadata, "name": "arithmetic_team_v0"}

    def __init__(self, **kwargs):
        super().__init__(PROFILES, OperationRouter(), **kwargs)

    def _reset_task(self, options):
        self.a, self.b = (int(x) for x in self.np_random.integers(2, 20, size=2))
        self.operation = "+" if self.np_random.random() < 0.5 else "*"

    def _route_context(self):
        return {"operation": self.operation}

    def _observation(self, agent):
        word = "sum" if self.operation == "+" else "product"
        return f"Problem: What is the {word} of {self.a} and {self.b}?"

    def _transition(self, actions):
        answer = self.a + self.b if self.operation == "+" else self.a * self.b
        specialist = "adder" if self.operation == "+" else "multiplier"
        correct = grade_answer(actions.get(specialist, ""), str(answer))
        return Transition(reward=float(correct), terminated=True, info={"correct": correct})


marft_envs.register(
    "examples/arithmetic-team-v0",
    ArithmeticTeamEnv,
    description="Reader -> routed adder/multiplier.",
)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description="Train a team on a custom registered environment.")
    parser.add_argument(
        "--model", default="marft-tiny-math", help="Base model (default: marft-tiny-math)."
    )
    parser.add_argument(
        "--iterations", type=int, default=10, help="Training iterations (default: 10)."
    )
    parser.add_argument(
        "--episodes-per-iteration",
        type=int,
        default=16,
        help="Episodes per iteration (default: 16).",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=24, help="Longest action in tokens (default: 24)."
    )
    parser.add_argument(
        "--output-dir", default=None, help="Run directory (default: none, nothing written)."
    )
    parser.add_argument("--seed", type=int, default=0, help="Random seed (default: 0).")
    args = parser.parse_args(argv)

    env_fn = lambda: marft_envs.make("examples/arithmetic-team-v0")  # noqa: E731
    agents = env_fn().possible_agents
    policy = MultiAgentPolicy.from_pretrained(args.model, agents, seed=args.seed)
    config = ActionMARFTConfig(
        iterations=args.iterations,
        episodes_per_iteration=args.episodes_per_iteration,
        rollout_threads=args.episodes_per_iteration,
        max_new_tokens=args.max_new_tokens,
        learning_rate=3e-4,
        critic_learning_rate=1e-3,
        entropy_coef=0.0,
        eval_episodes=32,
        output_dir=args.output_dir,
        seed=args.seed,
    )
    trainer = ActionMARFTTrainer(
        policy, env_fn, config, critic=Critic(policy, seed=args.seed), eval_env_fn=env_fn
    )
    records = trainer.train(progress=True)
    evals = [r for r in records if "eval/accuracy" in r]
    print(
        f"held-out accuracy: before {evals[0]['eval/accuracy']:.3f}, after {evals[-1]['eval/accuracy']:.3f}"
    )
    return records


if __name__ == "__main__":
    main()
