"""``frlake serve --watch PATH --every 10m``: one process that serves and
keeps ingesting. A background thread of the server ingests the watched
paths through the server's own session on an interval (NFS has no reliable
change events, so it scans; an unchanged file costs one catalog row lookup,
not a read). Its last scan, its errors and its next run are shown on the
jobs page and at ``GET /api/watch``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from frlake.session import Frlake

log = logging.getLogger("frlake.watch")


@dataclass(frozen=True)
class WatchConfig:
    paths: tuple[str, ...]
    every_s: float = 600.0
    options: object = None  # IngestOptions (None: the defaults, one worker process)


@dataclass
class WatchStatus:
    paths: list[str]
    every_s: float
    scans: int = 0
    running: bool = False
    last_started_at: datetime | None = None
    last_finished_at: datetime | None = None
    last_summary: dict | None = None  # counts of the last scan that finished
    last_error: str | None = None  # of the last scan, None if it went well
    last_error_at: datetime | None = None
    errors: int = 0
    total_ingested: int = 0  # over every scan of this process
    total_rejected: int = 0
    next_run_at: datetime | None = None
    recent_rejections: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


_COUNTS = ("run_id", "ingested", "already_present", "unchanged", "rejected", "skipped_rejected",
           "skipped_forgotten", "entries", "seconds", "compacted")


class Watcher:
    """The scanning thread. ``status()`` is safe to call from any request."""

    def __init__(self, session: Frlake, config: WatchConfig, after_scan=None):
        from frlake.ingest.pipeline import IngestOptions

        self.session = session
        self.config = config
        self.after_scan = after_scan  # called after every scan that went well (the alerts' pass: alerts.py)
        self.options = config.options or IngestOptions(workers=1, isolate=True)
        self._status = WatchStatus(list(config.paths), config.every_s)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="frlake-watch", daemon=True)

    def start(self) -> Watcher:
        with self._lock:
            self._status.next_run_at = datetime.now(UTC)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def status(self) -> WatchStatus:
        with self._lock:
            return replace(self._status, paths=list(self._status.paths),
                           recent_rejections=list(self._status.recent_rejections))

    def scan_once(self) -> None:
        with self._lock:
            self._status.running = True
            self._status.last_started_at = datetime.now(UTC)
        try:
            summary = self.session.ingest(self.config.paths, self.options)
        except Exception as exc:  # a scan that fails is shown, and the next one tries again
            log.error("watch scan failed: %s", exc)
            with self._lock:
                self._status.last_error = f"{type(exc).__name__}: {exc}"
                self._status.last_error_at = datetime.now(UTC)
                self._status.errors += 1
        else:
            counts = {k: getattr(summary, k) for k in _COUNTS}
            with self._lock:
                self._status.last_summary = counts
                self._status.total_ingested += summary.ingested
                self._status.total_rejected += summary.rejected
                self._status.last_error = None
                self._status.recent_rejections = summary.rejected_files[:20]
            if self.after_scan is not None:
                self.after_scan()
        finally:
            with self._lock:
                self._status.running = False
                self._status.scans += 1
                self._status.last_finished_at = datetime.now(UTC)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.scan_once()
            wait = max(0.0, self.config.every_s - (time.monotonic() - started))
            with self._lock:
                self._status.next_run_at = datetime.now(UTC) + timedelta(seconds=wait)
            self._stop.wait(wait)


def watch_config(paths: Sequence[str], every_s: float, options=None) -> WatchConfig | None:
    if paths and every_s < 0.1:
        from frlake.errors import FrlakeError

        raise FrlakeError(f"--every {every_s:g}s: scan at most ten times a second")
    return WatchConfig(tuple(str(p) for p in paths), every_s, options) if paths else None
