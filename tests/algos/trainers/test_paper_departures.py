"""GSPO with a loss_type other than grpo departs from the paper: one warning per process, naming
the fix (marft_algos/trainers/paper_departures.py, docs/maths.md "Sequence-level ratios")."""

from __future__ import annotations

import logging

import pytest

from marft_algos.trainers import paper_departures
from marft_algos.trainers.grpo import GRPOConfig
from marft_algos.trainers.rloo import RLOOConfig

LOGGER = "marft_algos.trainers.paper_departures"


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paper_departures, "_warned", set())


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "dr_grpo"])
def test_sequence_ratios_with_a_length_weighted_loss_warn_once(caplog, loss_type):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        GRPOConfig(importance_sampling_level="sequence", loss_type=loss_type)
        GRPOConfig(importance_sampling_level="sequence", loss_type=loss_type)
    (message,) = warnings_of(caplog)
    assert f"loss_type={loss_type!r} is not GSPO's objective" in message
    assert "weighs by its length" in message and "set loss_type='grpo'" in message


def test_the_default_loss_type_warns_under_gspo(caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        RLOOConfig(importance_sampling_level="sequence", level="token")
    assert len(warnings_of(caplog)) == 1  # dapo, the default


@pytest.mark.parametrize(
    "settings",
    [
        {"importance_sampling_level": "sequence", "loss_type": "grpo"},
        {"importance_sampling_level": "token", "loss_type": "dapo"},
        {},
    ],
)
def test_the_papers_objective_and_token_ratios_do_not_warn(caplog, settings):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        GRPOConfig(**settings)
    assert warnings_of(caplog) == []
