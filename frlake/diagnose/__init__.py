"""Diagnose attempts: name what went wrong and who caused it, root cause
first. Pure analysis over a DuckDB connection (``diagnose_attempt``) that
returns the entities of :mod:`frlake.entities`; choosing what to read and
storing the result is the session's (:class:`frlake.Frlake`)."""

from importlib import import_module

_LAZY = {"diagnose_attempt": "frlake.diagnose.analyze"}  # loaded on first use: its texts (words) need no DuckDB


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["diagnose_attempt"]
