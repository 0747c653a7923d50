"""``marft train --help`` says that ``--env-kwargs`` carries an agent program's settings, and
names every one of them (read from ProgramSettings, so a new setting is listed without an edit)."""

from __future__ import annotations

import re

import pytest

from marft_algos.cli.main import main
from marft_envs.programs import ProgramSettings


def test_env_kwargs_help_names_every_program_setting(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    start = text.index("--env-kwargs JSON")
    env_kwargs_help = text[start : text.index(" --", start + len("--env-kwargs JSON"))]
    assert "agent program" in env_kwargs_help
    names = [n for n in ProgramSettings.keywords() if n != "limits"]
    assert {"on_error", "isolation", "episode_timeout", "max_error_share"} <= set(names)
    for name in names:
        assert re.search(rf"\b{name}\b", env_kwargs_help), name
