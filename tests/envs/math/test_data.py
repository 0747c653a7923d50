"""Tests for the built-in problem generator and the math dataset loaders."""

from __future__ import annotations

import json
import math
import re
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import sympy
from sympy.parsing.sympy_parser import (
    implicit_multiplication_application,
    parse_expr,
    standard_transformations,
)

from marft_envs.math.data import (
    BUILTIN_SIZES,
    MathDataError,
    MathDataset,
    MathProblem,
    last_boxed,
    load_builtin,
    load_dataset,
    load_gsm8k_jsonl,
    load_hf_dataset,
    load_math_jsonl,
    load_table,
)
from marft_envs.math.generator import FAMILIES, LEVELS, Family, RetryDraw, generate_problems
from marft_envs.math.grading import check_gold, grade_answer

# --- generator -------------------------------------------------------------------------------


def test_generator_is_deterministic_and_prefix_stable():
    first = generate_problems(200, seed=11)
    assert first == generate_problems(200, seed=11)
    assert generate_problems(50, seed=11) == first[:50]
    other = generate_problems(200, seed=12)
    assert [p.problem for p in first] != [p.problem for p in other]
    assert len({p.problem for p in first}) == 200  # distinct texts


def test_generator_balances_families_and_levels():
    problems = generate_problems(len(FAMILIES) * len(LEVELS) * 4, seed=0)
    counts = {(p.subject, p.level) for p in problems}
    assert counts == {(f, lv) for f in FAMILIES for lv in LEVELS}


def test_generator_rejects_bad_arguments():
    with pytest.raises(ValueError, match="fractions"):
        generate_problems(1, seed=0, families=["fraction"])  # suggests the close name
    with pytest.raises(ValueError, match="levels"):
        generate_problems(1, seed=0, levels=[6])
    with pytest.raises(ValueError, match="n must be"):
        generate_problems(-1, seed=0)
    with pytest.raises(ValueError, match="distinct"):
        # Level-1 "x^2 + c = k^2 + c" has only 930 distinct problems.
        generate_problems(1000, seed=0, families=["quadratic"], levels=[1])


def test_a_user_family_can_be_registered(monkeypatch):
    def doubling(rng, level):
        n = rng.randint(1, 10**level)
        if n % 7 == 0:
            raise RetryDraw  # the generator draws again
        return f"Double {n}.", str(2 * n), [f"2 \\times {n} = {2 * n}"]

    monkeypatch.setitem(FAMILIES, "doubling", Family("doubling", "double a number", doubling))
    problems = generate_problems(30, seed=0, families=["doubling"], levels=[2])
    assert all(
        int(p.answer) % 14 and p.solution.endswith(f"\\boxed{{{p.answer}}}") for p in problems
    )


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_and_level_is_well_formed(family):
    for level in LEVELS:
        problems = generate_problems(25, seed=level, families=[family], levels=[level])
        for p in problems:
            assert (p.level, p.subject) == (level, family)
            assert len(p.problem) < 160, p.problem  # short enough for a byte-level model
            assert p.solution is not None and p.solution.endswith(f"\\boxed{{{p.answer}}}")
            assert last_boxed(p.solution) == p.answer
            check_gold(p.answer)
            assert grade_answer(p.solution, p.answer), p
        # The grader tells answers apart: a solution is wrong for a problem with another answer.
        for p, q in zip(problems, problems[1:] + problems[:1], strict=True):
            if p.answer != q.answer:
                assert not grade_answer(p.solution, q.answer), (p, q)


# Independent re-computation: parse the problem text with sympy and solve it again.

_TRANSFORMS = (*standard_transformations, implicit_multiplication_application)


def _to_sympy(latex: str) -> sympy.Expr:
    text = latex
    for _ in range(3):  # nested \frac
        text = re.sub(r"\\frac\{([^{}]*)\}\{([^{}]*)\}", r"((\1)/(\2))", text)
    text = re.sub(r"\\sqrt\[(\d+)\]\{([^{}]*)\}", r"((\2)**(1/\1))", text)
    text = re.sub(r"\\sqrt\{([^{}]*)\}", r"sqrt(\1)", text)
    text = (
        text.replace("\\times", "*")
        .replace("\\div", "/")
        .replace("^", "**")
        .replace("{", "(")
        .replace("}", ")")
    )
    return parse_expr(
        text,
        transformations=_TRANSFORMS,
        evaluate=True,
        local_dict={"x": sympy.Symbol("x"), "y": sympy.Symbol("y")},
    )


def _answer_values(answer: str) -> list[sympy.Expr]:
    return [sympy.nsimplify(_to_sympy(part)) for part in answer.strip("()").split(",")]


def _recompute(p: MathProblem) -> list[sympy.Expr]:
    x, y = sympy.symbols("x y")
    body = re.sub(
        r"^(Compute|Simplify|Solve for x:|Solve for \(x, y\):|Find all roots of|Find all x with)\s*",
        "",
        p.problem,
    ).rstrip(".")
    if p.subject in ("arithmetic", "fractions", "powers"):
        return [sympy.nsimplify(_to_sympy(body))]
    if p.subject == "linear":
        left, right = body.split("=")
        return [sympy.solve(sympy.Eq(_to_sympy(left), _to_sympy(right)), x)[0]]
    if p.subject == "quadratic":
        left, right = body.split("=")
        return sorted(sympy.solve(sympy.Eq(_to_sympy(left), _to_sympy(right)), x))
    if p.subject == "system":
        eqs = [
            sympy.Eq(_to_sympy(a), _to_sympy(b))
            for a, b in (e.split("=") for e in body.split(", "))
        ]
        solution = sympy.solve(eqs, [x, y], dict=True)[0]
        return [solution[x], solution[y]]
    if p.subject == "percent" and (m := re.fullmatch(r"What is (\d+)\\% of (\d+)\?", p.problem)):
        return [sympy.Rational(int(m.group(1)) * int(m.group(2)), 100)]
    raise LookupError


@pytest.mark.parametrize(
    "family", ["arithmetic", "fractions", "powers", "linear", "system", "quadratic", "percent"]
)
def test_answers_match_an_independent_sympy_solution(family):
    checked = 0
    for p in generate_problems(100, seed=5, families=[family]):
        try:
            expected = _recompute(p)
        except LookupError:
            continue
        assert [
            sympy.simplify(a - b) for a, b in zip(_answer_values(p.answer), expected, strict=True)
        ] == [0] * len(expected), p
        checked += 1
    assert checked >= 30


def test_word_problem_answers_follow_their_steps():
    # Every step "a op b = c" in a worked solution is arithmetically right.
    step = re.compile(r"^(\d+) (\+|-|\\times|\\div) (\d+) = (\d+)$")
    ops = {
        "+": lambda a, b: a + b,
        "-": lambda a, b: a - b,
        "\\times": lambda a, b: a * b,
        "\\div": Fraction,
    }
    n_steps = 0
    for p in generate_problems(100, seed=9, families=["word", "arithmetic"]):
        for line in p.solution.splitlines():
            if m := step.match(line):
                assert ops[m.group(2)](int(m.group(1)), int(m.group(3))) == int(m.group(4)), (
                    p,
                    line,
                )
                n_steps += 1
    assert n_steps > 100


# --- built-in splits -----------------------------------------------------------------------------


def test_builtin_splits_are_fixed_and_disjoint():
    train, test = load_dataset("builtin"), load_dataset("builtin:test")
    assert (len(train), len(test)) == (BUILTIN_SIZES["train"], BUILTIN_SIZES["test"])
    assert (train.name, train.split, test.split) == ("builtin", "train", "test")
    assert not {p.problem for p in train} & {p.problem for p in test}
    assert list(load_dataset("builtin:train")[:20]) == list(train[:20])
    assert {p.level for p in test} == set(LEVELS) and {p.subject for p in test} == set(FAMILIES)
    # Disjoint whatever is asked for.
    small = load_builtin("test", size=50, levels=[1], families=["arithmetic", "word"])
    big = load_builtin("train", size=800, levels=[1], families=["arithmetic", "word"])
    assert not {p.problem for p in small} & {p.problem for p in big}
    picked = load_dataset("builtin:test", levels=[2, 3], subjects=["linear"], size=10)
    assert (
        len(picked) == 10
        and {p.subject for p in picked} == {"linear"}
        and {p.level for p in picked} <= {2, 3}
    )
    with pytest.raises(ValueError, match="splits"):
        load_dataset("builtin:dev")


# --- MathProblem and MathDataset ---------------------------------------------------------------


def test_math_problem_validates_fields():
    with pytest.raises(ValueError, match="problem"):
        MathProblem("  ", "1")
    with pytest.raises(ValueError, match="answer"):
        MathProblem("Compute 1 + 1.", "")
    with pytest.raises(ValueError, match="level"):
        MathProblem("Compute 1 + 1.", "2", level=0)


def test_dataset_indexing_sampling_filtering_and_splits():
    problems = [
        MathProblem(f"Compute {i} + 1.", str(i + 1), level=1 + i % 5, subject="a" if i % 2 else "b")
        for i in range(40)
    ]
    problems.append(problems[0])  # a duplicate text must stay on one side of a split
    ds = MathDataset(problems, name="toy", split="all")
    assert (
        len(ds) == 41
        and ds[3] is problems[3]
        and isinstance(ds[2:5], MathDataset)
        and len(ds[2:5]) == 3
    )
    draws = [ds.sample(np.random.default_rng(4)) for _ in range(2)]
    assert draws[0] == draws[1]
    assert {ds.sample(np.random.default_rng(s)).problem for s in range(30)} != {draws[0].problem}
    assert {p.level for p in ds.filter(levels=[2])} == {2}
    assert {p.subject for p in ds.filter(subjects=["a"], levels=[2, 4])} == {"a"}
    train, test = ds.train_test_split(0.25, seed=0)
    assert (train.split, test.split) == ("train", "test") and len(train) + len(test) == 41
    assert len({p.problem for p in test}) == 10
    assert not {p.problem for p in train} & {p.problem for p in test}
    again = ds.train_test_split(0.25, seed=0)
    assert list(again[1]) == list(test) and list(ds.train_test_split(0.25, seed=1)[1]) != list(test)
    assert len({p.problem for p in ds.train_test_split(5, seed=0)[1]}) == 5
    for bad in (0.0, 1.0, 0, 40, True):
        with pytest.raises(ValueError, match="test_size"):
            ds.train_test_split(bad, seed=0)
    with pytest.raises(ValueError, match="empty"):
        MathDataset([]).sample(np.random.default_rng(0))
    with pytest.raises(TypeError, match="MathProblem"):
        MathDataset([{"problem": "p", "answer": "1"}])


# --- loaders on small files --------------------------------------------------------------------


def _jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


MATH_ROWS = [
    {
        "problem": "What is $1+1$?",
        "solution": "It is $\\boxed{2}$.",
        "answer": "2",
        "level": "Level 1",
        "subject": "Algebra",
        "unique_id": "a/1",
    },
    {
        "problem": "Half of 3?",
        "solution": "So $\\boxed{\\frac{3}{2}}$.",
        "level": "Level 3",
        "subject": "Prealgebra",
        "unique_id": "a/2",
    },
    {
        "problem": "Roots?",
        "solution": "$\\boxed{\\{1, 2\\}}$ and more {braces}",
        "level": "Level ?",
    },
]


def test_load_math_jsonl_reads_levels_and_falls_back_to_boxed(tmp_path):
    ds = load_math_jsonl(_jsonl(tmp_path / "m.jsonl", MATH_ROWS), split="test")
    assert (ds.name, ds.split, len(ds)) == ("m", "test", 3)
    assert [p.answer for p in ds] == ["2", "\\frac{3}{2}", "\\{1, 2\\}"]
    assert [p.level for p in ds] == [1, 3, None]
    assert [p.id for p in ds] == ["a/1", "a/2", "m-2"]
    assert ds[2].subject is None
    assert list(load_dataset(tmp_path / "m.jsonl")) == list(ds)  # MATH format recognised


def test_load_gsm8k_jsonl_parses_the_final_answer(tmp_path):
    rows = [
        {
            "question": "Tom has 1,200 coins and doubles them. How many?",
            "answer": "1,200*2=<<1200*2=2400>>2,400 coins.\n#### 2,400",
            "idx": 7,
        },
        {"question": "Owe 3?", "answer": "So -3.\n#### -3"},
    ]
    ds = load_gsm8k_jsonl(_jsonl(tmp_path / "g.jsonl", rows))
    assert [p.answer for p in ds] == ["2400", "-3"]
    assert ds[0].solution == "1,200*2=2,400 coins." and ds[0].id == "7"
    assert list(load_dataset(str(tmp_path / "g.jsonl"))) == list(ds)
    _jsonl(tmp_path / "bad.jsonl", [rows[0], {"question": "q", "answer": "no marker"}])
    with pytest.raises(MathDataError, match=r"bad\.jsonl, line 2, field 'answer'.*####"):
        load_gsm8k_jsonl(tmp_path / "bad.jsonl")


def test_load_table_json_csv_tsv_parquet(tmp_path):
    rows = [
        {"q": "One plus one?", "a": 2, "lvl": 1},
        {"q": "A tenth?", "a": 0.1, "lvl": "Level 2"},
        {"q": "Three?", "a": 3.0, "lvl": 3},
    ]
    fields = {"problem_field": "q", "answer_field": "a", "level_field": "lvl"}
    (tmp_path / "t.json").write_text(json.dumps(rows))
    (tmp_path / "w.json").write_text(json.dumps({"data": rows}))
    expected = ["2", "0.1", "3"]
    for name in ("t.json", "w.json"):
        ds = load_table(tmp_path / name, **fields)
        assert [p.answer for p in ds] == expected and [p.level for p in ds] == [1, 2, 3]

    (tmp_path / "t.csv").write_text('q,a,lvl\n"Multi\nline?",3.0,2\nSeven?,7,\n')
    ds = load_table(tmp_path / "t.csv", **fields)
    assert [p.answer for p in ds] == ["3.0", "7"]  # CSV strings are kept as written
    assert ds[0].problem == "Multi\nline?" and [p.level for p in ds] == [2, None]
    (tmp_path / "bom.csv").write_text(
        "q,a\nSix?,6\n", encoding="utf-8-sig"
    )  # as spreadsheets save it
    assert load_table(tmp_path / "bom.csv", problem_field="q", answer_field="a")[0].answer == "6"
    (tmp_path / "t.tsv").write_text("q\ta\nSeven?\t7\n")
    assert load_dataset(tmp_path / "t.tsv", problem_field="q", answer_field="a")[0].answer == "7"

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table(
        {"q": ["Big?", "Small?", "Half?"], "a": [10**15, 1e-7, 2.5], "lvl": [5, 4, None]}
    )
    pq.write_table(table, tmp_path / "t.parquet")
    ds = load_dataset(tmp_path / "t.parquet", **fields)
    assert [p.answer for p in ds] == ["1000000000000000", "0.0000001", "2.5"]
    assert [p.level for p in ds] == [5, 4, None]


def test_non_string_answers_are_converted_exactly_or_rejected(tmp_path):
    cases = [
        (12, "12"),
        (-4.0, "-4"),
        (1 / 3, "0.3333333333333333"),
        (1e21, "1000000000000000000000"),
        (np.int64(5), "5"),
        (np.float32(0.1), "0.1"),
        (Fraction(3, 4), "\\frac{3}{4}"),
    ]
    records = [{"problem": f"P{i}?", "answer": value} for i, (value, _) in enumerate(cases)]
    assert [p.answer for p in load_dataset(records, validate=False)] == [text for _, text in cases]
    for bad, why in (
        (float("nan"), "missing answer"),
        (None, "missing answer"),
        (True, "boolean"),
        (math.inf, "inf"),
        ([1, 2], "list"),
    ):
        with pytest.raises(MathDataError, match=rf"<list>, item 2, field 'answer': .*{why}"):
            load_dataset([{"problem": "ok?", "answer": "1"}, {"problem": "bad?", "answer": bad}])


@pytest.mark.parametrize(
    ("line", "location", "field", "message"),
    [
        ('{"question": "x?", "answer": "1"}', "line 3", "problem", "missing field"),
        ('{"problem": "x?", "answer": "1"', "line 3", None, "invalid JSON"),
        ('{"problem": "   ", "answer": "1"}', "line 3", "problem", "non-empty string"),
        ('{"problem": 5, "answer": "1"}', "line 3", "problem", "non-empty string"),
        ('{"problem": "x?", "answer": "1", "level": "hard"}', "line 3", "level", "level must be"),
        ('{"problem": "x?", "answer": "\\\\frac{1}{"}', "line 3", "answer", "cannot be parsed"),
        ('{"problem": "x?", "solution": "no box"}', "line 3", "answer", "no \\\\boxed"),
        ('["problem", "x?"]', "line 3", None, "expected an object"),
    ],
)
def test_malformed_rows_name_file_line_and_field(tmp_path, line, location, field, message):
    good = json.dumps({"problem": "Fine?", "answer": "1", "level": 2, "solution": "\\boxed{1}"})
    path = tmp_path / "broken.jsonl"
    path.write_text(f"{good}\n\n{line}\n")  # the blank line 2 is skipped but still counted
    with pytest.raises(MathDataError) as info:
        load_table(
            path,
            problem_field="problem",
            answer_field="answer",
            solution_field="solution",
            level_field="level",
        )
    text = str(info.value)
    assert str(path) in text and location in text and message.replace("\\\\", "\\") in text
    assert info.value.location == location and info.value.field == field
    if field:
        assert f"field '{field}'" in text


def test_validation_can_be_skipped_and_csv_errors_give_lines(tmp_path):
    path = _jsonl(tmp_path / "u.jsonl", [{"problem": "x?", "answer": "1,,2"}])
    with pytest.raises(MathDataError, match="cannot be parsed"):
        load_dataset(path)
    assert load_dataset(path, validate=False)[0].answer == "1,,2"
    (tmp_path / "c.csv").write_text('problem,answer\nA?,1\n"B\nb?",2\nC?,\n')
    with pytest.raises(MathDataError, match=r"c\.csv, line 5, field 'answer': missing answer"):
        load_table(tmp_path / "c.csv", problem_field="problem")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(MathDataError, match="no rows"):
        load_dataset(tmp_path / "e.jsonl", problem_field="problem")
    (tmp_path / "odd.jsonl").write_text('{"text": "x?", "target": "1"}\n')
    with pytest.raises(MathDataError, match="problem_field="):
        load_dataset(tmp_path / "odd.jsonl")
    assert (
        load_dataset(tmp_path / "odd.jsonl", problem_field="text", answer_field="target")[0].answer
        == "1"
    )
    with pytest.raises(MathDataError, match=r"odd\.jsonl, field 'lvl': no row has this field"):
        load_dataset(
            tmp_path / "odd.jsonl", problem_field="text", answer_field="target", level_field="lvl"
        )


def test_load_dataset_sources_and_errors(tmp_path):
    probs = [
        MathProblem("Compute 1 + 1.", "2", level=1),
        MathProblem("Compute 2 + 2.", "4", level=2),
    ]
    ds = load_dataset(probs, split="train")
    assert list(ds) == probs and ds.split == "train"
    assert load_dataset(ds) is ds
    assert list(load_dataset(ds, levels=[2])) == probs[1:]
    dicts = [{"problem": "Compute 3 + 3.", "answer": "6", "level": "Level 2", "id": "x"}]
    assert load_dataset(dicts)[0] == MathProblem("Compute 3 + 3.", "6", level=2, id="x")
    with pytest.raises(FileNotFoundError, match="builtin"):
        load_dataset(tmp_path / "nope.jsonl")
    with pytest.raises(TypeError, match="Unsupported"):
        load_dataset(42)
    with pytest.raises(TypeError, match="as is"):
        load_dataset(ds, problem_field="q")
    with pytest.raises(MathDataError, match=r"custom, item 2, field 'answer'"):
        load_dataset(MathDataset([probs[0], MathProblem("Odd?", "1,,2")]), validate=True)
    with pytest.raises(TypeError, match="problem_feld"):
        load_dataset(dicts, problem_feld="q")
    # Formats recognised from contents: JSON Lines under .json, JSON under an unknown extension.
    (tmp_path / "lines.json").write_text(
        '{"problem": "A?", "answer": "1"}\n{"problem": "B?", "answer": "2"}\n'
    )
    assert [p.answer for p in load_dataset(tmp_path / "lines.json")] == ["1", "2"]
    (tmp_path / "rows.data").write_text('\n  [{"problem": "A?", "answer": "1"}]')
    assert load_dataset(tmp_path / "rows.data")[0].answer == "1"
    (tmp_path / "rows.txt").write_text("problem,answer\nA?,1\n")
    with pytest.raises(ValueError, match="format="):
        load_dataset(tmp_path / "rows.txt")
    assert load_dataset(tmp_path / "rows.txt", format="csv")[0].answer == "1"


# --- Hugging Face datasets ---------------------------------------------------------------------


def test_hf_loader_without_datasets_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import now raises ImportError
    with pytest.raises(ImportError, match="pip install datasets"):
        load_dataset("hf:openai/gsm8k", config="main", split="test")


def test_hf_loader_wraps_hub_failures(monkeypatch):
    datasets = pytest.importorskip("datasets")

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hugging Face Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(RuntimeError, match=r"openai/gsm8k.*ConnectionError.*local file"):
        load_dataset("hf:openai/gsm8k", config="main", split="test")


def test_hf_loader_reads_save_to_disk_directories(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = {"question": ["Two and two?", "Ten less one?"], "answer": ["2+2=4\n#### 4", "#### 9"]}
    datasets.DatasetDict({"test": datasets.Dataset.from_dict(rows)}).save_to_disk(tmp_path / "gsm")
    ds = load_dataset(tmp_path / "gsm", split="test")  # a directory goes to load_hf_dataset
    assert [p.answer for p in ds] == ["4", "9"] and ds.split == "test" and ds.name == "gsm"
    with pytest.raises(ValueError, match="splits"):
        load_hf_dataset(tmp_path / "gsm", "train")
    datasets.Dataset.from_dict({"q": ["One?"], "a": [1]}).save_to_disk(tmp_path / "flat")
    ds = load_hf_dataset(tmp_path / "flat", problem_field="q", answer_field="a")
    assert ds[0].answer == "1"


# --- the real benchmark files ------------------------------------------------------------------


def test_math500_loads_and_validates(shared_data):
    ds = load_dataset(shared_data / "math500.jsonl", split="test")  # validates every answer
    assert len(ds) == 500 and {p.level for p in ds} == set(LEVELS) and all(p.subject for p in ds)
    assert all(last_boxed(p.solution) == p.answer for p in ds)
    assert list(load_math_jsonl(shared_data / "math500.jsonl", split="test")) == list(ds)


def test_gsm8k_loads_and_validates(shared_data):
    ds = load_gsm8k_jsonl(shared_data / "gsm8k_test.jsonl", split="test")
    assert len(ds) == 1319 and len({p.id for p in ds}) == 1319
    assert all(re.fullmatch(r"-?\d+(\.\d+)?", p.answer) for p in ds)
    assert all("<<" not in p.solution and "####" not in p.solution for p in ds)
    assert list(load_dataset(str(shared_data / "gsm8k_test.jsonl"), split="test")) == list(ds)


def test_opt_in_digits_family_is_exact_and_not_in_the_default_mix():
    from marft_envs.math.generator import FAMILIES, OPT_IN_FAMILIES, generate_problems

    assert "digits" in OPT_IN_FAMILIES and "digits" not in FAMILIES
    assert all(p.subject != "digits" for p in load_dataset("builtin:test"))
    for level in (1, 2, 3, 4, 5):
        for p in generate_problems(30, seed=level, families=["digits"], levels=[level]):
            expression = (
                p.problem.removeprefix("Compute ").removesuffix(".").replace("\\times", "*")
            )
            assert (
                str(eval(expression)) == p.answer
            )  # products come first, so Python's order agrees
            assert p.solution.count("\n") == level  # one worked step per operation, then the box
