"""``marft envs``: the registry, with each env's team and dependency function."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from marft_algos.cli.parsing import UsageError, build_parser, parse_with, pick
from marft_envs.core.modules import import_user_module

__all__ = ["EnvsArguments", "describe_envs", "main"]


@dataclass
class EnvsArguments:
    """What to list."""

    json: bool = False
    """Print the registry as JSON instead of a table."""
    import_module: str | None = None
    """Import this module first (one that registers envs), e.g. my_package.envs, or team for a
    team.py in the working folder."""


def describe_envs() -> list[dict[str, Any]]:
    """Every registered env (installed plugins included): id, team, dependency function, description.

    The team and dependency are read from an env built with the registered defaults; an env that
    cannot be built that way shows the error instead.
    """
    import marft_envs

    marft_envs.load_plugins()
    rows = []
    for env_id in sorted(marft_envs.registry):
        spec = marft_envs.registry[env_id]
        row: dict[str, Any] = {"id": env_id, "description": spec.description}
        try:
            env = spec.make()
            base = env.unwrapped
            row["agents"] = list(env.possible_agents)
            dependency = getattr(base, "dependency", None)
            row["dependency"] = type(dependency).__name__ if dependency is not None else None
            row["takes_dataset"] = spec.accepts("dataset")
            env.close()
        except Exception as exc:  # one env that needs arguments must not hide the others
            row["error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Run ``marft envs``; returns the rows."""
    from rich.console import Console
    from rich.table import Table

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(
        [EnvsArguments], prog="marft envs", description="List the registered environments."
    )
    values, _ = parse_with(parser, argv)
    args = EnvsArguments(**pick(values, EnvsArguments))
    if args.import_module:
        try:  # from the working folder too, as marft train --env team:name-v0 imports team
            import_user_module(args.import_module)
        except ImportError as exc:
            raise UsageError(
                f"cannot import --import-module {args.import_module!r}: {exc}. Give a module that "
                f"registers envs: a .py file or package in this folder, or one installed."
            ) from exc
    rows = describe_envs()
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return rows
    table = Table(title="marft environments")
    for column in ("id", "team", "dependency", "description"):
        table.add_column(column)
    for row in rows:
        joiner = " → " if row.get("dependency") == "Chain" else ", "
        team = joiner.join(row["agents"]) if "agents" in row else f"[red]{row['error'][:60]}[/]"
        table.add_row(row["id"], team, row.get("dependency") or "", row["description"])
    Console().print(table)
    return rows
