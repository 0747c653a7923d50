"""Each env family owns how its data is named and loaded: every registered id plans and builds its
default data from the command line, code envs take MBPP and HumanEval files, and flags a family does
not offer are refused by name."""

from __future__ import annotations

import json

import pytest
from budgets import TINY

import marft_envs
from marft_algos.cli.env_plan import plan_env
from marft_algos.cli.main import main
from marft_algos.cli.parsing import UsageError
from marft_envs.code.data import CodeDataset

MBPP_ROWS = [
    {
        "task_id": i,
        "prompt": f"Write a function that adds {i} to a number.",
        "code": f"def add_{i}(x):\n    return x + {i}\n",
        "test_imports": [],
        "test_list": [f"assert add_{i}(1) == {1 + i}", f"assert add_{i}(-{i}) == 0"],
    }
    for i in range(1, 11)
]

HUMANEVAL_ROWS = [
    {
        "task_id": f"HumanEval/{i}",
        "prompt": f'def times_{i}(x: int) -> int:\n    """Return x times {i}."""\n',
        "entry_point": f"times_{i}",
        "canonical_solution": f"    return x * {i}\n",
        "test": f"def check(candidate):\n    assert candidate(2) == {2 * i}\n",
    }
    for i in range(1, 11)
]


@pytest.fixture(autouse=True)
def _fresh_validation_record(tmp_path, monkeypatch):
    monkeypatch.setenv("MARFT_CACHE", str(tmp_path / "marft-cache"))


@pytest.mark.parametrize("env_id", sorted(marft_envs.registry))
def test_every_registered_env_plans_its_default_data(env_id):
    # Every env that takes a dataset went through the math loader: code envs failed with
    # "Unsupported code dataset source of type MathDataset".
    plan = plan_env(env_id, None)
    train_fn, eval_fn = plan.factories()
    for make in (train_fn, eval_fn):
        env = make()
        env.reset(seed=0)
        assert list(env.possible_agents) == plan.agents
        env.close()


@pytest.mark.parametrize(
    ("name", "rows", "text"),
    [
        ("mbpp.json", MBPP_ROWS, lambda rows: json.dumps(rows)),
        ("humaneval.jsonl", HUMANEVAL_ROWS, lambda rows: "\n".join(map(json.dumps, rows))),
    ],
)
def test_code_env_takes_mbpp_and_humaneval_files(tmp_path, name, rows, text):
    path = tmp_path / name
    path.write_text(text(rows))
    plan = plan_env("code-dual-v2", None, dataset=str(path), given={"dataset"})
    assert plan.data["train"]["source"] == str(path) and plan.data["eval"]["side"] == "test"
    train_fn, eval_fn = plan.factories()
    train, test = train_fn().unwrapped.dataset, eval_fn().unwrapped.dataset
    assert isinstance(train, CodeDataset) and isinstance(test, CodeDataset)
    # 10% of 10 problems held out, none on both sides.
    assert (len(train), len(test)) == (9, 1)
    assert not {p.prompt for p in train} & {p.prompt for p in test}


def test_env_kwargs_dataset_is_planned_like_the_flag():
    plan = plan_env("code-single-v2", {"dataset": "builtin:train"})
    assert plan.env_kwargs == {} and plan.data["eval"]["source"] == "builtin:test"


def test_math_filters_are_refused_for_code_data():
    with pytest.raises(UsageError, match=r"--levels does not apply to code data"):
        plan_env("code-dual-v2", None, levels="1,2", given={"levels"})


def test_a_family_owns_its_loader():
    math_family = marft_envs.spec("math-dual-v7").data_family
    code_family = marft_envs.spec("code-dual-v2").data_family
    assert (math_family.name, code_family.name) == ("math", "code")
    assert marft_envs.spec("relay-v0").data_family is None


def test_code_dual_trains_from_the_command_line(tiny_path, tmp_path):
    path = tmp_path / "mbpp.json"
    path.write_text(json.dumps(MBPP_ROWS))
    out = tmp_path / "run"
    result = main(
        [
            "train",
            "--env",
            "code-dual-v2",
            "--dataset",
            str(path),
            "--model",
            tiny_path,
            *TINY,
            "--iterations",
            "1",
            "--output-dir",
            str(out),
            "--no-plot",
            "--progress",
            "off",
        ]
    )
    assert [r["iteration"] for r in result["evals"]] == [0, 1]
    assert json.loads((out / "config.json").read_text())["run"]["data"]["train"]["side"] == "train"
