"""Starting a run from another run's adapters (``marft train --init-from``): an SFT warm start.

:func:`init_adapters` finds the newest checkpoint that verifies in a run folder (or takes a
``checkpoint-N`` folder), checks that it was written for the same team (the same agents in the same
order, base models, adapters and LoRA settings) and loads its adapter weights into the policy. Only
the weights: the optimizers, the RNG states and the iteration count start fresh, so RL runs from
the warm-started adapters as it would from fresh ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from marft_algos.policy.adapters import policy_layout
from marft_algos.runs.checkpoint import (
    CheckpointError,
    load_checkpoint,
    newest_valid_checkpoint,
    read_manifest,
)

__all__ = ["init_adapters", "warm_start_checkpoint"]


def warm_start_checkpoint(path: str | Path) -> Path:
    """The checkpoint ``path`` names: itself when it holds a manifest, else the newest valid
    ``checkpoint-N`` of the run folder.

    Raises:
        FileNotFoundError: No such folder.
        CheckpointError: A folder with no checkpoint that verifies.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(
            f"--init-from {str(root)!r}: no such folder; pass the --output-dir of marft sft (or of "
            f"another run), or one of its checkpoint-N folders."
        )
    if (root / "manifest.json").is_file():
        return root
    found, skipped = newest_valid_checkpoint(root)
    if found is None:
        detail = f" ({'; '.join(skipped)})" if skipped else ""
        raise CheckpointError(
            f"--init-from {str(root)!r} holds no checkpoint that verifies{detail}; pass a finished "
            f"marft sft run folder or a checkpoint-N folder."
        )
    return found


def init_adapters(policy: Any, path: str | Path) -> Path:
    """Load the adapters of the checkpoint ``path`` names into ``policy``; returns the checkpoint.

    Raises:
        CheckpointError: The checkpoint is for another team: other agents (or another order),
            base models, adapters or LoRA settings (the message names each difference and the fix).
    """
    checkpoint = warm_start_checkpoint(path)
    manifest = read_manifest(checkpoint)
    live = policy_layout(policy)
    saved_agents = list(manifest.get("agents") or [])
    if saved_agents != live["agents"]:
        raise CheckpointError(
            f"--init-from {str(checkpoint)!r} trained agents {saved_agents}, and this run's env "
            f"has agents {live['agents']}; warm-start with transcripts of this env's team (marft "
            f"sft --env ENV, or --agents {','.join(live['agents'])})."
        )
    models = manifest.get("base_models") or {}
    wrong = {a: (models.get(a), live["base_models"][a]) for a in saved_agents}
    wrong = {a: pair for a, pair in wrong.items() if pair[0] != pair[1]}
    if wrong:
        detail = ", ".join(f"{a}: {s!r} vs {n!r}" for a, (s, n) in wrong.items())
        raise CheckpointError(
            f"--init-from {str(checkpoint)!r} was trained on other base models ({detail}, "
            f"checkpoint vs --model); pass the model it was trained on as --model."
        )
    load_checkpoint(checkpoint, policy, restore_rng=False)
    return checkpoint
