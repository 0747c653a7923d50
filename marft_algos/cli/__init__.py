"""The ``marft`` command line and the pieces scripts share with it.

- :mod:`~marft_algos.cli.main`: ``marft train | eval | envs | export`` (console script ``marft``);
- :data:`ALGORITHMS` / :func:`build_trainer`: algorithm name → config and trainer classes;
- :mod:`~marft_algos.cli.parsing`: dataclass configs → flags through transformers'
  ``HfArgumentParser``, ``--config run.yaml``;
- :func:`~marft_algos.cli.presets.preset_for`: the defaults the command line uses for a model.
"""

from __future__ import annotations

from marft_algos.cli.parsing import UsageError, field_docs
from marft_algos.trainers.registry import ALGORITHMS, build_trainer

__all__ = ["ALGORITHMS", "UsageError", "build_trainer", "field_docs"]
