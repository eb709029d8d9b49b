"""Diagnose attempts: name what went wrong and who caused it, root cause
first. Pure analysis over a DuckDB connection (``diagnose_attempt``);
choosing what to read and storing the result is the session's
(:class:`frlake.Frlake`)."""

from importlib import import_module

from frlake.diagnose.model import ALGORITHM_VERSION, Culprit, Diagnosis, Verdict, stack_signature, top_frame

_LAZY = {"diagnose_attempt": "frlake.diagnose.analyze"}  # loaded on first use: the catalog imports the model only


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ALGORITHM_VERSION", "Culprit", "Diagnosis", "Verdict", "diagnose_attempt", "stack_signature", "top_frame"]
