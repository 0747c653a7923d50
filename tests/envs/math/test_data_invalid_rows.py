"""Loaders keep what they can: ``on_invalid="skip"``, its report, and errors on non-UTF-8 files."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import marft_envs
from marft_envs.math.data import (
    MathDataError,
    MathDataset,
    MathProblem,
    load_dataset,
    load_gsm8k_jsonl,
    load_table,
)
from marft_envs.math.grading import grade_answer

# Golds that real evaluation files contain and the grader cannot read.
UNREADABLE_GOLDS = ["np.arcsin(10/13)", "", "\\frac{1}{"]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row(answer: str, i: int) -> str:
    return json.dumps(
        {"problem": f"Problem {i}?", "answer": answer, "level": "Level 2", "subject": "Algebra"}
    )


@pytest.fixture
def mixed_file(tmp_path: Path) -> Path:
    lines = [_row(str(i), i) for i in range(1, 11)]
    lines[2] = _row("np.arcsin(10/13)", 3)  # line 3: unreadable gold
    lines[5] = _row("", 6)  # line 6: empty answer
    lines[7] = '{"problem": "broken", "answer": "1"'  # line 8: invalid JSON
    return _write(tmp_path / "mixed.jsonl", lines)


def test_default_still_raises_at_the_first_invalid_row(mixed_file: Path, tmp_path: Path) -> None:
    # Rows are read first and golds checked after, so the empty answer of line 6 is met first.
    with pytest.raises(MathDataError, match="line 6"):
        load_dataset(mixed_file)
    path = _write(
        tmp_path / "gold.jsonl", [_row("1", 1), _row("2", 2), _row("np.arcsin(10/13)", 3)]
    )
    with pytest.raises(MathDataError, match=r"line 3, field 'answer'.*np\.arcsin"):
        load_dataset(path)


def test_skip_keeps_the_readable_rows_and_says_what_it_dropped(mixed_file: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="marft_envs.math.rows"):
        ds = load_dataset(mixed_file, on_invalid="skip")
    assert [p.problem for p in ds] == [f"Problem {i}?" for i in (1, 2, 4, 5, 7, 9, 10)]
    assert len(ds) == 7 and ds.rows_read == 10
    assert [s.location for s in ds.skipped] == ["line 3", "line 6", "line 8"]
    reasons = [s.reason for s in ds.skipped]
    assert (
        "np.arcsin(10/13)" in reasons[0]
        and "missing answer" in reasons[1]
        and "invalid JSON" in reasons[2]
    )
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1, messages
    line = messages[0]
    assert str(mixed_file) in line and "skipped 3" in line and "kept 7 of 10" in line
    assert "line 3" in line and "line 6" in line and "line 8" in line and "\n" not in line
    assert "skipped=3" in repr(ds)
    # The kept rows are graded as usual.
    assert grade_answer("\\boxed{4}", ds[2].answer)


def test_skip_reports_only_the_first_few_rows(tmp_path: Path, caplog) -> None:
    lines = [_row("np.x" if i % 2 else str(i), i) for i in range(1, 21)]
    path = _write(tmp_path / "many.jsonl", lines)
    with caplog.at_level(logging.WARNING, logger="marft_envs.math.rows"):
        ds = load_dataset(path, on_invalid="skip")
    assert len(ds) == 10 and len(ds.skipped) == 10
    (line,) = [r.getMessage() for r in caplog.records]
    assert "line 1:" in line and "line 5:" in line and "line 7" not in line and "7 more" in line


def test_a_file_with_no_valid_row_still_fails(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "bad.jsonl", [_row(g, i) for i, g in enumerate(UNREADABLE_GOLDS, start=1)]
    )
    with pytest.raises(MathDataError, match="no valid rows: all 3 rows are invalid"):
        load_dataset(path, on_invalid="skip")


def test_on_invalid_is_checked(mixed_file: Path) -> None:
    with pytest.raises(ValueError, match="on_invalid must be 'raise' or 'skip', got 'ignore'"):
        load_dataset(mixed_file, on_invalid="ignore")  # type: ignore[arg-type]


def test_skip_works_for_csv_gsm8k_lists_and_datasets(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(
        "problem,answer\nA?,1\nB?,np.y\nC?,3,extra\nD?,4\n", encoding="utf-8"
    )
    ds = load_table(tmp_path / "t.csv", problem_field="problem", on_invalid="skip")
    assert [p.answer for p in ds] == ["1", "4"] and [s.location for s in ds.skipped] == [
        "line 3",
        "line 4",
    ]

    gsm = _write(
        tmp_path / "g.jsonl",
        [
            json.dumps({"question": "q1?", "answer": "so #### 5"}),
            json.dumps({"question": "q2?", "answer": "no marker"}),
        ],
    )
    assert [p.answer for p in load_gsm8k_jsonl(gsm, on_invalid="skip")] == ["5"]

    rows = [{"problem": "a?", "answer": "1"}, {"problem": "b?", "answer": "np.z"}]
    assert len(load_dataset(rows, on_invalid="skip")) == 1
    problems = MathDataset([MathProblem("a?", "1"), MathProblem("b?", "np.z")])
    kept = load_dataset(problems, validate=True, on_invalid="skip")
    assert len(kept) == 1 and kept.skipped[0].location == "item 2"


def test_non_utf8_file_names_the_file_and_byte_offset(tmp_path: Path) -> None:
    path = tmp_path / "latin.jsonl"
    good = _row("1", 1).encode("utf-8") + b"\n"
    path.write_bytes(good + b'{"problem": "caf\xe9?", "answer": "2"}\n')
    offset = len(good) + len(b'{"problem": "caf')
    for on_invalid in ("raise", "skip"):
        with pytest.raises(MathDataError) as info:
            load_dataset(path, on_invalid=on_invalid)
        text = str(info.value)
        assert (
            str(path) in text and f"byte {offset}" in text and "line 2" in text and "UTF-8" in text
        )
    csv_path = tmp_path / "latin.csv"
    csv_path.write_bytes(b"problem,answer\ncaf\xe9?,2\n")
    with pytest.raises(MathDataError, match=r"latin\.csv, byte 18 \(line 2\)"):
        load_table(csv_path, problem_field="problem")


def test_env_takes_on_invalid_through_dataset_kwargs(mixed_file: Path) -> None:
    with pytest.raises(MathDataError):
        marft_envs.make("math-single-v7", dataset=str(mixed_file))
    env = marft_envs.make(
        "math-single-v7", dataset=str(mixed_file), dataset_kwargs={"on_invalid": "skip"}
    )
    dataset = env.unwrapped.dataset if hasattr(env, "unwrapped") else env.dataset
    assert len(dataset) == 7 and dataset.rows_read == 10


def test_real_math_file_with_unreadable_rows_keeps_the_rest(
    tmp_path: Path, shared_data: Path
) -> None:
    rows = [
        json.loads(line)
        for line in (shared_data / "math500.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    broken = {7: "np.arcsin(10/13)", 42: "", 99: "\\frac{1}{"}
    lines = []
    for i, row in enumerate(rows[:120], start=1):
        if i in broken:
            row = {**row, "answer": broken[i]}
            if broken[i] == "":
                row.pop("solution")  # no \boxed{} to fall back on: an empty answer
        lines.append(json.dumps(row))
    path = _write(tmp_path / "math_like.jsonl", lines)
    with pytest.raises(MathDataError, match="line 42"):  # rows are read before golds are checked
        load_dataset(path)
    ds = load_dataset(path, on_invalid="skip")
    assert len(ds) == 117 and [s.location for s in ds.skipped] == ["line 7", "line 42", "line 99"]
    kept = [r for i, r in enumerate(rows[:120], start=1) if i not in broken]
    assert [p.id for p in ds] == [r["unique_id"] for r in kept]
    assert all(grade_answer(p.solution, p.answer) for p in ds)
