"""``python -m frlake``: the ``frlake`` command."""

from frlake.cli.entry import main

main()
