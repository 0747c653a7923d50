"""``marft envs --import-module team`` imports a team.py from the working folder, as
``marft train --env team:name-v0`` does, and a module it cannot import is one error line."""

from __future__ import annotations

import sys

import pytest

import marft_envs
from marft_algos.cli.main import run

TEAM = """
from marft_envs import register_program


def helpdesk(task, client):
    client.chat.completions.create(model="router", messages=[{"role": "user", "content": task}])
    return 1.0


register_program("folder-helpdesk-v0", helpdesk, agents=["router"], tasks=["t1", "t2"])
"""


@pytest.fixture
def in_team_folder(tmp_path, monkeypatch):
    (tmp_path / "folder_team.py").write_text(TEAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    yield tmp_path
    marft_envs.registry.pop("folder-helpdesk-v0", None)
    sys.modules.pop("folder_team", None)


def test_envs_imports_a_module_of_the_working_folder(in_team_folder, capsys):
    run(["envs", "--json", "--import-module", "folder_team"])
    assert '"folder-helpdesk-v0"' in capsys.readouterr().out


def test_a_module_envs_cannot_import_is_one_error_line(in_team_folder, capsys):
    with pytest.raises(SystemExit) as exit_:
        run(["envs", "--import-module", "no_such_team"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[0].startswith("marft envs: error: cannot import --import-module")
    assert "'no_such_team'" in err.splitlines()[0]
