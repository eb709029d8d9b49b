"""Fleet reports over all history: flaky hosts, slow ranks, recurring hangs.

They read the stored diagnoses (``incidents``, ``culprits``, ``rank_stats``),
the catalog's hosts of each attempt (``attempt_hosts``) and, for slow links,
the summary table ``host_links``, never the entries, so their cost grows with
the number of attempts, not with the number of entries. Every row carries
its evidence: the jobs and attempts behind it.

Each report is one SQL statement in DuckDB's dialect, held by its entry in
``REPORTS``: DuckDB runs it as written, and ``frlake.engines.transpile``
turns the same text into Spark SQL (docs/engines.md), so there is one
definition for both engines. Every ORDER BY, inside a list or not, breaks
all ties, and ``mode`` takes the smallest of equally frequent values, so
that both engines give the same rows in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

from frlake.entities import BLAMED_VERDICTS, INCIDENT_VERDICTS
from frlake.query.causes import CAUSE_CTES, CAUSE_VIEWS, CAUSES
from frlake.query.causes import finish as cause_finish
from frlake.query.drain import DrainPolicy, drain
from frlake.query.links import SLOW_LINKS, slow_link_verdict
from frlake.query.window import Window
from frlake.values import ReportRows, Row

Z = 1.96  # 95% Wilson lower bound
_INCIDENTS = ", ".join(f"'{v}'" for v in INCIDENT_VERDICTS)  # the verdicts of attempts that stopped
_BLAMED = ", ".join(f"'{v}'" for v in BLAMED_VERDICTS)  # ... or straggled: a host is to blame


_ATTEMPTS = """
    att AS (
      SELECT job, attempt, started_ns FROM attempts
      WHERE ($since::BIGINT IS NULL OR started_ns >= $since) AND ($until::BIGINT IS NULL OR started_ns < $until)
    )
"""


# Hosts by how often they were the root cause, relative to how often they were used: ``score`` is the 95%
# Wilson lower bound of that rate, so a host seen in 2 attempts with 1 incident does not outrank one seen in
# 40 with 25.
FLAKY_HOSTS = f"""
    WITH {_ATTEMPTS},
    used AS (
      SELECT h.host, h.job, h.attempt FROM attempt_hosts h JOIN att USING (job, attempt) WHERE h.host IS NOT NULL
      UNION
      SELECT DISTINCT c.host, c.job, c.attempt FROM culprits c JOIN att USING (job, attempt) WHERE c.host IS NOT NULL
    ),
    blamed AS (  -- the root cause of an attempt that stopped or straggled (an incomplete one blames nobody)
      SELECT c.host, c.job, c.attempt, c.reason, coalesce(c.host_inferred, false) AS host_inferred, att.started_ns
      FROM culprits c JOIN att USING (job, attempt)
      WHERE c.position = 0 AND c.role = 'root' AND c.host IS NOT NULL AND c.verdict IN ({_BLAMED})
    ),
    per AS (
      SELECT u.host, count(*) AS attempts, count(b.job) AS culprit_attempts,
             list(struct_pack(job := b.job, attempt := b.attempt, reason := b.reason, host_inferred := b.host_inferred,
                              started_at := make_timestamp(b.started_ns // 1000)) ORDER BY b.started_ns, b.job, b.attempt)
               FILTER (WHERE b.job IS NOT NULL) AS evidence
      FROM used u LEFT JOIN blamed b USING (host, job, attempt)
      GROUP BY u.host
    ),
    reasons AS (SELECT host, map(list(reason), list(n)) AS by_reason
                FROM (SELECT host, reason, count(*) AS n FROM blamed GROUP BY ALL) GROUP BY host)
    SELECT per.host,
           -- + 0.0: the bound of a host never blamed rounds to -0.0, which + 0.0 makes 0.0
           round((p + {Z}^2 / (2 * n) - {Z} * sqrt(p * (1 - p) / n + {Z}^2 / (4 * n * n))) / (1 + {Z}^2 / n), 4)
             + 0.0 AS score,
           per.attempts, per.culprit_attempts, round(p, 4) AS rate,
           coalesce(reasons.by_reason, MAP {{}}) AS by_reason,
           coalesce(per.evidence, []) AS evidence
    FROM (SELECT *, culprit_attempts / attempts AS p, attempts::DOUBLE AS n FROM per) per
    LEFT JOIN reasons USING (host)
    ORDER BY score DESC, culprit_attempts DESC, attempts DESC, host
"""


def _by_reason_dict(row: dict) -> dict:
    row["by_reason"] = dict(row["by_reason"]) if row["by_reason"] else {}
    return row


# Ranks (and the hosts they ran on) that arrive late to collectives, across attempts: the straggler culprits
# first, then ranks often first to be late.
SLOW_RANKS = f"""
    WITH {_ATTEMPTS},
    rs AS (SELECT r.*, att.started_ns AS att_started FROM rank_stats r JOIN att USING (job, attempt)),
    strag AS (SELECT c.job, c.attempt, c.rank, c.lateness_ms, c.wait_ms, c.wait_per_step_ms, c.step_without_ms
              FROM culprits c JOIN att USING (job, attempt)
              WHERE c.reason = 'straggler' AND c.position = 0)
    SELECT rs.job, rs.rank, rs.host,
           round(coalesce(median(s.lateness_ms), median(rs.root_late_ms), median(rs.late_p50_ms)), 3) AS lateness_ms,
           round(median(rs.late_p50_ms), 3) AS median_ms,
           round(max(rs.late_p90_ms), 3) AS p90_ms,
           round(sum(rs.arrived_last) / nullif(sum(rs.collectives), 0), 4) AS last_share,
           count(s.job) AS straggler_attempts,
           count(*) FILTER (WHERE rs.root_late_events > 0 OR s.job IS NOT NULL) AS attempts_affected,
           sum(rs.root_late_events) AS first_late_events,
           -- what it cost the others where it was the straggler (0017: NULL for diagnoses from before)
           round(sum(s.wait_ms), 3) AS wait_ms,
           round(median(s.wait_per_step_ms), 3) AS wait_per_step_ms,
           round(median(s.step_without_ms), 3) AS step_without_ms,
           list(struct_pack(attempt := rs.attempt, started_at := make_timestamp(rs.att_started // 1000),
                            straggler := s.job IS NOT NULL, late_p50_ms := round(rs.late_p50_ms, 3))
                ORDER BY rs.attempt) AS evidence
    FROM rs LEFT JOIN strag s USING (job, attempt, rank)
    GROUP BY rs.job, rs.rank, rs.host
    HAVING count(s.job) > 0 OR sum(rs.root_late_events) >= 3 OR median(rs.late_p50_ms) >= 10
    ORDER BY straggler_attempts DESC, attempts_affected DESC, lateness_ms DESC, rs.job, rs.rank, rs.host
"""

# What kind of failure each incident of the window was (frlake.entities.Kind), and each kind's share: of all
# the incidents, and of those that stopped the job (hangs and mismatches; a straggler's job went on).
KINDS = f"""
    WITH {_ATTEMPTS},
    i AS (
      SELECT i.job, i.attempt, i.kind, i.verdict, att.started_ns, i.verdict IN ({_INCIDENTS}) AS stopped
      FROM incidents i JOIN att USING (job, attempt) WHERE i.kind IS NOT NULL
    ),
    total AS (SELECT count(*) AS n, count(*) FILTER (WHERE stopped) AS stops FROM i),
    root AS (SELECT c.job, c.attempt, c.host FROM culprits c JOIN att USING (job, attempt) WHERE c.position = 0)
    SELECT i.kind, count(*) AS incidents, round(100 * count(*) / max(total.n), 1) AS percent,
           count(*) FILTER (WHERE i.stopped) AS stops,
           round(100 * count(*) FILTER (WHERE i.stopped) / nullif(max(total.stops), 0), 1) AS percent_of_stops,
           count(DISTINCT i.job) AS jobs, count(DISTINCT root.host) AS hosts,
           make_timestamp(min(i.started_ns) // 1000) AS first_seen, make_timestamp(max(i.started_ns) // 1000) AS last_seen,
           list(struct_pack(job := i.job, attempt := i.attempt, verdict := i.verdict,
                            started_at := make_timestamp(i.started_ns // 1000))
                ORDER BY i.started_ns DESC, i.job, i.attempt) AS evidence
    FROM i CROSS JOIN total LEFT JOIN root USING (job, attempt)
    GROUP BY i.kind
    ORDER BY incidents DESC, i.kind
"""


# Historical hangs and mismatches, one line per stall signature of the root cause (its user frames' function
# names, so a line moved by an edit or a torch upgrade is the same stall), so "the same stall in 14 jobs" is one
# line; the exact signatures (files and lines) it groups are listed in it. Diagnoses stored before stall
# signatures existed fall back to the exact one.
# One row per stall: the same reason at the same op in the same kind of group, told apart by the user's
# frames where the dumps carry stacks (stall_signature). A stall some dumps give no stack for (JSON dumps
# without frames) joins its stacked kin when they are one stall; when they are several, which one it is the
# data cannot tell, and it keeps a row of its own (reason:op@group).
# ``cause``: the call (frlake.query.causes) of the stall's latest attempt, judged from the history before it;
# each item of ``evidence`` carries its own.
HANGS = f"""
    WITH {_ATTEMPTS},
    {CAUSE_CTES},
    h AS (
      SELECT c.*, att.started_ns AS att_started, coalesce(c.stall_signature, c.stack_signature) AS sig,
             c.reason || ':' || coalesce(c.op, '?') || '@' || coalesce(c.pg_desc, '?') AS place,
             coalesce(j.call, 'unclear') AS cause
      FROM culprits c JOIN att USING (job, attempt)
      LEFT JOIN cz_judged j ON j.job = c.job AND j.attempt = c.attempt
      WHERE c.position = 0 AND c.verdict = 'hang'
    ),
    one AS (SELECT place, count(DISTINCT sig) AS n, min(sig) AS sig FROM h GROUP BY place),
    k AS (
      SELECT h.*, CASE WHEN h.sig IS NOT NULL THEN h.reason || ':' || h.sig
                       WHEN one.n = 1 THEN h.reason || ':' || one.sig ELSE h.place END AS signature
      FROM h JOIN one USING (place)
    ),
    latest AS (
      SELECT signature, cause AS latest_cause FROM (
        SELECT signature, cause,
               row_number() OVER (PARTITION BY signature ORDER BY att_started DESC, job DESC, attempt DESC) AS nth
        FROM k) l
      WHERE nth = 1
    )
    SELECT signature, min(top_frame) AS top_frame, mode(reason ORDER BY reason) AS reason, mode(op ORDER BY op) AS op,
           mode(pg_desc ORDER BY pg_desc) AS pg_desc,
           count(*) AS attempts, count(DISTINCT job) AS jobs, list(DISTINCT host ORDER BY host) AS hosts,
           list(DISTINCT stack_signature ORDER BY stack_signature) AS exact_signatures,
           make_timestamp(min(att_started) // 1000) AS first_seen, make_timestamp(max(att_started) // 1000) AS last_seen,
           list(struct_pack(started_at := make_timestamp(att_started // 1000), job := job, attempt := attempt,
                            verdict := verdict, pg := pg, pg_desc := pg_desc, seq := seq, op := op,
                            rank := rank, host := host, reason := reason, cause := cause)
                ORDER BY att_started, job, attempt) AS evidence,
           min(latest.latest_cause) AS cause
    FROM k JOIN latest USING (signature) GROUP BY signature
    ORDER BY attempts DESC, last_seen DESC, signature
"""


REPORT_VIEWS = ("attempts", "culprits", "rank_stats")  # the catalog views the reports read


@dataclass(frozen=True)
class Report:
    """One fleet report: everything the CLI, the API, the UI, the docs and
    the other engines need to know of it. Adding a report is one entry in
    ``REPORTS``."""

    name: str
    sql: str  # one statement, DuckDB's dialect, with the parameters $since and $until (Window.bounds_ns)
    title: str
    question: str  # the fleet question it answers, in a user's words
    columns: tuple[str, ...]  # what a terminal shows; CSV and JSON carry every column, evidence included
    page: str  # the web page's template
    nav: str  # its name in the web UI's navigation
    views: tuple[str, ...] = REPORT_VIEWS  # the catalog views it reads
    tables: tuple[str, ...] = ()  # the lake tables it reads (its connection lists no other table's files)
    finish: Callable[[Row], Row] | None = None  # what every engine does to each row after the SQL
    # A report that is more than one SQL statement (a policy over several queries): computed from a DuckDB
    # connection, ``compute(con, window, limit, **params)``; ``sql`` is then empty.
    compute: Callable[..., list[Row]] | None = None
    # Tested on every engine (frlake.engines): the SQL alone, portable. The others run on DuckDB only.
    portable: bool = True
    empty: str = "no row in this window"  # why it has no row: the page and the command say the same
    # a report of hosts: it says how much of the window's history has its hosts known (Dumps.host_coverage)
    by_host: bool = False

    def statement(self, limit: int | None = None) -> str:
        return self.sql + (f" LIMIT {int(limit)}" if limit else "")

    def params(self, window: Window) -> dict[str, int | None]:
        since, until = window.bounds_ns()
        return {"since": since, "until": until}

    def rows(self, columns: list[str], tuples) -> ReportRows:
        """Result tuples as the report's rows (``finish`` applied)."""
        rows = [dict(zip(columns, row)) for row in tuples]
        rows = [self.finish(r) for r in rows] if self.finish else rows
        return ReportRows(rows, list(rows[0]) if rows else list(columns))

    def run(self, con: duckdb.DuckDBPyConnection, window: Window = Window(), limit: int | None = None,
            **params) -> ReportRows:
        """The report's rows on a DuckDB connection with frlake's views
        (``params`` go to a computed report: drain's ``policy``)."""
        if self.compute is not None:
            rows = self.compute(con, window, limit, **params)
            return ReportRows(rows, list(rows[0]) if rows else list(self.columns))
        cur = con.execute(self.statement(limit), self.params(window))
        return self.rows([d[0] for d in cur.description], cur.fetchall())


def _drain(con: duckdb.DuckDBPyConnection, window: Window, limit: int | None = None, policy=None) -> ReportRows:
    return drain(con, window, limit, policy or DrainPolicy())


REPORTS: dict[str, Report] = {r.name: r for r in (
    Report("flaky-hosts", FLAKY_HOSTS, "Flaky hosts", "Which hosts should we drain?",
           ("host", "score", "attempts", "culprit_attempts", "rate", "by_reason"), "hosts.html", "Hosts",
           views=(*REPORT_VIEWS, "attempt_hosts"), finish=_by_reason_dict, empty="no host took part in an attempt in this window",
           by_host=True),
    Report("slow-ranks", SLOW_RANKS, "Slow ranks", "Is this rank always slow, and on which host?",
           ("job", "rank", "host", "lateness_ms", "p90_ms", "last_share", "straggler_attempts", "attempts_affected"),
           "slow_ranks.html", "Slow ranks", empty="no rank keeps arriving late in this window"),
    Report("kinds", KINDS, "Kinds of failure", "What share of our incidents is our own code (CPU-side)?",
           ("kind", "incidents", "percent", "percent_of_stops", "jobs", "hosts"), "kinds.html",
           "Kinds", views=("attempts", "incidents", "culprits"), empty="no incident in this window"),
    Report("hangs", HANGS, "Recurring hangs", "How many hangs were the same stall (mismatches: the incidents view)?",
           ("attempts", "jobs", "reason", "op", "pg_desc", "hosts", "top_frame", "last_seen", "signature", "cause"),
           "hangs.html", "Hangs", views=(*REPORT_VIEWS, "attempt_hosts"), empty="no hang or mismatch in this window"),
    Report("causes", CAUSES, "Host or code?", "Was this incident the host or the code (a judgement from history)?",
           ("job", "attempt", "verdict", "call", "culprit_host", "confidence", "culprit_rank", "host_incidents",
            "host_attempts", "stall_incidents", "stall_hosts"), "causes.html", "Causes",
           views=CAUSE_VIEWS, finish=cause_finish, empty="no attempt stopped or straggled in this window", by_host=True),
    Report("drain", "", "Drain list", "Which hosts should we avoid or exclude now, and why?",
           ("host", "action", "score", "incidents", "attempts_used", "gpus"), "drain.html", "Drain",
           views=("attempts", "culprits", "attempt_hosts"), compute=_drain, portable=False,
           empty="no host holds a root cause in this window", by_host=True),
    Report("slow-links", SLOW_LINKS, "Slow links", "Which hosts' collectives take longer, though they arrive on time?",
           ("host", "verdict", "slowdown", "confidence", "slow_collectives", "collectives", "attempts",
            "watchdog_lag_ms"), "slow_links.html", "Slow links", views=("attempts",), tables=("host_links",),
           finish=slow_link_verdict,
           empty="no dump with timing (duration_ms) in this window: slow links need NCCL's timing "
                 "(TORCH_NCCL_ENABLE_TIMING=1) and sibling groups to compare", by_host=True),
)}
