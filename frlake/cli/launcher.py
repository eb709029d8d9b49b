"""The ``frlake`` command's entry point, which keeps start-up and exit short.

The modules a command loads (typer, SQLAlchemy, DuckDB, pyarrow and frlake's
own) make a few hundred thousand objects, and none of them is garbage, yet
every full cyclic collection walks them all: the collections while they load,
and Python's last one at exit, were much of a short ``frlake diagnose``.
So the collector is off until the command has loaded its session's modules
(frlake.cli._common, where every command starts its work), which are then
frozen out of its reach (``gc.freeze``) and it is turned on; once the command
is done, what is left is frozen too, and freed with the process. (What must
run at exit is ``atexit``'s, which still runs.)
"""

from __future__ import annotations

import gc
import sys


def main() -> None:
    gc.disable()  # until frlake.cli._common._loaded
    from frlake.cli.main import app
    from frlake.errors import FrlakeError

    try:
        app()
    except FrlakeError as exc:  # raised while a command loads its modules (a stale build of the reader)
        sys.stderr.write(f"error: {exc}\n")
        sys.exit(1)
    finally:
        gc.freeze()
