"""The catalog's rows as its readers get them: plain values, importable without SQLAlchemy (the quick
reads of ``catalog.quick`` build them too)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class AttemptRow:
    """An attempt as the jobs page lists it."""

    job: str
    attempt: int
    verdict: str | None
    summary: str | None
    n_dumps: int
    hosts: tuple[str, ...]
    started_ns: int | None
    last_seen_at: datetime
    root_rank: int | None
    root_host: str | None
    root_reason: str | None


@dataclass(frozen=True)
class AttemptInfo:
    job: str
    attempt: int
    n_dumps: int
    hosts: tuple[str, ...]
    ranks: tuple[int, ...]
    started_ns: int | None
    ended_ns: int | None
    last_seen_at: datetime
