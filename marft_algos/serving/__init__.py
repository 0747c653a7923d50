"""Serving a trained team to its unchanged agent program: an OpenAI-compatible endpoint whose
``model`` names are the agents, each answered with its own adapter (``marft serve``)."""

from __future__ import annotations

from marft_algos.serving.app import build_app, request_settings
from marft_algos.serving.batcher import Batcher, BatcherClosed
from marft_algos.serving.server import BackgroundServer, serve
from marft_algos.serving.team import (
    EXPORT_INDEX,
    ServedTeam,
    is_export,
    team_from_checkpoint,
    team_from_export,
)

__all__ = [
    "EXPORT_INDEX",
    "BackgroundServer",
    "Batcher",
    "BatcherClosed",
    "ServedTeam",
    "build_app",
    "is_export",
    "request_settings",
    "serve",
    "team_from_checkpoint",
    "team_from_export",
]
