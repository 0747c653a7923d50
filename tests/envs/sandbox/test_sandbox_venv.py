"""The sandbox run from a virtual environment: the run starts the venv's real interpreter binary,
which exists and runs inside the private root, and nothing of the venv is readable there except the
``pyvenv.cfg`` a copied binary needs."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from marft_envs.sandbox.runner import namespaces_available

ROOT = Path(__file__).resolve().parents[3]

# Run by the venv's python: the sandbox's view of its own interpreter and of the venv folder.
_CHECK = """
import json, os, sys
from marft_envs.sandbox.runner import Sandbox, UnitTests
program = '''
import os, subprocess, sys
def view(venv):
    seen = [os.path.join(top, n) for top, _, names in os.walk(venv) for n in names]
    ran = subprocess.run([sys.executable, '-I', '-S', '-c', 'print(6 * 7)'], capture_output=True)
    return [sys.executable, os.path.exists(sys.executable), ran.stdout.strip(), seen]
'''
test = 'got = view(VENV)\\nassert got[1] and got[2] == b"42" and got[3] == [], got'
box = Sandbox(isolation='namespaces', max_workers=1)
result = box.run(program, UnitTests((test,), f'VENV = {sys.prefix!r}'))
box.close()
print(json.dumps({'passed': result.all_passed, 'detail': result.detail, 'prefix': sys.prefix}))
"""


def test_a_venv_interpreter_runs_the_sandbox_with_its_real_binary(tmp_path):
    if not namespaces_available():
        pytest.skip("unshare may not create namespaces here")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(symlinks=True).create(env_dir)
    python = env_dir / "bin" / "python"
    assert python.is_symlink()
    done = subprocess.run(
        [str(python), "-c", _CHECK],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        # This project and the packages of the interpreter running the tests (itself maybe a venv).
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *site.getsitepackages()])},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["prefix"] == str(env_dir)  # it really ran from the venv
    assert report["passed"], report["detail"]


def test_a_copied_venv_binary_brings_its_pyvenv_cfg_and_a_base_install_none(tmp_path):
    from marft_envs.sandbox.confinement import _venv_config

    env_dir = tmp_path / "copies"
    venv.EnvBuilder(symlinks=False).create(env_dir)
    binary = str(env_dir / "bin" / "python")
    assert not os.path.islink(binary)
    assert _venv_config(binary) == [str(env_dir / "pyvenv.cfg")]
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    assert _venv_config(base) == []
