"""``--profiles FILE``: agents' system prompts and the message layout, from a YAML or JSON file.

The file (``prompts.yaml``)::

    message_layout: user        # optional: system (default) or user
    system_prompts:
      navigator: |
        Reply with one line: 'Path:' and the moves (U, D, L, R) from S to G.

Both keys become env arguments (``system_prompts``, ``message_layout``) of the train and held-out
envs, so ``config.json`` records them, ``marft eval`` rebuilds the same envs and ``marft export``
writes them into ``marft_export.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marft_algos.cli.config_files import _DuplicateKey, _unique_keys_loader
from marft_algos.cli.parsing import UsageError

__all__ = ["PROFILE_KEYS", "load_profiles", "with_profiles"]

#: The keys a profiles file may hold (env arguments of every env built on FlexPOMDPEnv).
PROFILE_KEYS = ("system_prompts", "message_layout")


def load_profiles(path: str) -> dict[str, Any]:
    """The env arguments a profiles file sets (see the module notes)."""
    import yaml

    file = Path(path)
    where = f"--profiles {path!r}"
    if not file.is_file():
        raise UsageError(f"{where}: no such file; pass a YAML file with a system_prompts: mapping.")
    try:
        data = yaml.load(file.read_text(encoding="utf-8"), Loader=_unique_keys_loader())
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{where} is not UTF-8 text ({exc.reason}); re-save it as UTF-8."
        ) from None
    except _DuplicateKey as exc:
        raise UsageError(
            f"{where} sets {exc.key!r} twice (lines {exc.first} and {exc.second}); keep one."
        ) from None
    except yaml.YAMLError as exc:
        raise UsageError(f"{where} is not valid YAML: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise UsageError(
            f"{where} must hold a mapping with system_prompts: (agent: prompt lines) and, "
            f"optionally, message_layout: system or user."
        )
    unknown = sorted(str(k) for k in set(data) - set(PROFILE_KEYS))
    if unknown:
        raise UsageError(
            f"{where} has key(s) {unknown}; it takes {list(PROFILE_KEYS)} (agents' prompts go "
            f"under system_prompts:, e.g. 'system_prompts: {{navigator: ...}}')."
        )
    prompts = data.get("system_prompts")
    if prompts is not None and (
        not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values())
    ):
        raise UsageError(
            f"{where}: system_prompts must map agent names to prompt text, got {prompts!r:.120}."
        )
    layout = data.get("message_layout")
    if layout is not None and layout not in ("system", "user"):
        raise UsageError(f"{where}: message_layout must be 'system' or 'user', got {layout!r}.")
    return {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items() if v is not None}


def with_profiles(env_kwargs: Mapping[str, Any] | None, path: str | None) -> dict[str, Any] | None:
    """``env_kwargs`` with the profiles file's arguments; the same key in both is refused."""
    if path is None:
        return dict(env_kwargs) if env_kwargs is not None else None
    profile = load_profiles(path)
    both = sorted(set(profile) & set(env_kwargs or {}))
    if both:
        raise UsageError(
            f"--env-kwargs and --profiles {path!r} both set {both}; set them in one place."
        )
    return {**(env_kwargs or {}), **profile}
