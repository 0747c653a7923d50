"""Train an LLM team on math problems with MARFT (or a baseline) on a laptop CPU.

    python examples/train_math.py                      # action-level MARFT, math-dual-v7, built-in model
    python examples/train_math.py --algo token-marft
    python examples/train_math.py --algo ppo --env math-single-v7
    python examples/train_math.py --algo grpo --env math-dual-v7 --num-generations 4
    python examples/train_math.py --dataset math500.jsonl --model Qwen/Qwen2.5-0.5B-Instruct
    python examples/train_math.py --output-dir runs/demo --resume       # continue a stopped run
    torchrun --nproc_per_node 2 examples/train_math.py                  # data-parallel, 2 processes

A thin wrapper over ``marft train`` (the same flags; ``--help`` lists them) that writes to
``runs/train_math`` by default. Writes metrics.jsonl, config.json, checkpoints and
learning_curve.png, and prints held-out accuracy before and after training. The defaults are the
CPU demo preset for the built-in model (``marft_algos.cli.presets``); ``--paper-defaults`` restores
the config classes' paper defaults.
"""

from __future__ import annotations

import sys

from marft_algos.cli import train
from marft_algos.cli.main import configure_logging, guarded, quiet_third_party

DEFAULTS = {"output_dir": "runs/train_math"}


def main(argv: list[str] | None = None) -> dict:
    quiet_third_party()
    configure_logging()
    return train.main(sys.argv[1:] if argv is None else argv, defaults=DEFAULTS)


if __name__ == "__main__":
    guarded(main, sys.argv[1:], "train_math.py")
