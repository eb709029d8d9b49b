"""The one-call forms the benchmarks use, each through a session of its own
(frlake's Python API is frlake.Frlake)."""

from __future__ import annotations

from frlake.session import Frlake


def ingest(paths, settings, options=None):
    with Frlake(settings) as fl:
        return fl.ingest(paths, options)


def run(settings, name, window=None, limit=None, **params):
    with Frlake(settings) as fl:
        return fl.report(name, window, limit, **params)


def entries(settings, job, attempt=None, flt=None):
    """What `frlake entries` computes: the side-by-side view and the stack diff, in one session."""
    with Frlake(settings) as fl:
        view = fl.entries(job, attempt, flt)
        return {**view.to_dict(), "stacks": [g.to_dict() for g in fl.stack_diff(job, view.attempt)]}


def query(sql, settings, limits=None):
    with Frlake(settings) as fl:
        return fl.query(sql, limits)


def connect(lake, db_url=None):
    import frlake

    return frlake.connect(lake, db_url)
