"""Warnings for settings that depart from the paper an option is named after, as TRL warns.

A combination that is allowed but is not the paper's objective trains, with one
``logging.warning`` per process that names the departure and the setting that removes it.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["gspo_departures", "warn_departures"]

logger = logging.getLogger(__name__)

_warned: set[str] = set()

_LENGTH_WEIGHTS = {
    "dapo": "every token of the batch once",
    "bnpo": "every token of the batch once",
    "dr_grpo": "every token over a constant length",
}


def gspo_departures(config: Any) -> list[str]:
    """Where ``config`` departs from GSPO's objective (Zheng et al. 2025, arXiv:2507.18071, eq. 5).

    GSPO averages each sequence's clipped loss ``min(s_b A_b, clip(s_b) A_b)`` over the group's
    sequences, every sequence weighted alike. Only ``loss_type="grpo"`` does that with
    ``importance_sampling_level="sequence"``: ``dapo``, ``bnpo`` and ``dr_grpo`` sum the
    sequence's loss over its tokens, weighting each sequence by its length.

    Args:
        config: A trainer config with ``importance_sampling_level`` and ``loss_type``.

    Returns:
        One sentence per departure (empty with token ratios, at ``level="action"`` or with
        ``loss_type="grpo"``).
    """
    if getattr(config, "importance_sampling_level", "token") != "sequence":
        return []
    if getattr(config, "level", "token") != "token":
        return []  # refused at action level (check_level_options), not warned about
    loss_type = getattr(config, "loss_type", "grpo")
    if loss_type == "grpo":
        return []
    return [
        f"importance_sampling_level='sequence' with loss_type={loss_type!r} is not GSPO's "
        f"objective: {loss_type} counts {_LENGTH_WEIGHTS.get(loss_type, 'tokens')}, so each "
        f"sequence (one decision) weighs by its length; set loss_type='grpo' for the paper's "
        f"mean over sequences (docs/maths.md, 'Sequence-level ratios')."
    ]


def warn_departures(config: Any) -> None:
    """Log each departure of ``config`` from its paper once per process (``logging.warning``).

    Args:
        config: A trainer config (see :func:`gspo_departures`).
    """
    for message in gspo_departures(config):
        if message not in _warned:
            _warned.add(message)
            logger.warning(message)
