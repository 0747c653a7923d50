"""The learning-curve figure: a team panel with accuracies and reward parts, an agents panel with
each agent's reward received and message length."""

from __future__ import annotations

import pytest

from marft_algos.runs.plotting import learning_curve_figure, plot_learning_curve

pytest.importorskip("matplotlib")

RECORDS = [
    {
        "iteration": i,
        "eval/accuracy": 0.1 * i,
        "rollout/accuracy": 0.05 * i,
        "eval/reward/success": 0.1 * i,
        "eval/reward/cost": -0.01 * i,
        "rollout/reward_mean/planner": 0.2,
        "rollout/reward_mean/critic": 0.1 * i,
        "rollout/action_tokens_mean/planner": 30.0 + i,
        "rollout/action_tokens_mean/critic": 12.0,
    }
    for i in range(4)
]


def _legend(ax) -> list[str]:
    legend = ax.get_legend()
    return [t.get_text() for t in legend.get_texts()] if legend is not None else []


def test_the_figure_has_a_team_panel_and_an_agents_panel(tmp_path) -> None:
    import matplotlib.pyplot as plt

    fig = learning_curve_figure(RECORDS, title="grpo on programs")
    try:
        team, agents = fig.axes[0], fig.axes[1]
        assert team.get_title() == "grpo on programs" and agents.get_title() == "agents"
        assert _legend(team) == [
            "eval/accuracy",
            "rollout/accuracy",
            "eval/reward/cost",
            "eval/reward/success",
        ]
        assert _legend(agents) == [
            "critic: reward received",
            "planner: reward received",
            "critic: message tokens",
            "planner: message tokens",
        ]
        # Reward parts and message lengths on second y-axes sharing the panels' x.
        twins = fig.axes[2:]
        assert [t.get_ylabel() for t in twins] == [
            "reward part (mean per episode)",
            "message length (tokens)",
        ]
        lengths = {line.get_label(): list(line.get_ydata()) for line in twins[1].get_lines()}
        assert lengths["planner: message tokens"] == [30.0, 31.0, 32.0, 33.0]
    finally:
        plt.close(fig)
    path = plot_learning_curve(RECORDS, tmp_path / "curve.png")
    assert path.stat().st_size > 0


def test_records_without_agents_or_parts_still_plot() -> None:
    import matplotlib.pyplot as plt

    fig = learning_curve_figure([{"iteration": 0, "eval/accuracy": 0.5}])
    try:
        assert len(fig.axes) == 2 and _legend(fig.axes[0]) == ["eval/accuracy"]
        assert fig.axes[1].get_lines() == []
    finally:
        plt.close(fig)
