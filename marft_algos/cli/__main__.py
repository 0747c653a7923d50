"""``python -m marft_algos.cli ...`` is the ``marft`` command."""

from marft_algos.cli.main import run

run()
