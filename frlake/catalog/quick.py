"""A stored diagnosis, and a job's attempts, read without SQLAlchemy: what ``frlake diagnose JOB`` shows.

Importing SQLAlchemy and declaring the catalog's models is most of the start of a short command
(bench/bench_startup.py). On an SQLite catalog (the embedded default) the session asks this module
first: a few SELECTs through Python's own sqlite3 on a read-only connection. It answers only when the
answer is certain: the catalog is at this frlake's revision and the attempt's stored diagnosis is
current. Anything else (PostgreSQL, no catalog yet, an older catalog, a diagnosis that is due) is None,
and the session takes its full path, the one that creates, checks and computes. tests/test_catalog.py
holds the two paths to the same answers.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path

from frlake.catalog.rows import AttemptRow
from frlake.entities import ALGORITHM_VERSION, Diagnosis

_CURRENT = """
SELECT i.report FROM attempts a JOIN jobs j ON j.id = a.job_id JOIN incidents i ON i.attempt_id = a.id
WHERE j.name = ? AND a.number = ? AND NOT a.diagnosis_due"""

# Attempts.page(job=...): newest first, with the stored verdict and the root cause (culprit position 0)
_PAGE = """
SELECT j.name, a.number, i.verdict, i.summary,
       (SELECT count(*) FROM dumps d WHERE d.attempt_id = a.id), a.started_ns, a.last_seen_at,
       c.rank, c.host, c.reason, a.id
FROM jobs j JOIN attempts a ON a.job_id = j.id
LEFT JOIN incidents i ON i.attempt_id = a.id
LEFT JOIN culprits c ON c.incident_id = i.id AND c.position = 0
WHERE j.name = ?
ORDER BY a.started_ns IS NULL, a.started_ns DESC, a.last_seen_at DESC, j.name, a.number
LIMIT ?"""


class QuickReads:
    """Read-only answers from an SQLite catalog at this frlake's revision (see the module docstring)."""

    def __init__(self, con: sqlite3.Connection):
        self._con = con

    @classmethod
    def open(cls, db_url: str, head: str) -> QuickReads | None:
        """None unless ``db_url`` is an SQLite file that is there and at revision ``head``."""
        if not db_url.startswith("sqlite:///"):
            return None
        path = Path(db_url.removeprefix("sqlite:///"))
        if not path.is_file():
            return None
        try:
            con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=60)
            revision = con.execute("SELECT version_num FROM alembic_version").fetchone()
        except sqlite3.Error:  # not a catalog, or not yet one: the full path says what is wrong
            return None
        if revision is None or revision[0] != head:
            con.close()
            return None
        return cls(con)

    def close(self) -> None:
        self._con.close()

    def latest_attempt(self, job: str) -> int | None:
        row = self._con.execute("SELECT max(a.number) FROM attempts a JOIN jobs j ON j.id = a.job_id "
                                "WHERE j.name = ?", (job,)).fetchone()
        return row[0]

    def count_attempts(self, job: str) -> int:
        return self._con.execute("SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id "
                                 "WHERE j.name = ?", (job,)).fetchone()[0]

    def current_diagnosis(self, job: str, attempt: int | None) -> Diagnosis | None:
        """The attempt's stored diagnosis if it is current (Frlake.current_diagnosis), else None (also for
        ``attempt`` None: a job with no attempt)."""
        row = self._con.execute(_CURRENT, (job, attempt)).fetchone()
        stored = Diagnosis.from_dict(json.loads(row[0])) if row and row[0] else None
        return stored if stored is not None and stored.algorithm_version == ALGORITHM_VERSION else None

    def attempts_of(self, job: str, limit: int) -> list[AttemptRow]:
        """What ``Attempts.page(job=job, limit=limit)`` lists."""
        rows = self._con.execute(_PAGE, (job, limit)).fetchall()
        hosts: dict[int, list[str]] = {}
        if rows:
            marks = ",".join("?" * len(rows))
            for attempt_id, host in self._con.execute(
                    f"SELECT DISTINCT attempt_id, host FROM dumps WHERE attempt_id IN ({marks})", [r[10] for r in rows]):
                hosts.setdefault(attempt_id, []).append(host)
        return [AttemptRow(r[0], r[1], r[2], r[3], r[4], tuple(sorted(hosts.get(r[10], ()))), r[5],
                           datetime.fromisoformat(r[6]), r[7], r[8], r[9]) for r in rows]
