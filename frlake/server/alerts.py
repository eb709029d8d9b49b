"""``frlake serve --notify URL``: the server's alerts. A background thread runs a notify pass
(frlake.notify.outbox) when the server starts, after each ``--watch`` scan, and every ``poll_s`` (diagnoses
another process stored, retries that came due). Its last pass is shown on the jobs page and at
``GET /api/notify`` beside each receiver's queue, deliveries and failures (kept in the catalog)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from frlake.session import Frlake

log = logging.getLogger("frlake.notify")


@dataclass
class AlertsStatus:
    receivers: list[str]  # the configured receivers, as labels (a webhook's path holds its secret)
    on: list[str]
    jobs: list[str]
    passes: int = 0
    last_pass_at: datetime | None = None
    last_pass_error: str | None = None  # a pass that failed as a whole (the catalog, the drain report)

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


class Alerts:
    def __init__(self, session: Frlake, config, on_delivered=None):
        from frlake.notify.config import label

        self.session = session
        self.config = config
        self.notifier = session.notifier(config, on_delivered)
        self._status = AlertsStatus([label(u) for u in config.urls], list(config.on), list(config.jobs))
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="frlake-notify", daemon=True)
        self._version = None  # the catalog's version at the last pass that queued

    def start(self) -> Alerts:
        self.notifier.start()  # before the first scan: a new receiver is told of what comes next
        self._thread.start()
        return self

    def wake(self) -> None:
        """Run a pass now (a watch scan just stored diagnoses)."""
        self._wake.set()

    def stop(self, timeout: float | None = None) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def status(self) -> AlertsStatus:
        with self._lock:
            return replace(self._status)

    def run_once(self) -> None:
        error = None
        try:
            # new diagnoses change the catalog's version: a pass while it stands still only delivers what is due
            version = self.session.catalog_version()
            self.notifier.run(queue=version != self._version)
            self._version = version
        except Exception as exc:  # a pass that fails is shown, and the next one tries again
            log.error("notify pass failed: %s", exc)
            error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            self._status.passes += 1
            self._status.last_pass_at = datetime.now(UTC)
            self._status.last_pass_error = error

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._wake.wait(self.config.poll_s)
            self._wake.clear()
