"""Ingest Flight Recorder dumps into the lake: ``ingest(paths, settings, options)``."""

from frlake.ingest.identity import DEFAULT_LAYOUT, IdentityOptions, Layout, load_hosts
from frlake.ingest.parse import Limits
from frlake.ingest.pipeline import IngestOptions, IngestSummary, ingest, recover

__all__ = [
    "DEFAULT_LAYOUT", "IdentityOptions", "IngestOptions", "IngestSummary", "Layout", "Limits", "ingest", "load_hosts", "recover",
]
