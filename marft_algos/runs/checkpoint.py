"""Training checkpoints: adapters, critic, optimizers, RNG states and user state, written atomically.

Layout of a checkpoint folder::

    manifest.json          format version, agents, base models, adapters, LoRA settings, critic,
                           file list with each file's SHA-256, and the run's description (env
                           spec, generation settings)
    adapters/              every policy adapter in standard peft format (+ policy.json)
    critic.safetensors     critic head (and critic LoRA) weights, if a critic was saved
    optimizers/<name>.pt   ``state_dict()`` of each optimizer (or scheduler, scaler, ...)
    rng.pt                 python ``random``, numpy global and torch (CPU + CUDA) RNG states
    state.json             the caller's own state (step counters, data cursor, config)

:func:`save_checkpoint` writes everything into a temporary sibling folder and renames it into
place, so a crash never leaves a half-written checkpoint under the final name.
:func:`load_checkpoint` verifies every file against the checksum recorded when it was written
(:func:`verify_checkpoint`: a flipped byte or a truncated file is :class:`CorruptCheckpointError`,
before anything is restored), then checks the manifest against the live objects and raises
:class:`CheckpointError` naming what differs (agents, base models, adapters, format version).
:func:`newest_valid_checkpoint` picks, in a run folder, the newest checkpoint that verifies.
A write that runs out of disk space raises :class:`~marft_algos.runs.folder.DiskFullError` and leaves
the folder as it was.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from marft_algos.common.files import file_sha256
from marft_algos.policy.adapters import load_adapters, policy_layout, save_adapters
from marft_algos.policy.multi_agent import MultiAgentPolicy
from marft_algos.runs.folder import RunDirectory, disk_full_error

if TYPE_CHECKING:
    from marft_algos.policy.critic import Critic

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "CorruptCheckpointError",
    "load_checkpoint",
    "newest_valid_checkpoint",
    "policy_from_checkpoint",
    "read_manifest",
    "read_state",
    "save_checkpoint",
    "verify_checkpoint",
]

logger = logging.getLogger(__name__)

#: Version of the checkpoint layout; bumped on any incompatible change.
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be restored into the given objects (says what differs and how to fix)."""


class CorruptCheckpointError(CheckpointError):
    """A checkpoint's files are not what was written: missing, truncated or changed."""


def _json_default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(
        f"Checkpoint state must be JSON-serialisable; got {type(obj).__name__} ({obj!r}). "
        f"Store plain numbers, strings, lists and dicts (dataclasses and paths are converted)."
    )


def _rng_state() -> dict[str, Any]:
    py = random.getstate()
    np_state: tuple[Any, ...] = tuple(np.random.get_state())
    return {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [np_state[0], np_state[1].tolist(), *[_plain(x) for x in np_state[2:]]],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def _plain(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def _set_rng_state(state: Mapping[str, Any]) -> None:
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    npy = state["numpy"]
    np.random.set_state((npy[0], np.asarray(npy[1], dtype=np.uint32), *npy[2:]))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(
    path: str | os.PathLike[str],
    policy: MultiAgentPolicy,
    *,
    critic: Critic | None = None,
    optimizers: Mapping[str, Any] | None = None,
    state: Mapping[str, Any] | None = None,
    save_rng: bool = True,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write a complete training checkpoint atomically.

    Args:
        path: Checkpoint folder; replaced as a whole if it exists.
        policy: The policy whose adapters are saved (base weights are not: they are frozen and
            named in the manifest).
        critic: A critic whose head (and LoRA) weights are saved.
        optimizers: Named objects with ``state_dict()`` (optimizers, LR schedulers, grad scalers).
        state: Caller state, JSON-serialisable (dataclasses and paths are converted).
        save_rng: Save python, numpy and torch RNG states.
        metadata: JSON description of the run stored in the manifest as ``run`` (env spec,
            generation settings, data sources), so the checkpoint describes itself.

    Returns:
        The checkpoint folder.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Encode the user state first: a bad value must fail before anything touches the disk.
    state_text = json.dumps(dict(state or {}), indent=2, sort_keys=True, default=_json_default)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        files: list[str] = []
        save_adapters(policy, tmp / "adapters")
        files += sorted(
            str(p.relative_to(tmp)) for p in (tmp / "adapters").rglob("*") if p.is_file()
        )
        critic_info = None
        if critic is not None:
            from safetensors.torch import save_file

            tensors = {k: v.contiguous().cpu() for k, v in critic.state_dict().items()}
            save_file(tensors, str(tmp / "critic.safetensors"))
            files.append("critic.safetensors")
            critic_info = {
                "base_model": critic.backbone.name,
                "hidden": critic.hidden,
                "adapter": critic.adapter,
            }
        opt_names = sorted(optimizers or {})
        if optimizers:
            (tmp / "optimizers").mkdir()
            for name in opt_names:
                torch.save(optimizers[name].state_dict(), tmp / "optimizers" / f"{name}.pt")
                files.append(f"optimizers/{name}.pt")
        if save_rng:
            torch.save(_rng_state(), tmp / "rng.pt")
            files.append("rng.pt")
        (tmp / "state.json").write_text(state_text)
        files.append("state.json")
        checksums = {name: file_sha256(tmp / name) for name in files}
        manifest = {
            "format_version": FORMAT_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            **policy_layout(policy),
            "critic": critic_info,
            "run": json.loads(json.dumps(dict(metadata or {}), default=_json_default)),
            "optimizers": opt_names,
            "files": files,
            "sha256": checksums,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True))
        _swap_into_place(tmp, target)
    except Exception as exc:
        full = disk_full_error(exc, target.parent)
        if full is None:
            raise
        raise full from exc
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _swap_into_place(tmp: Path, target: Path) -> None:
    if not target.exists():
        os.replace(tmp, target)
        return
    # A non-empty folder cannot be replaced in one rename: move the old one aside first.
    old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
    old.rmdir()
    os.replace(target, old)
    try:
        os.replace(tmp, target)
    except BaseException:
        os.replace(old, target)
        raise
    shutil.rmtree(old, ignore_errors=True)


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a checkpoint folder.

    Raises:
        CheckpointError: No manifest (not a checkpoint, or an interrupted write).
        CorruptCheckpointError: The manifest is not readable JSON.
    """
    file = Path(path) / MANIFEST
    if not file.exists():
        raise CheckpointError(f"{path} is not a marft checkpoint: {MANIFEST} is missing.")
    try:
        manifest = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptCheckpointError(f"{file} is damaged ({err}).") from None
    if not isinstance(manifest, dict):
        raise CorruptCheckpointError(f"{file} is damaged (not a JSON object).")
    return manifest


def verify_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Check every file of a checkpoint against the SHA-256 recorded when it was written.

    Checkpoints written before checksums were recorded are accepted with a log line (only their
    files' presence is checked).

    Returns:
        The manifest.

    Raises:
        CheckpointError: Not a checkpoint (no manifest).
        CorruptCheckpointError: A listed file is missing or its bytes changed (flipped, truncated).
    """
    root = Path(path)
    manifest = read_manifest(root)
    files = manifest.get("files")
    if not isinstance(files, list) or "state.json" not in files:
        raise CorruptCheckpointError(f"{root / MANIFEST} is damaged (no file list).")
    recorded = manifest.get("sha256")
    missing = [name for name in files if not (root / name).is_file()]
    if missing:
        raise CorruptCheckpointError(f"{root} lacks {', '.join(missing)}.")
    if not isinstance(recorded, dict):
        logger.warning(
            "%s was written before checksums were recorded: its files cannot be verified, so a "
            "damaged file would go unnoticed. Use a newer checkpoint of the run if there is one.",
            root,
        )
        return manifest
    changed = [name for name in files if file_sha256(root / name) != recorded.get(name)]
    if changed:
        raise CorruptCheckpointError(
            f"{root}: {', '.join(changed)} differ(s) from what was written (checksum mismatch: "
            f"damaged or truncated)."
        )
    return manifest


def newest_valid_checkpoint(run_dir: str | os.PathLike[str]) -> tuple[Path | None, list[str]]:
    """The newest ``checkpoint-N`` of a run folder that verifies, and what was skipped on the way.

    Every ``checkpoint-N`` folder counts, complete or not, so a damaged newest one (no manifest,
    empty, a flipped or truncated file) is reported rather than silently passed over; a warning
    names each skipped folder and why.

    Returns:
        ``(checkpoint or None, ["checkpoint-3: why", ...])``.
    """
    skipped: list[str] = []
    for candidate in reversed(RunDirectory(run_dir).numbered_checkpoints()):
        try:
            verify_checkpoint(candidate)
        except CheckpointError as err:
            skipped.append(f"{candidate.name}: {err}")
            continue
        if skipped:
            logger.warning(
                "Skipped damaged checkpoint(s) in %s (%s); using %s.",
                run_dir,
                "; ".join(skipped),
                candidate.name,
            )
        return candidate, skipped
    if skipped:
        logger.warning("No checkpoint in %s verifies (%s).", run_dir, "; ".join(skipped))
    return None, skipped


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The caller state saved with a checkpoint (``state.json``), without loading anything."""
    read_manifest(path)
    file = Path(path) / "state.json"
    try:
        state = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CorruptCheckpointError(f"{file} cannot be read ({err}).") from None
    if not isinstance(state, dict):
        raise CorruptCheckpointError(f"{file} is damaged (not a JSON object).")
    return state


def policy_from_checkpoint(
    path: str | os.PathLike[str],
    *,
    model: str | None = None,
    device: torch.device | str = "cpu",
    torch_dtype: torch.dtype | str | None = None,
) -> MultiAgentPolicy:
    """Rebuild the policy a checkpoint was saved from: agents, base models, adapters, LoRA settings
    and trained weights, all read from its manifest.

    Args:
        path: Checkpoint folder.
        model: Replace the recorded base model (e.g. the same model at a new path).
        device: Device for the models.
        torch_dtype: Weight dtype (default float32).

    Raises:
        CheckpointError: Not a checkpoint, or one whose adapters do not load.
    """
    manifest = read_manifest(path)
    try:
        policy = MultiAgentPolicy.from_layout(
            manifest, model=model, device=device, torch_dtype=torch_dtype
        )
    except ValueError as err:
        raise CheckpointError(f"{path}: {err}") from None
    load_checkpoint(path, policy, restore_rng=False, check_base_model=model is None)
    return policy


def _check_compatible(
    manifest: Mapping[str, Any],
    policy: MultiAgentPolicy,
    critic: Critic | None,
    optimizers: Mapping[str, Any] | None,
    check_base_model: bool,
) -> None:
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint format version {version} is not supported; this marft reads version "
            f"{FORMAT_VERSION}. Load it with the marft release that wrote it."
        )
    live = policy_layout(policy)
    problems: list[str] = []
    if list(manifest["agents"]) != live["agents"]:
        missing = sorted(set(manifest["agents"]) - set(live["agents"]))
        extra = sorted(set(live["agents"]) - set(manifest["agents"]))
        problems.append(
            f"agents differ: checkpoint {manifest['agents']}, policy {live['agents']}"
            f" (missing from policy: {missing}, not in checkpoint: {extra})"
        )
    else:
        for key in ("adapters", "trainable") + (("base_models",) if check_base_model else ()):
            diff = {
                a: (manifest[key].get(a), live[key][a])
                for a in live["agents"]
                if manifest[key].get(a) != live[key][a]
            }
            if diff:
                detail = ", ".join(
                    f"{a}: checkpoint {c!r} vs policy {p!r}" for a, (c, p) in diff.items()
                )
                problems.append(f"{key} differ ({detail})")
    saved_lora = manifest.get("lora")
    if saved_lora:
        for adapter, live_settings in policy_layout(policy)["lora"].items():
            saved = saved_lora.get(adapter)
            if saved is None:
                continue
            for key in ("r", "alpha", "target_modules"):
                if saved.get(key) != live_settings[key]:
                    name = "rank" if key == "r" else key
                    problems.append(
                        f"LoRA {name} of adapter {adapter!r} differs: checkpoint {saved.get(key)!r} vs "
                        f"policy {live_settings[key]!r} (build the policy with LoraSettings({key}={saved.get(key)!r}),"
                        f" e.g. --lora-{'rank' if key == 'r' else key.replace('_', '-')} {saved.get(key)})"
                    )
    saved_critic = manifest.get("critic")
    if critic is not None:
        if saved_critic is None:
            problems.append("a critic was given but the checkpoint holds none")
        else:
            for key, value in (("hidden", critic.hidden), ("adapter", critic.adapter)):
                if saved_critic[key] != value:
                    problems.append(
                        f"critic {key} differs: checkpoint {saved_critic[key]!r} vs {value!r}"
                    )
            if check_base_model and saved_critic["base_model"] != critic.backbone.name:
                problems.append(
                    f"critic base model differs: checkpoint {saved_critic['base_model']!r} vs "
                    f"{critic.backbone.name!r}"
                )
    missing_opts = sorted(set(optimizers or {}) - set(manifest.get("optimizers", [])))
    if missing_opts:
        problems.append(
            f"optimizers {missing_opts} are not in the checkpoint (it has {manifest.get('optimizers')})"
        )
    if problems:
        raise CheckpointError(
            "Checkpoint is incompatible with the given policy: "
            + "; ".join(problems)
            + ". Build the policy with the same agents, specs and base models as the run that "
            "saved it (pass check_base_model=False if only the base model's path moved)."
        )


def load_checkpoint(
    path: str | os.PathLike[str],
    policy: MultiAgentPolicy,
    *,
    critic: Critic | None = None,
    optimizers: Mapping[str, Any] | None = None,
    restore_rng: bool = True,
    check_base_model: bool = True,
) -> dict[str, Any]:
    """Restore a checkpoint written by :func:`save_checkpoint` into live objects.

    Args:
        path: Checkpoint folder.
        policy: A policy built with the same agents, specs and base models; its adapters are
            overwritten.
        critic: A critic built with the same settings; its head (and LoRA) are overwritten.
        optimizers: Named objects with ``load_state_dict`` (constructed over the same parameters
            in the same order as when saved).
        restore_rng: Restore python, numpy and torch RNG states.
        check_base_model: Require the same base model names/paths as recorded.

    Returns:
        The caller state saved with the checkpoint.

    Raises:
        CorruptCheckpointError: A file differs from what was written (nothing is restored).
        CheckpointError: The checkpoint does not match the given objects.
    """
    root = Path(path)
    manifest = verify_checkpoint(root)
    _check_compatible(manifest, policy, critic, optimizers, check_base_model)
    try:
        load_adapters(policy, root / "adapters")
    except (ValueError, FileNotFoundError) as err:
        raise CheckpointError(f"Adapters in {root} do not fit the policy: {err}") from err
    if critic is not None:
        from safetensors.torch import load_file

        try:
            critic.load_state_dict(load_file(str(root / "critic.safetensors")))
        except ValueError as err:
            raise CheckpointError(f"Critic in {root} does not fit: {err}") from err
    for name, opt in (optimizers or {}).items():
        opt.load_state_dict(
            torch.load(root / "optimizers" / f"{name}.pt", map_location="cpu", weights_only=True)
        )
    if restore_rng and (root / "rng.pt").exists():
        _set_rng_state(torch.load(root / "rng.pt", map_location="cpu", weights_only=True))
    return read_state(root)
