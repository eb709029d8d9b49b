"""What the dumps' times say of an attempt: whether its job hung (a collective pending past its timeout when
its dump was written), or was at work when it was dumped (in flight), and how that is known."""

from __future__ import annotations

from dataclasses import dataclass, field

from frlake.query.vocabulary import Relations

# A dump's time taken from its file's mtime is trusted as the time it was written unless it comes later than
# this after the dump's own newest entry (plus twice its timeout): a watchdog writes its timeout dump within
# minutes of the timeout, while a copy that did not keep mtimes (cp without -p, an upload) dates the file to
# the copy, hours or days later, and would make a periodic snapshot of a healthy job look hung.
MTIME_SLACK_NS = 15 * 60 * 1_000_000_000
# How a job's hang is known from the dumps' times (overdue_from), strongest first.
OVERDUE_FROM = ("file_name", "entries", "mtime", "mtime_after_copy")
STALL_STEPS = 50  # a collective pending longer than this many of the job's steps is no longer "at work"
MIN_STALL_NS = 2_000_000_000  # nor ever before 2 s: a step of a healthy job can wait that long on a slow peer


@dataclass
class Timing:
    """What the dumps' times say (the snapshots table): ``overdue`` ranks held
    a collective pending longer than its timeout when their dump was written
    (the job hung); ``in_flight``: every pending collective was younger than
    its timeout (a periodic snapshot of a job at work), so waiting is not a hang.

    ``overdue_from`` says how the hang is known, strongest first: ``file_name``
    (a time in a dump's name), ``entries`` (a dump's own newest time is past
    the timeout), ``mtime`` (the file's mtime), ``mtime_after_copy`` (only
    mtimes so long after the dumps' newest entries that they are more likely
    the time of a copy than of the dump: the hang is not confirmed)."""

    overdue: list[int] = field(default_factory=list)
    in_flight: bool = False
    pending_ranks: int = 0
    written_from: list[str] = field(default_factory=list)  # file_name / mtime: how each dump's time is known
    overdue_from: str | None = None
    # a collective some rank counts as completed that a member never enqueued: it failed (gloo counts a timed-out
    # or broken op as completed), so the job is not at work whatever the times say: {"pg", "seq"} or None
    failed: dict | None = None
    # the longest any overdue rank had held a collective pending when its dump was written, and its timeout (s)
    overdue_s: float | None = None
    timeout_s: float | None = None

    @property
    def confirmed(self) -> bool:
        """The dumps' times show that the job hung."""
        return bool(self.overdue) and self.overdue_from != "mtime_after_copy"

    def to_dict(self) -> dict:
        return {"overdue_ranks": self.overdue, "in_flight": self.in_flight, "ranks_with_pending": self.pending_ranks,
                "dump_time_from": self.written_from, "overdue_from": self.overdue_from,
                **({"overdue_s": self.overdue_s, "timeout_s": self.timeout_s} if self.overdue_s is not None else {}),
                **({"failed_collective": self.failed} if self.failed else {})}


_TIMEOUT_NS = "coalesce(timeout_ms, 0) * 1000000"
# What read_timing reads of each dump read (``dumps``), of one attempt (``k`` "") or of each ("job, attempt, ").
TIMING_ROWS = f"""SELECT {{k}}rank, n_pending, oldest_pending_ns, timeout_ms, written_ns, overdue, written_from,
                   CASE WHEN NOT coalesce(overdue, false) THEN NULL  -- how it is known (Timing.overdue_from)
                        WHEN written_from = 'file_name' THEN 'file_name'
                        WHEN snapshot_from = 'newest_entry' AND snapshot_ns - oldest_pending_ns > {_TIMEOUT_NS}
                          THEN 'entries'
                        WHEN snapshot_from = 'newest_entry'
                          AND written_ns - snapshot_ns > 2 * {_TIMEOUT_NS} + {MTIME_SLACK_NS} THEN 'mtime_after_copy'
                        ELSE 'mtime' END
            FROM {{dumps}} ORDER BY {{k}}rank"""


def read_timing(con, params, rel: Relations, members: dict[str, set[int]],
                last_seq: dict[tuple[int, str], int], rows: list[tuple] | None = None) -> Timing:
    """What the attempt's dumps' times say (its ``members``, the world's groups, and ``last_seq``, each rank's
    last collective per group, tell a failed collective). ``rows``: its TIMING_ROWS, read already."""
    if rows is None:
        rows = con.execute(TIMING_ROWS.format(k="", dumps=rel.dumps)).fetchall()
    pending = [r for r in rows if r[1]]
    overdue = [r for r in rows if r[5]]
    # a snapshot at work: something is pending, and each rank's pending collectives are known to be younger
    # than their timeout at its dump's time (a dump time before its own entries is no evidence, and so is one
    # too coarse to tell: a name's whole second, overdue NULL)
    in_flight = bool(pending) and not overdue and all(
        t is not None and w is not None and o is not None and w >= o and late is False
        for _, _, o, t, w, late, *_ in pending)
    if in_flight:
        # and young against the job's own pace: a collective pending for many steps is a stall, whatever its
        # timeout (a DeviceMesh's subgroups keep the 30-minute default while the job's steps take milliseconds)
        pace = _pace_ns(con, rel)
        in_flight = pace is not None and all(w - o <= max(STALL_STEPS * pace, MIN_STALL_NS)
                                             for _, _, o, _, w, *_ in pending)
    # and no collective failed: a job whose collective broke is not at work, however young its pending ones
    failed = failed_collective(con, params, rel, members, last_seq) if in_flight else None
    sources = [r[7] for r in overdue]
    aged = [(w - o, t) for _, _, o, t, w, *_ in overdue if w is not None and o is not None]
    age, timeout = max(aged, default=(None, None), key=lambda a: a[0])
    return Timing([r[0] for r in overdue], in_flight and failed is None, len(pending),
                  sorted({r[6] for r in rows if r[6]}), min(sources, key=OVERDUE_FROM.index) if sources else None,
                  failed, None if age is None else round(age / 1e9, 3),
                  None if timeout is None else round(timeout / 1e3, 3))


def failed_collective(con, params, rel: Relations, members: dict[str, set[int]],
                      last_seq: dict[tuple[int, str], int]) -> dict | None:
    """The first collective (by group and sequence id) that a rank's pg_status counts as completed although a
    member of its group never enqueued it (or left no dump): no collective completes without all its members,
    so it failed. gloo counts a timed-out or broken op as completed; NCCL's counter never contradicts."""
    done = con.execute(
        f"""SELECT g.pg_name, max(p.last_completed_collective)
            FROM {rel.rank_groups} g
            JOIN (SELECT d.rank, p.pg_id, p.last_completed_collective FROM pg_status p JOIN {rel.dumps} d USING (dump_id)
                  WHERE p.job = $job AND p.attempt = $attempt) p ON p.rank = g.rank AND p.pg_id = CAST(g.pg_id AS VARCHAR)
            WHERE NOT g.is_p2p AND p.last_completed_collective >= g.lo AND p.last_completed_collective <= g.hi
            GROUP BY ALL ORDER BY ALL""",
        params,
    ).fetchall()
    for pg, seq in done:
        if any(last_seq.get((m, pg), -1) < seq for m in members.get(pg, ())):
            return {"pg": pg, "seq": seq}
    return None


def _pace_ns(con, rel: Relations) -> float | None:
    """The job's pace: the median time between a rank's consecutive entries (a median, so that one long pause,
    a checkpoint or the first dump's symbolizing, does not set it)."""
    pace = con.execute(
        f"""SELECT median(gap) FROM (
              SELECT t - lag(t) OVER (PARTITION BY rank ORDER BY t) AS gap FROM {rel.entries} WHERE t IS NOT NULL)"""
    ).fetchone()[0]
    return None if pace is None else float(pace)
