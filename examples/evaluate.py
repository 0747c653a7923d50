"""Evaluate a trained team: every setting (env, data, model, LoRA, generation) is read from the run.

    python examples/evaluate.py runs/train_math                    # the run's newest checkpoint
    python examples/evaluate.py runs/train_math/checkpoint-30 --json -
    python examples/evaluate.py runs/train_math --dataset math500.jsonl

A thin wrapper over ``marft eval`` (the same flags). On a finished run it reproduces the run's final
held-out accuracy exactly.
"""

from __future__ import annotations

import sys

from marft_algos.cli import evaluate
from marft_algos.cli.main import configure_logging, guarded, quiet_third_party


def main(argv: list[str] | None = None) -> dict:
    quiet_third_party()
    configure_logging()
    return evaluate.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    guarded(main, sys.argv[1:], "evaluate.py")
