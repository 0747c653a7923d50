"""What the code sandbox confines a run to, worked out on the host (Linux only).

- :func:`interpreter`: the binary a run starts — this interpreter's real file, not a virtual
  environment's ``bin/python`` symlink.
- :func:`root_plan`: the files of the private root a run sees — this interpreter's standard library
  (without ``site-packages``), its executable (with the ``pyvenv.cfg`` a copied venv interpreter
  needs) and the shared libraries they load, nothing else of the venv or the host.
  The harness (``_harness._private_root``) builds that root in the run's mount namespace.
- :class:`MemoryCgroups`: one memory cgroup per run, so the program's whole process tree shares
  one memory limit (cgroup v2 where its memory controller may be used, else cgroup v1).
- :func:`available_memory`: what the host can still give, to size the worker pool.

Everything here is probed once per process and degrades to "not available" (``None``) rather
than raising; the sandbox decides what to do without it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["MemoryCgroups", "available_memory", "interpreter", "root_plan"]

logger = logging.getLogger(__name__)

# Run by the interpreter the sandbox starts (``python -I -S``): the paths it imports from and the
# shared objects it has mapped.
_PROBE = (
    "import json, sys\n"
    "maps = set()\n"
    "try:\n"
    "    for line in open('/proc/self/maps'):\n"
    "        parts = line.split(None, 5)\n"
    "        if len(parts) == 6 and parts[5].startswith('/') and '.so' in parts[5]:\n"
    "            maps.add(parts[5].strip())\n"
    "except OSError:\n"
    "    pass\n"
    "print(json.dumps({'path': sys.path, 'maps': sorted(maps), 'executable': sys.executable}))\n"
)


def interpreter() -> str:
    """The Python binary a run starts: ``sys.executable`` with its symlinks resolved. A venv's
    ``bin/python`` links to the base install, and the venv folder is not in the run's root (or
    lies under the run's private ``/tmp``), so the link would lead nowhere inside; ``-I -S`` runs
    use no venv file anyway."""
    return os.path.realpath(sys.executable)


def _venv_config(executable: str) -> list[str]:
    """The ``pyvenv.cfg`` the interpreter at ``executable`` reads at start (PEP 405: beside the
    binary or one folder up), e.g. a venv made with ``--copies``; empty for a base install."""
    folder = os.path.dirname(executable)
    for candidate in (folder, os.path.dirname(folder)):
        path = os.path.join(candidate, "pyvenv.cfg")
        if os.path.isfile(path):
            return [path]
    return []


@functools.lru_cache(maxsize=1)
def root_plan() -> tuple[tuple[str, ...], ...]:
    """The private root of a run, as steps for the harness: ``("dir", path)``,
    ``("link", path, target)``, ``("bind", path)`` (read-only) and ``("hide", path)`` (an empty
    read-only tmpfs over a directory). Paths are the host's, so ``sys.path`` holds unchanged.
    """
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    done = subprocess.run(
        [interpreter(), "-I", "-S", "-c", _PROBE],
        capture_output=True,
        timeout=60,
        env=env,
        check=True,
    )
    info = json.loads(done.stdout)
    folders = sorted({os.path.realpath(p) for p in info["path"] if os.path.isdir(p)})
    # A folder inside another one comes with it.
    folders = [f for f in folders if not any(f.startswith(o + os.sep) for o in folders)]
    extensions = [
        entry.path
        for folder in folders
        for entry in _scan(folder)
        if entry.name.endswith(".so") and entry.is_file()
    ]
    executable = os.path.realpath(info["executable"] or interpreter())
    files = {executable, *_venv_config(executable), *info["maps"]}
    files |= _shared_libraries([executable, *extensions])
    plan: list[tuple[str, ...]] = []
    made: set[str] = set()
    for folder in folders:
        _place(folder, plan, made, folders)
    for path in sorted(files):
        _place(path, plan, made, folders)
    for folder in folders:
        for name in ("site-packages", "dist-packages"):
            hidden = os.path.join(folder, name)
            if os.path.isdir(hidden):
                plan.append(("hide", hidden))
    return tuple(plan)


def _scan(folder: str) -> list[os.DirEntry[str]]:
    result: list[os.DirEntry[str]] = []
    stack = [folder]
    while stack:
        with contextlib.suppress(OSError), os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name not in ("site-packages", "dist-packages"):
                        stack.append(entry.path)
                else:
                    result.append(entry)
    return result


def _shared_libraries(files: list[str]) -> set[str]:
    """The shared libraries ``files`` load (``ldd``); empty without ``ldd``."""
    ldd = shutil.which("ldd")
    if ldd is None:
        logger.warning(
            "ldd not found: the code sandbox's root holds only the libraries the interpreter "
            "loads at start; extension modules that need others (ssl, sqlite3, ...) will not import."
        )
        return set()
    done = subprocess.run([ldd, *files], capture_output=True, text=True, timeout=120)
    libraries = set()
    for line in done.stdout.splitlines():
        for token in line.split():
            if token.startswith("/") and not token.endswith(":") and os.path.exists(token):
                libraries.add(token)
    return libraries


def _place(
    path: str, plan: list[tuple[str, ...]], made: set[str], folders: list[str], depth: int = 0
) -> None:
    """Add the steps that make ``path`` exist in the root as on the host, symlinks included."""
    if depth > 40:
        raise OSError(f"too many symbolic links resolving {path}")
    parts = [p for p in path.split(os.sep) if p]
    current = os.sep
    for i, part in enumerate(parts):
        host = os.path.join(current, part)
        if host in folders and (i < len(parts) - 1 or host in made):
            return  # inside a folder that is bound whole
        if os.path.islink(host):
            target = os.readlink(host)
            if host not in made:
                plan.append(("link", host, target))
                made.add(host)
            resolved = os.path.normpath(os.path.join(current, target))
            _place(os.path.join(resolved, *parts[i + 1 :]), plan, made, folders, depth + 1)
            return
        if host not in made:
            plan.append(("bind", host) if i == len(parts) - 1 else ("dir", host))
            made.add(host)
        current = host


@dataclass(frozen=True)
class MemoryCgroups:
    """Where the sandbox makes one memory cgroup per run.

    Attributes:
        parent: The cgroup folder that holds the runs' cgroups.
        version: 2 (``memory.max``) or 1 (``memory.limit_in_bytes``).
    """

    parent: str
    version: int

    @property
    def events(self) -> str:
        """The file whose ``oom_kill`` line counts processes killed for the limit."""
        return "memory.events" if self.version == 2 else "memory.oom_control"

    def create(self, limit_bytes: int) -> str:
        """A fresh cgroup limited to ``limit_bytes`` (no swap); returns its folder."""
        path = os.path.join(self.parent, f"marft-sandbox-{secrets.token_hex(8)}")
        os.mkdir(path)
        try:
            if self.version == 2:
                _write(path, "memory.max", limit_bytes)
                _write(path, "memory.swap.max", 0, optional=True)
                _write(path, "memory.oom.group", 1, optional=True)
            else:
                _write(path, "memory.limit_in_bytes", limit_bytes)
                _write(path, "memory.memsw.limit_in_bytes", limit_bytes, optional=True)
        except OSError:
            self.remove(path)
            raise
        return path

    @staticmethod
    def remove(path: str) -> None:
        """Remove a run's cgroup once its processes are gone (they die with the run)."""
        deadline = time.monotonic() + 5.0
        while True:
            try:
                os.rmdir(path)
                return
            except FileNotFoundError:
                return
            except OSError as err:
                if time.monotonic() > deadline:
                    logger.warning("Could not remove the sandbox cgroup %s: %s", path, err)
                    return
                time.sleep(0.01)


def _write(folder: str, name: str, value: int, *, optional: bool = False) -> None:
    try:
        with open(os.path.join(folder, name), "w") as f:
            f.write(str(value))
    except OSError:
        if not optional:
            raise


@functools.lru_cache(maxsize=1)
def memory_cgroups() -> MemoryCgroups | None:
    """The cgroups this process may create to bound a run's memory, or ``None`` (probed once)."""
    try:
        with open("/proc/self/mountinfo") as f:
            mountinfo = f.read().splitlines()
        with open("/proc/self/cgroup") as f:
            own = f.read().splitlines()
    except OSError:
        return None
    mounts: dict[int, tuple[str, str]] = {}  # version -> (mount point, mounted cgroup root)
    for line in mountinfo:
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        fstype, options = (
            fields[sep + 1],
            fields[sep + 3].split(",") if len(fields) > sep + 3 else [],
        )
        if fstype == "cgroup2" and 2 not in mounts:
            mounts[2] = (fields[4], fields[3])
        elif fstype == "cgroup" and "memory" in options and 1 not in mounts:
            mounts[1] = (fields[4], fields[3])
    candidates = []
    for line in own:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and 2 in mounts:
            candidates.append((2, path))
        elif "memory" in controllers.split(",") and 1 in mounts:
            candidates.append((1, path))
    for version, path in sorted(candidates, key=lambda c: -c[0]):
        point, mounted_root = mounts[version]
        if mounted_root != "/" and path.startswith(mounted_root):
            path = path[len(mounted_root) :]
        parent = os.path.join(point, path.lstrip("/"))
        cgroups = MemoryCgroups(parent, version)
        if version == 2 and not _enable_memory_controller(parent):
            continue
        try:
            probe = cgroups.create(64 << 20)
        except OSError:
            continue
        cgroups.remove(probe)
        return cgroups
    return None


def _enable_memory_controller(parent: str) -> bool:
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            if "memory" in f.read().split():
                return True
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
            f.write("+memory")  # refused where the parent holds processes (most non-root cgroups)
        return True
    except OSError:
        return False


def available_memory() -> int | None:
    """Bytes the host can still give (``MemAvailable``), or ``None`` where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
