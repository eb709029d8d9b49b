"""Where ingest workers come from (a light module: the command line starts
the forkserver before it imports the heavy parts of frlake)."""

from __future__ import annotations

from multiprocessing import forkserver, get_all_start_methods, get_context
from multiprocessing.context import BaseContext


def pool_context() -> BaseContext:
    """Workers start from a forkserver that has imported the worker module
    once (frlake.ingest.preload, which freezes what it made out of the
    garbage collector's reach): quick to start, and never a fork of this
    process, which may hold threads (a progress bar, a server, native
    libraries) and open database connections that a forked child must not
    inherit.

    The forkserver is started at once (and only once), so that its imports
    run while this process does other work. A process has one forkserver:
    if something else started it first, it preloaded nothing of frlake, and
    each worker imports frlake itself (0.3 CPU s; bench/README.md, "Two
    workers against the ceiling")."""
    if "forkserver" in get_all_start_methods():
        context = get_context("forkserver")
        context.set_forkserver_preload(["frlake.ingest.preload"])
        forkserver.ensure_running()
        return context
    return get_context("spawn")
