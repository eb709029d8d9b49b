"""``python -m frlake``: the ``frlake`` command."""

from frlake.cli.launcher import main

main()
