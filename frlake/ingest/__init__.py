"""Ingest Flight Recorder dumps into the lake: ``ingest(paths, settings, options)``."""

from importlib import import_module

from frlake.ingest.identity import DEFAULT_LAYOUT, IdentityOptions, Layout, load_hosts

# Loaded on first use, so that a command line that only needs the light parts
# (identity options, the layout) starts without pyarrow and SQLAlchemy.
_LAZY = {"Limits": "frlake.ingest.parse", "IngestOptions": "frlake.ingest.pipeline",
         "IngestSummary": "frlake.ingest.pipeline", "ingest": "frlake.ingest.pipeline",
         "recover": "frlake.storage.publish"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_LAYOUT", "IdentityOptions", "IngestOptions", "IngestSummary", "Layout", "Limits", "ingest", "load_hosts", "recover",
]
