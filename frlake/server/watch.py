"""``frlake serve --watch PATH``: one process that serves and keeps ingesting.

A background thread of the server looks for new and changed dumps, cheaply and often, and ingests them
through the server's own session (frlake.ingest.changes):

- every ``poll_s`` (``--poll``, 2 s) it *looks*: it stats the watched folders and lists only those whose
  modification time moved (or that hold files still being written), and ingests the files it found new or
  changed. Local folders tell it sooner through inotify (``watchfiles``): a change wakes it at once. An
  unchanged tree costs a stat per folder, not a catalog lookup per file;
- every ``every_s`` (``--every``, 10 min) it *scans* the whole tree as ``frlake ingest`` does: the safety net
  for what a folder's time does not show (an old file rewritten in place on NFS);
- an attempt *settles* when every rank its dumps imply has dumped, or when no new dump of it came for
  ``settle_s`` (``--settle``, 60 s): then it is diagnosed as complete, as ``frlake diagnose --complete``
  would. Before that its diagnosis is partial (the alerts say so: frlake.notify.outbox).

Its last look and scan, their cost, its errors and next run are shown on the jobs page, at
``GET /api/watch`` and in ``/metrics``."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from frlake.ingest.changes import QUIET_S
from frlake.session import Frlake

log = logging.getLogger("frlake.watch")

SETTLE_S = 60.0  # an attempt with ranks that have not dumped is complete once no dump of it came for this long
RESTART_WINDOW = timedelta(days=1)  # a restarted watch settles the attempts diagnosed this recently


@dataclass(frozen=True)
class WatchConfig:
    paths: tuple[str, ...]
    every_s: float = 600.0  # the full scan's interval
    options: object = None  # IngestOptions (None: the defaults, one worker process)
    poll_s: float = 2.0  # the looks' interval
    settle_s: float = SETTLE_S
    inotify: bool = True  # local folders wake the watch at once (watchfiles)


@dataclass
class WatchStatus:
    paths: list[str]
    every_s: float
    scans: int = 0  # full scans and looks that found something, each an ingest
    running: bool = False
    last_started_at: datetime | None = None
    last_finished_at: datetime | None = None
    last_summary: dict | None = None  # counts of the last scan that finished
    last_error: str | None = None  # of the last scan, None if it went well
    last_error_at: datetime | None = None
    errors: int = 0
    total_ingested: int = 0  # over every scan of this process
    total_rejected: int = 0
    next_run_at: datetime | None = None  # the next full scan
    recent_rejections: list[dict] = field(default_factory=list)
    poll_s: float = 2.0
    settle_s: float = SETTLE_S
    looks: int = 0  # looks at the folders' times
    last_look_at: datetime | None = None
    last_look: dict | None = None  # {"files", "folders_statted", "folders_listed", "seconds", "cpu_seconds"}
    full_scans: int = 0
    last_full_scan_at: datetime | None = None
    inotify: str = "off"  # "on", "off", or why it could not start
    settled: int = 0  # attempts this watch settled after their quiet period
    waiting: int = 0  # attempts with ranks not dumped, in their quiet period now

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


_COUNTS = ("run_id", "ingested", "already_present", "unchanged", "rejected", "skipped_rejected",
           "skipped_forgotten", "entries", "seconds", "compacted")


class Watcher:
    """The watching thread (and its inotify thread). ``status()`` is safe to call from any request.
    ``on_look(look)``: called with each look's figures (the server's metrics)."""

    def __init__(self, session: Frlake, config: WatchConfig, after_scan=None, on_look=None):
        from frlake.ingest.changes import Changes
        from frlake.ingest.pipeline import IngestOptions

        self.session = session
        self.config = config
        self.after_scan = after_scan  # called after every scan that went well (the alerts' pass: alerts.py)
        self.on_look = on_look
        self.options = config.options or IngestOptions(workers=1, isolate=True)
        self.changes = Changes(list(config.paths), exclude=str(session.lake.root))
        self._status = WatchStatus(list(config.paths), config.every_s, poll_s=config.poll_s,
                                   settle_s=config.settle_s)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._full_due = 0.0  # monotonic: the first pass scans everything
        self._arrived: dict[tuple[str, int], float] = {}  # attempts not settled: when their newest dump came (wall)
        self._thread = threading.Thread(target=self._loop, name="frlake-watch", daemon=True)
        self._notify = threading.Thread(target=self._inotify, name="frlake-watch-inotify", daemon=True)

    def start(self) -> Watcher:
        with self._lock:
            self._status.next_run_at = datetime.now(UTC)
        self._seed()
        self._thread.start()
        if self.config.inotify:
            self._notify.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)
        if self._notify.is_alive():
            self._notify.join(timeout)

    def status(self) -> WatchStatus:
        with self._lock:
            return replace(self._status, paths=list(self._status.paths),
                           recent_rejections=list(self._status.recent_rejections))

    # -- one pass ------------------------------------------------------------------------------------------
    def scan_once(self) -> None:
        """A full scan: every file under the watched paths, as ``frlake ingest`` reads them. The folders'
        times are taken first, so that what changes while it runs is found by the next look."""
        self.changes.forget()
        self.changes.look()
        self._ingest(None)
        with self._lock:
            self._status.full_scans += 1
            self._status.last_full_scan_at = datetime.now(UTC)

    def look_once(self) -> bool:
        """A look: the folders whose times moved, and the files in them that are new or changed. Whether it
        held files back as too young (then the next look comes in QUIET_S, whatever ``poll_s``)."""
        look = self.changes.look()
        figures = {"files": len(look.files), "folders_statted": look.folders_statted,
                   "folders_listed": look.folders_listed, "seconds": look.seconds, "cpu_seconds": look.cpu_seconds}
        with self._lock:
            self._status.looks += 1
            self._status.last_look_at = datetime.now(UTC)
            self._status.last_look = figures
        if self.on_look is not None:
            self.on_look(look)
        if look.files:
            self._ingest(look.files)
        return look.held > 0

    def _ingest(self, only: list[str] | None) -> None:
        with self._lock:
            self._status.running = True
            self._status.last_started_at = datetime.now(UTC)
        try:
            summary = self.session.ingest(self.config.paths, self.options, only=only)
        except Exception as exc:  # a scan that fails is shown, and the next one tries again
            log.error("watch scan failed: %s", exc)
            with self._lock:
                self._status.last_error = f"{type(exc).__name__}: {exc}"
                self._status.last_error_at = datetime.now(UTC)
                self._status.errors += 1
        else:
            now = time.time()
            for key in summary.touched:
                self._arrived[tuple(key)] = now
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

    def settle_once(self) -> int:
        """Diagnose as complete the attempts whose quiet period ended with ranks still not dumped; forget the
        ones every rank of which dumped. Returns how many it settled."""
        now, settled = time.time(), 0
        for key, arrived in sorted(self._arrived.items()):
            d = self.session.catalog.diagnoses.get(*key)
            if d is None or d.complete or not d.ranks_missing_dump:
                del self._arrived[key]  # settled: every rank dumped (or a user marked it)
                continue
            if now - arrived < self.config.settle_s:
                continue
            try:
                self.session.mark_complete(*key)
                settled += 1
            except Exception as exc:  # shown; the next pass tries again
                log.error("settling %s attempt %d failed: %s", key[0], key[1], exc)
                continue
            del self._arrived[key]
        with self._lock:
            self._status.settled += settled
            self._status.waiting = len(self._arrived)
        if settled and self.after_scan is not None:
            self.after_scan()
        return settled

    def _seed(self) -> None:
        """The attempts a watch before this one left waiting for dumps: their quiet period counts from their
        newest dump's ingest."""
        try:
            since = datetime.now(UTC) - RESTART_WINDOW
            for job, attempt, at in self.session.catalog.diagnoses.unsettled(since):
                at = at if at.tzinfo else at.replace(tzinfo=UTC)
                self._arrived[(job, attempt)] = at.timestamp()
        except Exception as exc:
            log.error("reading the attempts left waiting failed: %s", exc)

    # -- the threads ---------------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            held = False
            if started >= self._full_due:
                self.scan_once()
                self._full_due = time.monotonic() + self.config.every_s
                with self._lock:
                    self._status.next_run_at = datetime.now(UTC) + timedelta(seconds=self.config.every_s)
            else:
                held = self.look_once()
            self.settle_once()
            soon = min(self.config.poll_s, QUIET_S) if held else self.config.poll_s
            wait = max(0.0, min(soon, self._full_due - time.monotonic()) - (time.monotonic() - started))
            self._wake.wait(wait)
            self._wake.clear()

    def _inotify(self) -> None:
        """Local writes wake the watch at once; a folder inotify cannot watch (NFS: remote writes, a full
        watch table) is found by the looks."""
        try:
            from watchfiles import watch

            with self._lock:
                self._status.inotify = "on"
            for changes in watch(*self.config.paths, stop_event=self._stop, debounce=100, step=20, rust_timeout=500,
                                 raise_interrupt=False, ignore_permission_denied=True):
                for _, path in changes:
                    self.changes.touch(path)
                self._wake.set()
        except Exception as exc:  # polling still finds everything
            log.warning("inotify is off for the watch (%s): it looks every %.3g s", exc, self.config.poll_s)
            with self._lock:
                self._status.inotify = f"off: {type(exc).__name__}: {exc}"[:200]


def watch_config(paths: Sequence[str], every_s: float, options=None, *, poll_s: float = 2.0,
                 settle_s: float = SETTLE_S, inotify: bool = True) -> WatchConfig | None:
    from frlake.errors import FrlakeError

    if paths and every_s < 0.1:
        raise FrlakeError(f"--every {every_s:g}s: scan at most ten times a second")
    if paths and poll_s < 0.1:
        raise FrlakeError(f"--poll {poll_s:g}s: look at most ten times a second")
    if paths and settle_s < 0:
        raise FrlakeError(f"--settle {settle_s:g}s: a quiet period cannot be negative")
    return WatchConfig(tuple(str(p) for p in paths), every_s, options, poll_s, settle_s, inotify) if paths else None
