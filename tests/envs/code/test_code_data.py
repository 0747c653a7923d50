"""Code datasets: MBPP and HumanEval loaders, validation of reference solutions, the generator."""

from __future__ import annotations

import json
import logging

import pytest

from marft_envs.code.data import (
    CodeDataError,
    CodeDataset,
    CodeProblem,
    load_dataset,
    load_humaneval,
    load_mbpp,
)
from marft_envs.code.generator import FAMILIES, generate_problems, load_builtin
from marft_envs.sandbox.runner import Sandbox, SandboxLimits, available_isolation

pytestmark = pytest.mark.skipif(
    available_isolation() is None, reason="no code sandbox can run here"
)

LIMITS = SandboxLimits(cpu_seconds=10, wall_seconds=20.0)


def _mbpp_rows(shared_data, step=17):
    rows = json.loads((shared_data / "mbpp_sanitized.json").read_text())
    return rows[::step]  # 26 rows spread over the file


def _humaneval_rows(shared_data, step=7):
    rows = [json.loads(line) for line in (shared_data / "humaneval.jsonl").read_text().splitlines()]
    return rows[::step]  # 24 rows spread over the file


def test_mbpp_sample_references_pass_and_others_fail(shared_data, tmp_path):
    rows = _mbpp_rows(shared_data)
    path = tmp_path / "mbpp.json"
    path.write_text(json.dumps(rows))
    dataset = load_mbpp(path, limits=LIMITS)  # validates: raises if any reference fails
    assert len(dataset) == len(rows)
    assert dataset[0].id == f"mbpp-{rows[0]['task_id']}"
    assert rows[0]["test_list"][0] in dataset[0].prompt  # MBPP shows one test as the example
    # The grader is not a rubber stamp: each reference fails the next problem's tests.
    sandbox = Sandbox(LIMITS)
    swapped = sandbox.run_many(
        [
            (b.program(a.reference), b.unit_tests)
            for a, b in zip(dataset, [*dataset[1:], dataset[0]], strict=True)
        ]
    )
    assert not any(r.all_passed for r in swapped)


def test_humaneval_sample_references_pass_and_others_fail(shared_data, tmp_path):
    rows = _humaneval_rows(shared_data)
    path = tmp_path / "he.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    dataset = load_humaneval(path, limits=LIMITS)  # validated
    assert list(load_dataset(path, validate=False)) == list(dataset)  # recognised as HumanEval
    assert len(dataset) == len(rows)
    first = dataset[0]
    assert first.id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert len(first.tests) == 7  # one per assert of check(candidate)
    sandbox = Sandbox(LIMITS)
    # The prompt alone (signature and docstring, no body) fails every problem.
    results = sandbox.run_many([(p.program(""), p.unit_tests) for p in dataset])
    assert not any(r.all_passed for r in results)


@pytest.mark.slow
def test_every_reference_of_the_real_files_passes(shared_data):
    assert len(load_dataset(shared_data / "mbpp_sanitized.json", limits=LIMITS)) == 427
    assert len(load_dataset(shared_data / "humaneval.jsonl", limits=LIMITS)) == 164


def test_original_mbpp_fields_and_jsonl(tmp_path):
    row = {
        "task_id": 7,
        "text": "Write a function to double a number.",
        "code": "def double(x):\n    return SCALE * x",
        "test_list": ["assert double(2) == 4", "assert double(0) == 0"],
        "test_setup_code": "SCALE = 2",
        "challenge_test_list": [],
    }
    path = tmp_path / "mbpp.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (problem,) = load_dataset(path)
    assert problem.setup == "SCALE = 2" and problem.preamble == "SCALE = 2"
    assert problem.entry_point == "double" and problem.id == "mbpp-7"


def _broken_rows():
    good = {
        "prompt": "Add.",
        "code": "def add(a, b):\n    return a + b",
        "test_list": ["assert add(1, 2) == 3"],
        "test_imports": [],
    }
    bad = {**good, "code": "def add(a, b):\n    return a - b", "task_id": 99}
    return [good, bad, good]


def test_on_invalid_raise_names_the_row_and_skip_drops_it(tmp_path, caplog):
    path = tmp_path / "mbpp.json"
    path.write_text(json.dumps(_broken_rows()))
    with pytest.raises(CodeDataError, match=r"row 2.*'code'.*passes 0 of 1 tests \(wrong_answer"):
        load_mbpp(path)
    with caplog.at_level(logging.WARNING):
        dataset = load_mbpp(path, on_invalid="skip")
    assert len(dataset) == 2
    assert "Skipped 1 of 3 rows" in caplog.text and "mbpp-99" in caplog.text
    assert len(load_mbpp(path, validate=False)) == 3
    with pytest.raises(ValueError, match="on_invalid"):
        load_mbpp(path, on_invalid="ignore")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('[{"prompt": "x", "code": "pass"}]', "neither an MBPP row"),
        ('[{"prompt": "x", "test_list": []}]', "'test_list': no tests"),
        ('[{"prompt": "", "test_list": ["assert 1"]}]', "'prompt'"),
        ('[{"prompt": "x", "test_list": "assert f()", "test_imports": 3}]', "'test_imports'"),
        (
            '{"prompt": "x", "test": "def check(candidate): pass", "entry_point": "f"}\n',
            "contains no assert",
        ),
        ('{"prompt": "x", "test": "assert True", "entry_point": "f"}\n', "no `def check"),
        (
            '{"prompt": "x", "test": "def check(c):\\n  assert c", "entry_point": "f g"}\n',
            "not a Python name",
        ),
        ('{"prompt": "x"\n', "line 1.*invalid JSON"),
        ("[]", "no rows"),
    ],
)
def test_malformed_rows_get_clear_errors(tmp_path, content, message):
    path = tmp_path / "data.json"
    path.write_text(content)
    with pytest.raises(CodeDataError, match=message):
        load_dataset(path, validate=False)


def test_bad_sources_get_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="No code dataset"):
        load_dataset(tmp_path / "missing.json")
    with pytest.raises(TypeError, match="Unsupported code dataset source"):
        load_dataset(42)
    with pytest.raises(ValueError, match="splits"):
        load_dataset("builtin:valid")
    with pytest.raises(ValueError, match="Unknown code problem families"):
        generate_problems(3, seed=0, families=["sorting"])


def test_lists_of_problems_and_dicts_are_accepted():
    problem = CodeProblem(
        prompt="Return one.", tests=("assert one() == 1",), reference="def one():\n    return 1"
    )
    assert list(load_dataset([problem])) == [problem]
    dataset = load_dataset(_broken_rows()[:1])
    assert isinstance(dataset, CodeDataset) and len(dataset) == 1
    with pytest.raises(CodeDataError, match="item 2"):
        load_dataset(_broken_rows())


def test_generator_is_seeded_and_splits_are_disjoint():
    assert generate_problems(20, seed=3) == generate_problems(20, seed=3)
    assert generate_problems(20, seed=3) != generate_problems(20, seed=4)
    train, test = load_builtin("train"), load_builtin("test")
    assert len(train) == 2000 and len(test) == 200
    assert not {p.prompt for p in train} & {p.prompt for p in test}
    assert {p.entry_point for p in test} == {p.entry_point for p in train} == set(FAMILIES)


def test_generated_references_pass_in_the_sandbox_and_wrong_programs_fail():
    problems = generate_problems(2 * len(FAMILIES), seed=5)
    dataset = load_dataset(problems, limits=LIMITS)  # validates every reference
    assert len(dataset) == len(problems)
    sandbox = Sandbox(LIMITS)
    wrong = sandbox.run_many(
        [(f"def {p.entry_point}(*args):\n    return None\n", p.unit_tests) for p in problems]
    )
    assert not any(r.all_passed for r in wrong)


def test_passing_references_are_recorded_and_failures_rerun(tmp_path, monkeypatch):
    from marft_envs.code.validation_cache import reference_verdicts as _reference_verdicts

    path = tmp_path / "mbpp.json"
    path.write_text(json.dumps(_broken_rows()))
    assert len(load_mbpp(path, on_invalid="skip")) == 2
    runs = []
    original = Sandbox.run_many

    def counting(self, jobs):
        jobs = list(jobs)
        runs.append(len(jobs))
        return original(self, jobs)

    monkeypatch.setattr(Sandbox, "run_many", counting)
    _reference_verdicts.cache_clear()
    assert len(load_mbpp(path, on_invalid="skip")) == 2
    assert runs == [1]  # the two passing rows were recorded; the failing one ran again
    with pytest.raises(CodeDataError, match="row 2"):
        _reference_verdicts.cache_clear()
        load_mbpp(path)
    monkeypatch.setenv("MARFT_CODE_CACHE", "0")
    _reference_verdicts.cache_clear()
    runs.clear()
    assert len(load_mbpp(path, on_invalid="skip")) == 2
    assert runs == [3]  # without the record every reference runs
