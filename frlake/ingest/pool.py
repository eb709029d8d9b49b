"""Where ingest workers come from (a light module: the command line starts
the forkserver before it imports the heavy parts of frlake)."""

from __future__ import annotations

import os
from multiprocessing import forkserver, get_all_start_methods, get_context, spawn
from multiprocessing.context import BaseContext

# The main script's path, for the forkserver to import once (frlake.ingest.preload); set only while it starts.
MAIN_PATH_ENV = "FRLAKE_FORKSERVER_MAIN"


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
    workers against the ceiling").

    Every worker of a pool started from a script runs that script first
    (as ``__mp_main__``, for what the script may have defined that a task
    needs): 65 ms for a script that imports frlake's session, each time.
    The forkserver imports it once instead, so that its workers start with
    it. (``set_forkserver_preload(["__main__"])`` means that, and does
    nothing before Python 3.13.8 and 3.14.1: python/cpython#126631.)"""
    if "forkserver" in get_all_start_methods():
        context = get_context("forkserver")
        context.set_forkserver_preload(["frlake.ingest.preload"])
        main_path = spawn.get_preparation_data("frlake").get("init_main_from_path")
        if main_path:
            os.environ[MAIN_PATH_ENV] = main_path  # read by a forkserver that starts now, and by no other
        try:
            forkserver.ensure_running()
        finally:
            os.environ.pop(MAIN_PATH_ENV, None)
        return context
    return get_context("spawn")
