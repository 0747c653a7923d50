"""The real-model recipes the README and docs give are commands ``marft train`` accepts as
written, and their tables match the run outcomes recorded in the repository."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

import marft_envs  # noqa: F401  (registers the built-in envs)
from marft_algos.cli.train import parse_train_args
from marft_envs import registration

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RECORDS = ROOT / "benchmarks" / "real_model" / "code_recipe"


def shell_commands(text: str) -> list[str]:
    """The commands of the page's ``bash`` blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = " ".join(line.split(" #", 1)[0].split())
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


def recipes() -> list[tuple[str, str]]:
    """``(page, command)`` for every ``marft train`` command on SmolLM2 in a bash block."""
    found = []
    for page in PAGES:
        for command in shell_commands(page.read_text()):
            if command.startswith("marft train") and "smollm2-135m-instruct" in command:
                found.append((page.name, command))
    return found


def test_the_pages_give_recipes_on_a_math_and_a_new_family() -> None:
    envs = {argv[argv.index("--env") + 1] for _, c in recipes() if "--env" in (argv := c.split())}
    assert "math-single-v7" in envs
    assert "code-single-v2" in envs


@pytest.mark.parametrize(("page", "command"), recipes(), ids=lambda v: v[:60])
def test_a_recipe_parses_as_written(page: str, command: str) -> None:
    argv = shlex.split(command)[2:]
    args, _, values, given = parse_train_args(argv)
    assert args.model == "smollm2-135m-instruct"
    assert args.env in registration.registry, f"{page}: {args.env} is not a current env id"
    assert {"learning_rate", "iterations"} <= given, f"{page}: {command}"
    assert values["learning_rate"] == float(argv[argv.index("--learning-rate") + 1])
    if args.profiles:
        assert (ROOT / args.profiles).is_file(), f"{page} names a missing file {args.profiles}"


def outcome_table(folder: Path) -> dict[int, tuple[int, int, int, int]]:
    """seed -> (right before, right after, wrong→right, right→wrong), counted here from the
    recorded per-task outcomes (not from the recorded summaries)."""
    table = {}
    for run in sorted(folder.glob("seed*")):
        rows = [json.loads(line) for line in (run / "eval_outcomes.jsonl").open()]
        first, last = rows[0]["episodes"], rows[-1]["episodes"]
        assert [e["seed"] for e in first] == [e["seed"] for e in last]
        before = [e["correct"] for e in first]
        after = [e["correct"] for e in last]
        table[int(run.name[4:])] = (
            sum(before),
            sum(after),
            sum(not b and a for b, a in zip(before, after, strict=True)),
            sum(b and not a for b, a in zip(before, after, strict=True)),
        )
    return table


@pytest.mark.parametrize(
    ("env", "seeds"), [("code-single-v2", [0, 1, 2]), ("code-dual-v2", [0, 1])]
)
def test_the_code_recipe_tables_match_the_recorded_outcomes(env: str, seeds: list[int]) -> None:
    text = (ROOT / "docs" / "real_model.md").read_text()
    table = outcome_table(RECORDS / env)
    assert sorted(table) == seeds
    for seed, (before, after, gained, lost) in table.items():
        row = re.search(
            rf"^\| {seed} \| {before}/100 \| \*\*{after}/100\*\* \| (\d+) \| (\d+) \|", text, re.M
        )
        assert row, f"docs/real_model.md has no row for {env} seed {seed}: {before} -> {after}"
        assert (int(row[1]), int(row[2])) == (gained, lost)
        summary = json.loads((RECORDS / env / f"seed{seed}" / "summary.json").read_text())
        assert summary["command"].startswith(f"marft train --env {env} ")
        assert (summary["right_before"], summary["right_after"]) == (before, after)
        assert (summary["wrong_to_right"], summary["right_to_wrong"]) == (gained, lost)


def test_the_recipe_script_runs_the_documented_command() -> None:
    sys.path.insert(0, str(RECORDS.parent))
    from code_recipe import COMMAND

    documented = [c for page, c in recipes() if "code-single-v2" in c]
    assert documented and set(documented) == {COMMAND}
