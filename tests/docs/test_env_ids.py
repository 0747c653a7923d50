"""Every env id the README and docs name exists: registered, or out of date / retired only where
the text says so, or registered by the code shown next to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import marft_envs  # noqa: F401  (registers the built-in envs)
from marft_envs import registration

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *(p for p in ROOT.glob("docs/**/*.md") if "_build" not in p.parts)]
)

#: An env id: lower-case words joined by '-' and a version, not part of a module path
#: (``my_package.envs:triage-v0`` names a user's module) or of a longer word.
ENV_ID = re.compile(r"(?<![\w.:/-])([a-z][a-z0-9_]*(?:-[a-z0-9_]+)*-v\d+)(?![\w-])")
#: What the text must say next to an id that no longer builds its old behaviour.
SAYS_OLD = re.compile(r"retired|out[\s-]+of[\s-]+date|outdated|OutdatedEnvWarning", re.IGNORECASE)


def blocks(text: str) -> list[tuple[int, str]]:
    """Paragraphs, tables, list items and code blocks (lines up to a blank one), with their first
    line number."""
    found, start, lines = [], 1, []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            if not lines:
                start = number
            lines.append(line)
        elif lines:
            found.append((start, "\n".join(lines)))
            lines = []
    if lines:
        found.append((start, "\n".join(lines)))
    return found


def page_note(text: str) -> str:
    """The note a page opens with (a ``>`` quote before the first section), which covers the page."""
    head = text.split("\n## ", 1)[0]
    return "\n".join(line for line in head.splitlines() if line.startswith(">"))


def registered_nearby(env_id: str, block: str, text: str) -> bool:
    """The page registers the id itself, or a repository file the block names does."""
    if re.search(rf"register\w*\(\s*[\"']{re.escape(env_id)}[\"']", text):
        return True
    for path in re.findall(r"[\w./-]+\.py", block):
        file = ROOT / path
        if file.is_file() and re.search(rf"[\"']{re.escape(env_id)}[\"']", file.read_text()):
            return True
    return False


def problems(text: str, name: str) -> list[str]:
    """What is wrong with the env ids that ``text`` (the page ``name``) names."""
    registration.load_plugins()
    note = page_note(text)
    found = []
    parts = blocks(text)
    for i, (start, block) in enumerate(parts):
        # A table's caption and its note are the paragraphs around it.
        around = [p for _, p in parts[max(i - 1, 0) : i + 2]] if block.startswith("|") else [block]
        for env_id in sorted(set(ENV_ID.findall(block))):
            if env_id in registration.registry:
                continue
            where = f"{name}:{start}: {env_id}"
            if env_id in registration.deprecated or env_id in registration.retired:
                if not (any(SAYS_OLD.search(p) for p in around) or SAYS_OLD.search(note)):
                    found.append(f"{where} is out of date, and the text does not say so")
            elif not registered_nearby(env_id, block, text):
                found.append(f"{where} is not registered")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_env_id_named_exists(page: Path) -> None:
    assert problems(page.read_text(), page.relative_to(ROOT).as_posix()) == []


def test_the_check_catches_unknown_and_unmarked_old_ids() -> None:
    text = (
        "Train `math-dual-v7`, or `math-dual-v9`.\n\n`debate-v0` pays the final round.\n\n"
        "`debate-v1` is out of date: it builds debate-v7.\n\n"
        "Your own: `marft train --env my_package.envs:triage-v0`.\n"
    )
    assert problems(text, "page.md") == [
        "page.md:1: math-dual-v9 is not registered",
        "page.md:3: debate-v0 is out of date, and the text does not say so",
    ]
