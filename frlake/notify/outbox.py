"""A notify pass: the stored diagnoses a receiver has not looked at become messages in the catalog's outbox
(frlake.catalog.notify), then the messages due are delivered.

Decoupled from the analysis: whoever stored a diagnosis (an ingest, a watch scan, a rediagnose, another
process) a pass finds it, and a pass can run anywhere and any number of times. Per receiver and attempt:

- a diagnosis is announced once per attempt revision; the first announcement is an ``event: "new"``
  message, when its verdict is one of ``on`` and its job matches ``jobs``;
- a later diagnosis (more dumps, a new algorithm) that changes the verdict or the root cause of what was
  announced is an ``event: "update"`` that says what changed (even when it became healthy: people were told);
  one that changes neither sends nothing;
- delivery: at least once. A message leaves the outbox in the transaction that counts it sent; a process
  that dies after the receiver took it and before that commit sends it again after its lease, with the same
  ``X-Frlake-Delivery`` id.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from frlake.catalog.notify import Candidate, Decision, DestinationStatus
from frlake.catalog.store import Catalog
from frlake.notify.config import NotifyConfig, key, label
from frlake.notify.deliver import DeliveryFailed, post
from frlake.notify.message import culprit_words, is_partial, message, named_directly, root_cause

log = logging.getLogger("frlake.notify")
LEASE_MARGIN_S = 30.0  # a message being sent is not sent by another process for its timeout and this


def _iso(at: datetime | None) -> str | None:
    if at is None:
        return None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).isoformat(timespec="milliseconds")


@dataclass
class PassSummary:
    """What one pass did, over every receiver."""

    queued: int = 0
    sent: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"queued": self.queued, "sent": self.sent, "failed": self.failed, "errors": self.errors}


class Notifier:
    """The passes of one configuration over one catalog. ``drain_rows()`` gives the drain list's rows (read
    only when a pass has something to announce); ``cause_of(job, attempt)`` the host-or-code call of an
    attempt as a dict (None: none), read for each message."""

    def __init__(self, catalog: Catalog, config: NotifyConfig, drain_rows: Callable[[], list[dict]],
                 cause_of: Callable[[str, int], dict | None] | None = None,
                 on_delivered: Callable[[dict], None] | None = None):
        self.catalog = catalog
        self.config = config
        self.drain_rows = drain_rows
        self.cause_of = cause_of
        self.on_delivered = on_delivered  # called with each message the receiver took (the alert delay's metric)
        self._ids: dict[str, int] = {}

    def start(self) -> None:
        """Register the receivers (a new one starts from what the lake holds now: nothing before is
        announced). Run before the ingest whose diagnoses should be announced."""
        for url in self.config.urls:
            self._destination(url)

    def _destination(self, url: str) -> int:
        k = key(url)
        if k not in self._ids:
            self._ids[k] = self.catalog.notify.destination(k, label(url))
        return self._ids[k]

    def run(self, queue: bool = True) -> PassSummary:
        """Queue what is new (``queue``: the caller knows nothing was stored since the last pass), then
        deliver what is due."""
        summary = PassSummary()
        for url in self.config.urls if queue else ():
            summary.queued += self.enqueue(url)
        for url in self.config.urls:
            self.deliver(url, summary)
        return summary

    def enqueue(self, url: str) -> int:
        destination = self._destination(url)
        queued = 0
        drain = None
        while candidates := self.catalog.notify.candidates(destination):
            if drain is None and any(self._announce(c) for c in candidates):
                drain = {row["host"]: row for row in self.drain_rows()}
            decisions = [self._decide(c, drain or {}) for c in candidates]
            queued += self.catalog.notify.record(destination, decisions, self.config.max_queue)
            if len(candidates) < 500:
                break
        return queued

    def _announce(self, c: Candidate) -> bool:
        """Whether this diagnosis is worth a message: a new incident that passes the filters, or a change to
        what was announced (a partial announcement is followed by the settled one). A diagnosis made before
        every rank dumped is announced first only where the root cause's own dump names it: a rank named only
        for the dump it has not written yet may be a slow writer."""
        d = c.diagnosis
        verdict = d.verdict.value
        if c.announced_verdict is not None:
            return ((c.announced_verdict, c.announced_culprit) != (verdict, culprit_words(root_cause(d)))
                    or (c.announced_partial and not is_partial(d)))
        if is_partial(d) and not named_directly(d):
            return False  # until it settles (every rank dumped, or its quiet period: frlake.server.watch)
        return verdict in self.config.on and (
            not self.config.jobs or any(fnmatch.fnmatchcase(c.job, p) for p in self.config.jobs))

    def _decide(self, c: Candidate, drain: dict[str, dict]) -> Decision:
        if not self._announce(c):
            return Decision(c, keep=True)
        d = c.diagnosis
        culprit = root_cause(d)
        previous = None if c.announced_verdict is None else (c.announced_verdict, c.announced_culprit)
        mtime_ns, ingested = self.catalog.dumps.arrival(c.job, c.attempt)
        timeline = {"last_dump_at": None if mtime_ns is None else _iso(datetime.fromtimestamp(mtime_ns / 1e9, UTC)),
                    "ingested_at": _iso(ingested), "diagnosed_at": _iso(c.diagnosed_at)}
        body = message(d, revision=c.revision, public_url=self.config.public_url,
                       drain=drain.get(culprit.host) if culprit is not None and culprit.host else None,
                       previous=previous, cause=self.cause_of(c.job, c.attempt) if self.cause_of else None,
                       was_partial=c.announced_partial, timeline=timeline)
        return Decision(c, body=json.dumps(body, default=str), delivery=uuid.uuid4().hex,
                        verdict=d.verdict.value, culprit=culprit_words(culprit), partial=is_partial(d))

    def deliver(self, url: str, summary: PassSummary | None = None) -> PassSummary:
        """Send the messages due, oldest first; a failure is retried later with backoff (the rest wait for
        the next pass: a receiver that fails is not hammered)."""
        summary = summary or PassSummary()
        destination = self._destination(url)
        lease = self.config.timeout_s + LEASE_MARGIN_S
        while pending := self.catalog.notify.due(destination, lease):
            for i, m in enumerate(pending):
                try:
                    post(url, m.body.encode(), m.delivery, secret=self.config.secret, timeout_s=self.config.timeout_s)
                except DeliveryFailed as exc:
                    tries = m.tries + 1
                    give_up = tries >= self.config.max_tries
                    error = f"{exc}" + (f" (given up after {tries} tries)" if give_up else f" (try {tries})")
                    log.warning("notify %s: %s", label(url), error)
                    wait = None if give_up else self.config.backoff(tries)
                    self.catalog.notify.failed(destination, m.id, error, wait)
                    summary.failed += 1
                    summary.errors.append(error)
                    # the receiver is down: the others leased wait as long, in their order
                    self.catalog.notify.release([rest.id for rest in pending[i + 1:]], wait or 0.0)
                    return summary
                if self.catalog.notify.delivered(destination, m.id):
                    summary.sent += 1
                    if self.on_delivered is not None:
                        self.on_delivered(json.loads(m.body))
        return summary

    def status(self) -> list[DestinationStatus]:
        return self.catalog.notify.status()
