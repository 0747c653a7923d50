"""Guards on their own: snapshots, the guarded policy step, entropy blow-ups, the non-finite stop.

Two "adapters" are small linear layers (agents "a" and "b" share one, as agents sharing an adapter
do), the critic a third; no trainer, model or env is built.
"""

from __future__ import annotations

import pytest
import torch

from marft_algos.runs.folder import TrainingDiverged
from marft_algos.trainers.guards import BASELINE_ITERATIONS, Guards
from marft_algos.trainers.optimizers import clip_and_step


class Team:
    def __init__(self) -> None:
        torch.manual_seed(0)
        self.shared, self.own, self.critic = (torch.nn.Linear(3, 2) for _ in range(3))
        self.adapter = {"a": self.shared, "b": self.shared, "c": self.own}
        self.optimizers = {
            "a": torch.optim.Adam(self.shared.parameters(), lr=0.1),
            "c": torch.optim.Adam(self.own.parameters(), lr=0.1),
            "__critic__": torch.optim.Adam(self.critic.parameters(), lr=0.1),
        }

    def guards(self, **settings) -> Guards:
        return Guards(
            lambda agent: list(self.adapter[agent].parameters()),
            {"a": "a", "b": "a", "c": "c"},
            lambda: self.optimizers,
            self.critic.parameters,
            **settings,
        )

    def train_step(self) -> None:
        """One Adam step of everything, so parameters and optimizer states change."""
        loss = sum(m(torch.ones(3)).pow(2).sum() for m in (self.shared, self.own, self.critic))
        loss.backward()
        for optimizer in self.optimizers.values():
            optimizer.step()
            optimizer.zero_grad()

    def weights(self) -> list[torch.Tensor]:
        return [
            p.detach().clone() for m in (self.shared, self.own, self.critic) for p in m.parameters()
        ]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_snapshot_and_restore_bring_back_parameters_and_optimizer_states():
    team = Team()
    team.train_step()
    guards = team.guards()
    saved, steps = team.weights(), team.optimizers["a"].state_dict()["state"][0]["step"].item()
    snapshot = guards.snapshot()
    assert (
        set(snapshot["optimizers"]) == {"a", "c", "__critic__"} and "critic" in snapshot["params"]
    )
    team.train_step()
    assert not same(saved, team.weights())
    guards.restore(snapshot)
    assert same(saved, team.weights())
    assert team.optimizers["a"].state_dict()["state"][0]["step"].item() == steps


def test_a_snapshot_of_some_agents_leaves_the_others_and_the_critic_alone():
    team = Team()
    guards = team.guards()
    snapshot = guards.snapshot(["b"])  # shares adapter "a"
    assert set(snapshot["params"]["policy"]) == {"b"} and "critic" not in snapshot["params"]
    assert set(snapshot["optimizers"]) == {"a"}
    own_before = [p.detach().clone() for p in team.own.parameters()]
    shared_before = [p.detach().clone() for p in team.shared.parameters()]
    team.train_step()
    guards.restore(snapshot)
    assert same(shared_before, [p.detach() for p in team.shared.parameters()])
    assert not same(own_before, [p.detach() for p in team.own.parameters()])


def step_of(team: Team, agent: str, lr: float = 0.1):
    """What a trainer passes as ``apply``: a clipped step of the agent's optimizer."""
    optimizer = team.optimizers[{"a": "a", "b": "a", "c": "c"}[agent]]
    for group in optimizer.param_groups:
        group["lr"] = lr
    return lambda: clip_and_step([optimizer], 1.0)


def backward(team: Team, scale: float = 1.0) -> dict[str, float]:
    loss = team.own(torch.ones(3)).pow(2).sum() * scale
    loss.backward()
    return {"loss": float(loss.detach())}


def test_a_finite_step_is_applied_and_counted():
    team = Team()
    guards = team.guards()
    before = [p.detach().clone() for p in team.own.parameters()]
    out = guards.step(backward(team), ["c"], step_of(team, "c"), lambda: None, iteration=0)
    assert out["skipped_nonfinite"] == 0 and out["grad_norm"] > 0
    assert not same(before, [p.detach() for p in team.own.parameters()])
    assert guards.steps == {"tried": 1, "skipped": 0}


def test_a_non_finite_loss_skips_the_step_and_discards_the_gradients(caplog):
    team = Team()
    guards = team.guards()
    discarded = []
    before = [p.detach().clone() for p in team.own.parameters()]
    out = guards.step(
        {"loss": float("nan")}, ["c"], step_of(team, "c"), lambda: discarded.append(1), iteration=4
    )
    assert out["skipped_nonfinite"] == 1 and discarded == [1]
    assert same(before, [p.detach() for p in team.own.parameters()])
    assert guards.steps == {"tried": 1, "skipped": 1}
    assert "Skipping a policy update at iteration 4: the loss is nan" in caplog.text


def test_a_step_that_makes_weights_non_finite_is_undone(caplog):
    team = Team()
    guards = team.guards()
    before = [p.detach().clone() for p in team.own.parameters()]
    out = guards.step(
        backward(team), ["c"], step_of(team, "c", lr=float("inf")), lambda: None, iteration=2
    )
    assert out["skipped_nonfinite"] == 1 and guards.steps["skipped"] == 1
    assert same(before, [p.detach() for p in team.own.parameters()])
    assert "it made adapter weights non-finite" in caplog.text


@pytest.mark.parametrize(("kl", "undone"), [(0.01, False), (0.5, True), (float("nan"), True)])
def test_the_trust_region_undoes_a_step_beyond_it(kl, undone):
    team = Team()
    guards = team.guards()
    before = [p.detach().clone() for p in team.own.parameters()]
    out = guards.step(
        backward(team),
        ["c"],
        step_of(team, "c"),
        lambda: None,
        iteration=0,
        trust_region_kl=0.1,
        kl_after=lambda: kl,
    )
    assert out.get("skipped_trust_region", 0) == int(undone) and out["skipped_nonfinite"] == 0
    assert same(before, [p.detach() for p in team.own.parameters()]) == undone


def test_the_run_stops_after_max_nonfinite_iterations_all_skipped_in_a_row():
    guards = Team().guards(max_nonfinite_iterations=2)
    for skipped in (True, False):  # a good iteration ends the streak
        guards.start_update()
        guards.count_step(skipped=skipped)
        guards.check_nonfinite(iteration=0)
    assert guards.nonfinite_streak == 0
    guards.start_update()
    guards.check_nonfinite(iteration=1)  # an iteration without steps neither extends nor fails
    guards.start_update()
    guards.count_step(skipped=True)
    guards.check_nonfinite(iteration=2)
    assert guards.nonfinite_streak == 1
    guards.start_update()
    guards.count_step(skipped=True)
    guards.count_step(skipped=True)
    with pytest.raises(TrainingDiverged, match=r"last 2 iterations \(up to iteration 4\)"):
        guards.check_nonfinite(iteration=3)


def test_zero_max_nonfinite_iterations_never_stops():
    guards = Team().guards(max_nonfinite_iterations=0)
    for i in range(10):
        guards.start_update()
        guards.count_step(skipped=True)
        guards.check_nonfinite(iteration=i)
    assert guards.nonfinite_streak == 10


def test_entropy_blowup_is_flagged_against_the_early_baseline_and_rolled_back(caplog):
    team = Team()
    guards = team.guards(entropy_blowup_factor=2.0, rollback_on_blowup=True)
    for i in range(BASELINE_ITERATIONS):
        metrics = {"train/entropy": 1.0 + 0.1 * i}
        guards.check_entropy(metrics, i)
        assert metrics["train/entropy_blowup"] == 0
    assert guards.entropy_baseline == pytest.approx([1.0, 1.1, 1.2])
    metrics = {"train/entropy": 2.1}  # below 2 x 1.1
    guards.check_entropy(metrics, 3)
    assert metrics == {"train/entropy": 2.1, "train/entropy_blowup": 0}
    good = team.weights()
    team.train_step()
    metrics = {"train/entropy": 2.3}
    guards.check_entropy(metrics, 4)
    assert metrics["train/entropy_blowup"] == 1 and metrics["train/rolled_back"] == 1
    assert same(good, team.weights())
    assert "Entropy blow-up at iteration 4" in caplog.text


def test_entropy_blowup_without_rollback_only_flags_it():
    team = Team()
    guards = team.guards(entropy_blowup_factor=2.0)
    for i in range(BASELINE_ITERATIONS):
        guards.check_entropy({"train/entropy": 1.0}, i)
    assert guards.last_good is None
    team.train_step()
    changed = team.weights()
    metrics = {"train/entropy": 5.0}
    guards.check_entropy(metrics, 3)
    assert metrics == {"train/entropy": 5.0, "train/entropy_blowup": 1}
    assert same(changed, team.weights())


@pytest.mark.parametrize("entropy", [None, float("nan")])
def test_entropy_check_ignores_a_missing_or_non_finite_entropy(entropy):
    guards = Team().guards()
    metrics = {} if entropy is None else {"train/entropy": entropy}
    guards.check_entropy(metrics, 0)
    assert "train/entropy_blowup" not in metrics and guards.entropy_baseline == []


def test_no_factor_turns_the_entropy_check_off():
    guards = Team().guards(entropy_blowup_factor=None)
    metrics = {"train/entropy": 100.0}
    guards.check_entropy(metrics, 0)
    assert metrics == {"train/entropy": 100.0}


def test_state_round_trips_the_baseline_and_the_streak():
    guards = Team().guards()
    guards.entropy_baseline, guards.nonfinite_streak = [0.5, 0.7], 2
    other = Team().guards()
    other.load_state(guards.state())
    assert other.entropy_baseline == [0.5, 0.7] and other.nonfinite_streak == 2
    other.load_state({})
    assert other.entropy_baseline == [] and other.nonfinite_streak == 0
