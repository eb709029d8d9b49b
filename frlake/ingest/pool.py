"""Where ingest workers come from (a light module: the command line starts
the forkserver before it imports the heavy parts of frlake)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
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


# A run's worker processes are kept for the next run of the same process (a server's scans and uploads, a
# script or notebook that ingests in a loop) and stopped once unused this long. A new worker's first batch
# costs more than the next ones: its memory is mapped page by page as it is first touched, and the pages it
# shares with the forkserver are copied as they are written; and a pool's start and stop. Over 256 files and
# two workers, kept ones took 4% less time than new ones (bench/README.md, "Two workers: 0.97 of the
# ceiling"). joblib's loky keeps its workers so too.
IDLE_S = 60.0

_kept: dict[tuple[int, str], tuple[ProcessPoolExecutor, threading.Timer]] = {}
_kept_lock = threading.Lock()


def take_pool(workers: int, context: BaseContext, initializer: Callable[[int], None]) -> ProcessPoolExecutor:
    """A pool of ``workers`` worker processes: the one an earlier run of
    this process kept, whose workers are warm, or a new one. A pool serves
    one run at a time: two runs at once each take their own."""
    key = (workers, context.get_start_method())
    with _kept_lock:
        held = _kept.pop(key, None)
    if held is not None:
        pool, timer = held
        timer.cancel()
        if _whole(pool):
            return pool
        pool.shutdown(wait=True)
    return new_pool(workers, context, initializer)


def new_pool(workers: int, context: BaseContext, initializer: Callable[[int], None]) -> ProcessPoolExecutor:
    """A new pool of ``workers`` worker processes, each set up by ``initializer`` with this process' pid:
    the workers exit with this process, however it ends (frlake.ingest.worker.enter_worker_process)."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=initializer,
                               initargs=(os.getpid(),))


def keep_pool(pool: ProcessPoolExecutor, workers: int, context: BaseContext) -> None:
    """Keep the pool of a run that ended well for the next run; its workers
    stop once it is unused for ``IDLE_S``, or when the process exits."""
    key = (workers, context.get_start_method())
    timer = threading.Timer(IDLE_S, _expire, (key, pool))
    timer.daemon = True
    with _kept_lock:
        if key not in _kept:
            _kept[key] = (pool, timer)
            timer.start()
            return
    pool.shutdown(wait=True)  # another run kept one meanwhile


def stop_kept_pools() -> None:
    """Stop every kept pool's workers now."""
    with _kept_lock:
        held = list(_kept.values())
        _kept.clear()
    for pool, timer in held:
        timer.cancel()
        pool.shutdown(wait=True)


def _whole(pool: ProcessPoolExecutor) -> bool:
    """Whether every worker of a kept pool is still alive (one the OOM killer took while it idled would
    fail the batch it is given: its files would then be read again one by one). The executor has no
    public word for it."""
    return not getattr(pool, "_broken", False) and all(p.is_alive() for p in getattr(pool, "_processes", {}).values())


def _expire(key: tuple[int, str], pool: ProcessPoolExecutor) -> None:
    with _kept_lock:
        if key not in _kept or _kept[key][0] is not pool:
            return
        del _kept[key]
    pool.shutdown(wait=True)
