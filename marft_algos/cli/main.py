"""The ``marft`` command: ``marft train | eval | envs | export | serve | sft``.

Errors a user can act on (bad flags, files, settings, a run folder in use) end in one line that
says what was wrong and how to fix it, and a non-zero exit status; ``MARFT_DEBUG=1`` shows the
traceback as well.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["COMMANDS", "guarded", "main", "run"]

USAGE = """usage: marft <command> [options]

commands:
  train    train an LLM team on a registered env (marft train --help)
  eval     held-out accuracy of a run or checkpoint, settings read from the run
  envs     list the registered environments: ids, teams, dependency functions
  export   each agent's adapter as a peft folder, optionally merged into a standalone model
  serve    the trained team on an OpenAI-compatible endpoint (model = agent) for its program
  sft      fine-tune each agent on its own replies in transcripts (a warm start for train --init-from)
"""


def _commands() -> dict[str, Callable[[Sequence[str]], Any]]:
    from marft_algos.cli import envs, evaluate, export, serve, sft, train

    return {
        "train": train.main,
        "eval": evaluate.main,
        "envs": envs.main,
        "export": export.main,
        "serve": serve.main,
        "sft": sft.main,
    }


COMMANDS = ("train", "eval", "envs", "export", "serve", "sft")


def quiet_third_party() -> None:
    """Silence other libraries' loading bars and info chatter (our own output stays)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import transformers

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers is a dependency
        pass


def configure_logging() -> None:
    """Warnings from every library; marft's progress and resume lines at INFO."""
    logging.basicConfig(
        level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for name in ("marft_algos.runs.progress", "marft_algos.trainers.base"):
        logging.getLogger(name).setLevel(logging.INFO)


def user_errors() -> tuple[type[BaseException], ...]:
    """Exceptions whose message is the whole story for a user (no traceback needed)."""
    from marft_algos.policy.config import ModelLoadError
    from marft_algos.policy.gguf import MissingPackageError
    from marft_algos.rollout.vllm import AdapterSyncError, VLLMNotInstalledError
    from marft_algos.runs.checkpoint import CheckpointError
    from marft_algos.runs.folder import RunDirectoryError, TrainingDiverged
    from marft_algos.serving.server import BindError
    from marft_envs.math.loaders import DatasetsNotInstalledError
    from marft_envs.registration import EntryPointError, UnknownEnvError
    from marft_envs.tools.calls import ToolSandboxError

    return (
        ValueError,
        TypeError,
        FileNotFoundError,
        UnknownEnvError,
        EntryPointError,
        CheckpointError,
        RunDirectoryError,
        TrainingDiverged,
        ModelLoadError,
        MissingPackageError,
        VLLMNotInstalledError,
        AdapterSyncError,
        DatasetsNotInstalledError,
        ToolSandboxError,
        BindError,
    )


def main(argv: Sequence[str] | None = None) -> Any:
    """Dispatch to a command; raises what the command raises (see :func:`run` for the exit codes)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return None
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        sys.stderr.write(
            USAGE
            + f"\nmarft: error: unknown command {command!r}; choose one of {', '.join(COMMANDS)}.\n"
        )
        raise SystemExit(2)
    quiet_third_party()
    configure_logging()
    return _commands()[command](rest)


def guarded(function: Callable[[Sequence[str]], Any], argv: Sequence[str], name: str) -> Any:
    """Run ``function(argv)``; a user error becomes one ``name: error: ...`` line and an exit status
    (1 when training diverged, 2 for bad input, 130 on Ctrl-C)."""
    from marft_algos.rollout.vllm import AdapterSyncError
    from marft_algos.runs.folder import TrainingDiverged

    try:
        return function(argv)
    except user_errors() as exc:
        if os.environ.get("MARFT_DEBUG"):
            raise
        sys.stderr.write(f"{name}: error: {exc}\n(set MARFT_DEBUG=1 to see the traceback)\n")
        failed = isinstance(exc, TrainingDiverged | AdapterSyncError)
        raise SystemExit(1 if failed else 2) from None
    except KeyboardInterrupt:
        sys.stderr.write("interrupted; continue the run with --resume\n")
        raise SystemExit(130) from None


def run(argv: Sequence[str] | None = None) -> None:
    """Console entry point (``marft``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    guarded(main, argv, f"marft {argv[0]}" if argv and argv[0] in COMMANDS else "marft")


if __name__ == "__main__":
    run()
