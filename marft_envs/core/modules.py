"""Importing the user's own module that registers envs (``team`` in ``--env team:helpdesk-v0``).

The ``marft`` script, unlike ``python -m``, does not put the working folder on ``sys.path``; a
``team.py`` next to the user is what ``team`` means, so the working folder is tried last.
"""

from __future__ import annotations

import importlib
import os
import sys

__all__ = ["import_user_module"]


def import_user_module(module: str) -> None:
    """Import ``module``, from the working folder when it is found nowhere else.

    Raises:
        ImportError: The module (or one of its imports) cannot be imported.
    """
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if not _add_working_folder(module, exc):
            raise
        importlib.import_module(module)


def _add_working_folder(module: str, exc: ModuleNotFoundError) -> bool:
    """Put the working folder at the end of ``sys.path`` when ``module`` itself (not one of its
    imports) was not found there and is in it; returns whether it did."""
    top = module.split(".")[0]
    folder = os.getcwd()
    if exc.name != top or folder in {os.path.abspath(p or os.curdir) for p in sys.path}:
        return False
    here = os.path.join(folder, top)
    if not (os.path.isfile(here + ".py") or os.path.isdir(here)):
        return False
    sys.path.append(folder)
    importlib.invalidate_caches()
    return True
