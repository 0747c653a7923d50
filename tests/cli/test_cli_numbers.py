"""``marft train`` / ``marft eval``: bad numbers and devices end in one message naming the value,
before the model loads (issue 27)."""

from __future__ import annotations

import pytest

from marft_algos.cli.main import main

MISSING_MODEL = "/nonexistent/model-folder"  # proves a check ran before any model load


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--learning-rate", "inf"], r"--learning-rate must be a finite number, got inf"),
        (["--learning-rate", "nan"], r"--learning-rate must be a finite number, got nan"),
        (["--adam-eps", "0"], r"--adam-eps must be > 0"),
        (["--lora-alpha", "nan"], r"--lora-alpha nan: LoRA alpha must be a finite number > 0"),
        (["--max-grad-norm", "nan"], r"--max-grad-norm must be a finite number"),
        (["--device", "tpu9"], r"--device 'tpu9' is not a torch device"),
    ],
)
def test_bad_numbers_and_devices_are_refused_before_the_model_loads(flags, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        main(["train", "--model", MISSING_MODEL, "--output-dir", str(tmp_path / "r"), *flags])


def test_eval_names_an_unknown_device(tmp_path):
    with pytest.raises(ValueError, match=r"--device 'tpu9' is not a torch device"):
        main(["eval", str(tmp_path), "--device", "tpu9"])
