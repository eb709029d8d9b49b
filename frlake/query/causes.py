"""Host or code? A call for every incident, judged from the history before it.

For an attempt that stopped or straggled, two records are read from the
stored diagnoses (``culprits``, ``attempts``) and the hosts of each attempt (``attempt_hosts``), never
the entries:

- **host**: the culprit host's record before this incident: in how many of
  the attempts it ran it was the root cause, in how many jobs and at how many
  different stalls, against the fleet's rate of root causes per host and
  attempt; and whether the same rank of the same job was the root cause on
  other hosts (which points away from the host);
- **code**: the stall's record before it: the same verdict (a hang, a
  mismatch) at the same stall signature (``culprits.stall_signature``, the
  user frames' function names): how many attempts, jobs and hosts stopped
  there, of how many attempts of the jobs that stopped there ran (its code
  ran in them), and how many of this job's earlier attempts stopped there
  with the root cause on another host.

The call, ``host``, ``code`` or ``unclear``, is a judgement from history,
never a proof. A mistaken ``host`` drains a healthy host, so it is
conservative:

- ``host`` when the host was the root cause in at least 2 earlier incidents
  in at least 2 jobs or at 2 different stalls, with a rate whose 95% Wilson
  lower bound is above the fleet's, and the same rank of the job was not the
  root cause on 2 or more other hosts; a host inferred from placement (the
  rank left no file naming it) is called only when its placement is strong
  (``culprits.host_placement``), at low confidence, and never counted in a
  record;
- ``code`` when the same stall stopped attempts with root causes on at
  least 2 other hosts before, or one of this job's earlier attempts stopped
  there on another host; and the host has no record of its own (not 2
  earlier root causes at a rate above the fleet's: most hangs stop at the
  same few collectives of a training loop whatever their cause, so a flaky
  host's hangs share their stall with other hosts' hangs);
- ``unclear`` when neither holds (no history, or too little) or both do.

History is every attempt ordered by its start time, then its job and number
(an attempt with no start time comes first): an incident's history is what
comes before it in that order. So the same lake gives the same calls however
it was ingested, and a call does not move when later incidents arrive; an
older attempt ingested later does count for the incidents after it, as it
happened before them. The report's window (``--since/--until``) chooses the
incidents listed, never the history they are judged by.

The SQL is in DuckDB's dialect and portable to Spark (one statement; windows
over the rows before each one, no non-equi join); ``CAUSE_CTES`` is also read
by the hangs report, for its ``cause`` column.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from frlake.entities import BLAMED_VERDICTS, INCIDENT_VERDICTS, exit_words
from frlake.query.window import Window
from frlake.values import Record, Row, percent_text

if TYPE_CHECKING:
    import duckdb

LABEL = "judgement from history"
CALLS = ("host", "code", "unclear")

Z = 1.96  # 95% Wilson lower bound
HOST_MIN_INCIDENTS = 2  # earlier root causes on the host
HOST_MIN_SPREAD = 2  # ... in this many jobs, or at this many different stalls
RANK_ELSEWHERE = 2  # the same rank of the job root cause on this many other hosts: not the host
CODE_MIN_HOSTS = 2  # other hosts on which the same stall stopped attempts before

_BLAMED = ", ".join(f"'{v}'" for v in BLAMED_VERDICTS)
_STALLS = ", ".join(f"'{v}'" for v in INCIDENT_VERDICTS)
_BEFORE = "ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING"  # the rows before this one

# The CTEs (names cz_*) that judge every attempt with a root cause; the last, cz_judged, has one row per
# attempt with a culprit at position 0: its figures and its call. They read attempts, culprits and dumps.
CAUSE_CTES = f"""
    cz_order AS (  -- every attempt in one order: its start, then its job and number
      SELECT job, attempt, started_ns,
             row_number() OVER (ORDER BY coalesce(started_ns, 0), job, attempt) AS seqno
      FROM attempts
    ),
    cz_first AS (  -- each attempt's first culprit; blamed: a root cause on a named host; stalled: a hang or mismatch
      SELECT c.job, c.attempt, c.verdict, c.rank, c.host, c.role, c.reason, c.top_frame, o.started_ns, o.seqno,
             coalesce(c.stall_signature, c.stack_signature) AS signature,
             c.verdict || ':' || coalesce(c.stall_signature, c.stack_signature) AS sig,  -- a hang or mismatch there
             coalesce(c.host_inferred, false) AS inferred,
             coalesce(c.host_inferred, false) AND coalesce(c.host_placement, '') = 'strong' AS placed,
             CASE WHEN c.role = 'root' AND c.host IS NOT NULL AND NOT coalesce(c.host_inferred, false)
                       AND c.verdict IN ({_BLAMED}) THEN 1 ELSE 0 END AS blamed,
             CASE WHEN c.role = 'root' AND c.verdict IN ({_STALLS}) THEN 1 ELSE 0 END AS stalled
      FROM culprits c JOIN cz_order o ON o.job = c.job AND o.attempt = c.attempt
      WHERE c.position = 0
    ),
    cz_used AS (  -- each host in each attempt it ran
      SELECT host, job, attempt FROM attempt_hosts
      UNION
      SELECT DISTINCT host, job, attempt FROM culprits WHERE host IS NOT NULL
    ),
    cz_host_rows AS (
      SELECT u.host, u.job, u.attempt, o.seqno, coalesce(f.blamed, 0) AS blamed, f.sig
      FROM cz_used u JOIN cz_order o ON o.job = u.job AND o.attempt = u.attempt
      LEFT JOIN cz_first f ON f.job = u.job AND f.attempt = u.attempt AND f.host = u.host AND f.blamed = 1
    ),
    cz_host_flags AS (  -- the first root cause of a host in each job, and at each stall
      SELECT host, job, attempt, seqno, blamed,
             CASE WHEN blamed = 1 AND row_number() OVER (PARTITION BY host, job, blamed ORDER BY seqno) = 1
                  THEN 1 ELSE 0 END AS new_job,
             CASE WHEN blamed = 1 AND sig IS NOT NULL
                       AND row_number() OVER (PARTITION BY host, sig, blamed ORDER BY seqno) = 1
                  THEN 1 ELSE 0 END AS new_stall
      FROM cz_host_rows
    ),
    cz_host AS (  -- each host's record before each attempt it ran
      SELECT host, job, attempt,
             count(*) OVER (PARTITION BY host ORDER BY seqno {_BEFORE}) AS host_attempts,
             coalesce(sum(blamed) OVER (PARTITION BY host ORDER BY seqno {_BEFORE}), 0) AS host_incidents,
             coalesce(sum(new_job) OVER (PARTITION BY host ORDER BY seqno {_BEFORE}), 0) AS host_jobs,
             coalesce(sum(new_stall) OVER (PARTITION BY host ORDER BY seqno {_BEFORE}), 0) AS host_stalls
      FROM cz_host_flags
    ),
    cz_fleet_rows AS (
      SELECT o.seqno, count(h.host) AS used, coalesce(sum(h.blamed), 0) AS blamed
      FROM cz_order o LEFT JOIN cz_host_rows h ON h.seqno = o.seqno
      GROUP BY o.seqno
    ),
    cz_fleet AS (  -- the fleet's root causes and host-attempts before each attempt
      SELECT seqno, coalesce(sum(used) OVER (ORDER BY seqno {_BEFORE}), 0) AS fleet_used,
             coalesce(sum(blamed) OVER (ORDER BY seqno {_BEFORE}), 0) AS fleet_incidents
      FROM cz_fleet_rows
    ),
    cz_stall_flags AS (  -- the first hang at a stall of each job and of each host
      SELECT job, attempt, host, sig, seqno, stalled,
             CASE WHEN stalled = 1 AND row_number() OVER (PARTITION BY sig, job, stalled ORDER BY seqno) = 1
                  THEN 1 ELSE 0 END AS new_job,
             CASE WHEN stalled = 1 AND host IS NOT NULL
                       AND row_number() OVER (PARTITION BY sig, host, stalled ORDER BY seqno) = 1
                  THEN 1 ELSE 0 END AS new_host
      FROM cz_first WHERE sig IS NOT NULL
    ),
    cz_stall AS (  -- each stall's record before each attempt that stopped at it
      SELECT job, attempt,
             coalesce(sum(stalled) OVER (PARTITION BY sig ORDER BY seqno {_BEFORE}), 0) AS stall_incidents,
             coalesce(sum(new_job) OVER (PARTITION BY sig ORDER BY seqno {_BEFORE}), 0) AS stall_jobs,
             coalesce(sum(new_host) OVER (PARTITION BY sig ORDER BY seqno {_BEFORE}), 0) AS stall_hosts,
             coalesce(sum(stalled) OVER (PARTITION BY sig, host ORDER BY seqno {_BEFORE}), 0) AS stall_here,
             coalesce(sum(stalled) OVER (PARTITION BY sig, job ORDER BY seqno {_BEFORE}), 0) AS job_stall,
             coalesce(sum(stalled) OVER (PARTITION BY sig, job, host ORDER BY seqno {_BEFORE}), 0) AS job_stall_here
      FROM cz_stall_flags
    ),
    cz_job_order AS (SELECT job, seqno, row_number() OVER (PARTITION BY job ORDER BY seqno) AS k FROM cz_order),
    cz_stall_jobs AS (
      SELECT sig, job, min(seqno) AS first_seqno FROM cz_first WHERE stalled = 1 AND sig IS NOT NULL GROUP BY sig, job
    ),
    cz_ran_events AS (  -- the attempts of the jobs that hung at a stall (its code ran there): when a job first hangs
                        -- at it, its attempts so far; then one for each later attempt of the job. probe: an attempt
                        -- to judge, which counts the events before it
      SELECT s.sig, o.seqno, CASE WHEN o.seqno = s.first_seqno THEN o.k ELSE 1 END AS ran, 0 AS probe
      FROM cz_stall_jobs s JOIN cz_job_order o ON o.job = s.job AND o.seqno >= s.first_seqno
      UNION ALL
      SELECT sig, seqno, 0 AS ran, 1 AS probe FROM cz_first WHERE sig IS NOT NULL
    ),
    cz_ran AS (
      SELECT seqno, stall_ran FROM (
        SELECT seqno, probe,
               coalesce(sum(ran) OVER (PARTITION BY sig ORDER BY seqno, probe DESC {_BEFORE}), 0) AS stall_ran
        FROM cz_ran_events) e
      WHERE probe = 1
    ),
    cz_rank AS (  -- earlier root causes at the same rank of the same job, on other hosts
      SELECT job, attempt,
             coalesce(sum(blamed) OVER (PARTITION BY job, rank ORDER BY seqno {_BEFORE}), 0)
             - coalesce(sum(blamed) OVER (PARTITION BY job, rank, host ORDER BY seqno {_BEFORE}), 0) AS rank_elsewhere
      FROM cz_first
    ),
    cz_figures AS (
      SELECT f.job, f.attempt, f.started_ns, f.verdict, f.rank AS culprit_rank, f.host AS culprit_host, f.inferred,
             f.placed,
             f.role AS culprit_role, f.reason, f.signature AS stall_signature, f.top_frame,
             coalesce(h.host_attempts, 0) AS host_attempts, coalesce(h.host_incidents, 0) AS host_incidents,
             coalesce(h.host_jobs, 0) AS host_jobs, coalesce(h.host_stalls, 0) AS host_stalls,
             coalesce(r.rank_elsewhere, 0) AS rank_elsewhere,
             fl.fleet_used, fl.fleet_incidents,
             coalesce(s.stall_incidents, 0) AS stall_incidents, coalesce(s.stall_jobs, 0) AS stall_jobs,
             coalesce(s.stall_hosts, 0) AS stall_hosts,
             CASE WHEN f.host IS NULL THEN coalesce(s.stall_hosts, 0)
                  WHEN s.stall_here > 0 THEN s.stall_hosts - 1 ELSE coalesce(s.stall_hosts, 0) END AS stall_other_hosts,
             coalesce(ran.stall_ran, 0) AS stall_ran,
             CASE WHEN f.host IS NULL THEN 0 ELSE coalesce(s.stall_here, 0) END AS stall_here,
             CASE WHEN f.host IS NULL THEN 0 ELSE coalesce(s.job_stall - s.job_stall_here, 0) END AS job_stall_elsewhere
      FROM cz_first f
      JOIN cz_fleet fl ON fl.seqno = f.seqno
      LEFT JOIN cz_host h ON h.host = f.host AND h.job = f.job AND h.attempt = f.attempt
      LEFT JOIN cz_rank r ON r.job = f.job AND r.attempt = f.attempt
      LEFT JOIN cz_stall s ON s.job = f.job AND s.attempt = f.attempt
      LEFT JOIN cz_ran ran ON ran.seqno = f.seqno
    ),
    cz_rates AS (
      SELECT *,
             CASE WHEN host_attempts > 0 THEN host_incidents / host_attempts::DOUBLE END AS p,
             host_attempts::DOUBLE AS n,
             CASE WHEN fleet_used > 0 THEN fleet_incidents / fleet_used::DOUBLE ELSE 0.0 END AS fleet_rate
      FROM cz_figures
    ),
    cz_strength AS (
      SELECT *,
             CASE WHEN n > 0 THEN (p + {Z} * {Z} / (2 * n) - {Z} * sqrt(p * (1 - p) / n + {Z} * {Z} / (4 * n * n)))
                                  / (1 + {Z} * {Z} / n) END AS host_rate_low,
             CASE WHEN host_incidents >= {HOST_MIN_INCIDENTS}
                       AND (host_jobs >= {HOST_MIN_SPREAD} OR host_stalls >= {HOST_MIN_SPREAD})
                  THEN 1 ELSE 0 END AS host_record
      FROM cz_rates
    ),
    cz_judged AS (
      SELECT *,
             CASE WHEN host_strong = 1 AND code_strong = 0 THEN 'host'
                  WHEN code_strong = 1 AND host_strong = 0 THEN 'code' ELSE 'unclear' END AS call
      FROM (
        SELECT *,
               CASE WHEN host_record = 1 AND host_rate_low > fleet_rate AND rank_elsewhere < {RANK_ELSEWHERE}
                         AND (NOT inferred OR placed) THEN 1 ELSE 0 END AS host_strong,
               CASE WHEN (stall_other_hosts >= {CODE_MIN_HOSTS} OR job_stall_elsewhere >= 1)
                         AND NOT (host_incidents >= {HOST_MIN_INCIDENTS} AND host_rate_low > fleet_rate)
                    THEN 1 ELSE 0 END AS code_strong
        FROM cz_strength) s
    )
"""

_FAILURE_ORDER = "CASE WHEN root_cause THEN '0' ELSE '1' END || path"
# One row per attempt that stopped or straggled (incomplete ones too: they name no culprit, and get no call
# but 'unclear'), newest first.
CAUSES = f"""
    WITH att AS (
      SELECT job, attempt, started_ns FROM attempts
      WHERE ($since::BIGINT IS NULL OR started_ns >= $since) AND ($until::BIGINT IS NULL OR started_ns < $until)
    ),
    {CAUSE_CTES}
    SELECT i.job, i.attempt, make_timestamp(att.started_ns // 1000) AS started_at, i.verdict,
           coalesce(j.call, 'unclear') AS call,
           CASE WHEN j.call = 'host' THEN (CASE WHEN j.inferred THEN 'low'  -- the host is placed, not named
                                                WHEN j.host_incidents >= 4 AND j.host_jobs >= 3 THEN 'high'
                                                WHEN j.host_incidents >= 3 THEN 'medium' ELSE 'low' END)
                WHEN j.call = 'code' THEN (CASE WHEN j.stall_hosts >= 4 THEN 'high'
                                                WHEN j.stall_hosts >= 3 THEN 'medium' ELSE 'low' END)
           END AS confidence,
           j.culprit_rank, j.culprit_host, j.inferred AS culprit_host_inferred, j.placed AS culprit_host_placed,
           j.culprit_role, j.reason, coalesce(j.host_record, 0) = 1 AS host_record,
           j.stall_signature, j.top_frame,
           j.host_incidents, j.host_attempts, round(j.p, 4) AS host_rate, round(j.host_rate_low, 4) AS host_rate_low,
           round(j.fleet_rate, 4) AS fleet_rate, j.fleet_incidents, j.fleet_used,
           j.host_jobs, j.host_stalls, j.rank_elsewhere,
           j.stall_incidents, j.stall_jobs, j.stall_hosts, j.stall_other_hosts, j.stall_here, j.stall_ran,
           j.job_stall_elsewhere,
           coalesce(j.host_strong, 0) = 1 AS host_strong, coalesce(j.code_strong, 0) = 1 AS code_strong,
           lf.exitcode AS culprit_exitcode, lf.failed_at AS culprit_failed_at, lf.message AS culprit_failure
    FROM incidents i JOIN att ON att.job = i.job AND att.attempt = i.attempt
    LEFT JOIN cz_judged j ON j.job = i.job AND j.attempt = i.attempt
    LEFT JOIN (  -- how the culprit died, where its launcher's failure summary says (its root-cause entry first)
      SELECT job, attempt, rank, min_by(exitcode, {_FAILURE_ORDER}) AS exitcode,
             min_by(failed_at, {_FAILURE_ORDER}) AS failed_at, min_by(message, {_FAILURE_ORDER}) AS message
      FROM launcher_failures GROUP BY job, attempt, rank
    ) lf ON lf.job = i.job AND lf.attempt = i.attempt AND lf.rank = j.culprit_rank
    WHERE i.verdict <> 'healthy'
    ORDER BY att.started_ns DESC NULLS LAST, i.job, i.attempt
"""
CAUSE_VIEWS = ("attempts", "culprits", "incidents", "attempt_hosts", "launcher_failures")  # the catalog views it reads


def _n(value: object) -> int:
    return int(value or 0)


def why(row: Row) -> str:
    """The figures that made the call, in words."""
    host, stall = row.get("culprit_host"), row.get("stall_signature")
    if row.get("culprit_rank") is None:
        return "no culprit was named (the diagnosis blames nobody), so there is nothing to judge"
    parts = []
    if row.get("culprit_exitcode") is not None or row.get("culprit_failed_at") is not None:
        # the launcher's word on how it died: evidence on the incident, beside the history the call is made from
        when = f" at {row['culprit_failed_at']} (the launcher's clock)" if row.get("culprit_failed_at") else ""
        parts.append(f"rank {row['culprit_rank']} died, its launcher says: "
                     f"{exit_words(row.get('culprit_exitcode'), row.get('culprit_failure'))}{when}")
    if host is None:
        parts.append("the culprit's host is unknown")
    else:
        incidents, attempts = _n(row["host_incidents"]), _n(row["host_attempts"])
        text = (f"{host} was the root cause in {incidents} of the {attempts} earlier attempt(s) it ran" if attempts
                else f"{host} ran no earlier attempt")
        if incidents:
            text += (f", in {_n(row['host_jobs'])} job(s), at {_n(row['host_stalls'])} stall(s); "
                     f"rate at least {percent_text(row['host_rate_low'] or 0)} (95%) against the fleet's "
                     f"{percent_text(row['fleet_rate'] or 0)}")
        parts.append(text)
        if row.get("culprit_host_inferred"):
            parts.append(f"{host} is inferred from where the ranks beside it ran (no file of the rank names it; "
                         f"{'a strong' if row.get('culprit_host_placed') else 'a weak'} placement)")
        if _n(row["rank_elsewhere"]):
            parts.append(f"rank {row['culprit_rank']} of this job was the root cause on other hosts "
                         f"{_n(row['rank_elsewhere'])} time(s) before")
    if stall is None:
        parts.append("the culprit's stack has no signature to compare")
    else:
        n = _n(row["stall_incidents"])
        text = f"the same {row['verdict']} at this stack happened {n} time(s) before"
        if n:
            text += (f", in {_n(row['stall_jobs'])} job(s), on {_n(row['stall_hosts'])} host(s) "
                     f"({_n(row['stall_other_hosts'])} other than this one, {_n(row['stall_here'])} time(s) on it), "
                     f"of {_n(row['stall_ran'])} attempt(s) of those jobs")
        if _n(row["job_stall_elsewhere"]):
            text += f"; {_n(row['job_stall_elsewhere'])} earlier attempt(s) of this job stopped at it on another host"
        parts.append(text)
    return f"{_deciding(row)}. Evidence: " + "; ".join(parts) + "."


def _deciding(row: Row) -> str:
    """The reason that decided the call, first: what held, or the first thing that did not."""
    host, call = row.get("culprit_host"), row["call"]
    incidents, attempts = _n(row.get("host_incidents")), _n(row.get("host_attempts"))
    record = f"{incidents} of the {attempts} earlier attempt(s) it ran"
    stall_hosts, elsewhere = _n(row.get("stall_other_hosts")), _n(row.get("job_stall_elsewhere"))
    stall = (f"the same stall stopped attempts on {stall_hosts} other host(s) before" if stall_hosts else
             "the same stall stopped no attempt on another host before")
    if elsewhere:
        stall += f", and {elsewhere} earlier attempt(s) of this job stopped there on another host"
    if call == "host":
        if row.get("culprit_host_inferred"):
            return (f"host, at low confidence: {host}'s own record is strong (root cause in {record}), and the "
                    "rank's placement puts it there strongly (no file of the rank names its host; most of its "
                    "block of ranks dumped from it, and other hosts' blocks are whole)")
        return f"host: {host}'s own record is strong (root cause in {record}) and the stall's is not"
    if call == "code":
        return f"code: {stall}, and {host or 'the host'} has no record of its own"
    host_strong, code_strong = bool(row.get("host_strong")), stall_hosts >= CODE_MIN_HOSTS or elsewhere > 0
    if host_strong and code_strong:
        return f"unclear: both point at a cause: {host}'s record (root cause in {record}) and the stall's ({stall})"
    if incidents == 0 and _n(row.get("stall_incidents")) == 0:
        ran = (f"{host} was the root cause in none of the {attempts} earlier attempt(s) it ran" if host and attempts
               else f"{host} ran no earlier attempt" if host else "the culprit's host is unknown")
        return f"unclear: no earlier incident to judge from: {ran}, and the same stall stopped no earlier attempt"
    if host is None:
        return f"unclear: the culprit's host is unknown, so it has no record to read, and {stall}"
    rate_above = row.get("host_rate_low") is not None and (row["host_rate_low"] or 0) > (row.get("fleet_rate") or 0)
    if row.get("host_record") and rate_above and _n(row.get("rank_elsewhere")) < RANK_ELSEWHERE:
        # the record is strong: the host was only inferred, from a weak placement
        return (f"unclear: {host}'s record is strong (root cause in {record}), but this rank's host is inferred "
                "from a weak placement (too few ranks of its block dumped from it, or too few other hosts' blocks "
                "are whole), so it is not blamed on it")
    if row.get("host_record") and rate_above:
        return (f"unclear: rank {row['culprit_rank']} of this job was the root cause on "
                f"{_n(row['rank_elsewhere'])} other host(s) before, which points away from {host}")
    if row.get("host_record"):
        return (f"unclear: {host}'s rate of root causes (at least {percent_text(row.get('host_rate_low') or 0)}, "
                f"95%) is not above the fleet's ({percent_text(row.get('fleet_rate') or 0)}), and {stall}")
    return (f"unclear: {host}'s record is too short to blame it (root cause in {record}; {HOST_MIN_INCIDENTS} in "
            f"{HOST_MIN_SPREAD} jobs or at {HOST_MIN_SPREAD} stalls are needed), and {stall}")



def finish(row: Row) -> Row:
    """Every engine's rows: the why in words, and the label."""
    row["why"] = why(row)
    row["basis"] = LABEL
    return row


@dataclass(frozen=True)
class HostRecord(Record):
    host: str | None
    incidents: int  # the attempts before this one where it was the root cause
    attempts: int  # the attempts before this one it ran
    rate: float | None
    rate_low: float | None  # the 95% Wilson lower bound of that rate
    fleet_rate: float  # root causes per host and attempt, every host, before this one
    jobs: int  # distinct jobs of those root causes
    stalls: int  # distinct stall signatures of those root causes
    same_rank_elsewhere: int  # earlier root causes at the same rank of this job on other hosts
    inferred: bool  # this culprit's host is inferred from placement: called only when strongly placed, at low confidence
    drain_score: float | None  # the drain list's score and action just before this incident
    drain_action: str | None
    strong: bool


@dataclass(frozen=True)
class StallRecord(Record):
    signature: str | None
    top_frame: str | None
    incidents: int  # the attempts before this one that hung at it
    jobs: int
    hosts: int
    other_hosts: int  # hosts other than this culprit's
    ran: int  # the attempts of the jobs that hung at it (they ran its code), before this one
    same_job_elsewhere: int  # earlier attempts of this job that hung at it on another host
    strong: bool


@dataclass(frozen=True)
class Cause(Record):
    """The call for one incident: ``host``, ``code`` or ``unclear``, a
    judgement from the history before it (``label``), with its figures."""

    job: str
    attempt: int
    verdict: str
    call: str
    confidence: str | None  # low, medium, high; None when unclear
    why: str
    culprit_rank: int | None
    culprit_host: str | None
    host: HostRecord
    code: StallRecord
    as_of: datetime | None  # the incident's start: only what came before it counts
    label: str = LABEL

    @classmethod
    def of(cls, row: Row, drain: Row | None = None) -> Cause:
        return cls(
            job=row["job"], attempt=int(row["attempt"]), verdict=row["verdict"], call=row["call"],
            confidence=row["confidence"], why=row.get("why") or why(row), culprit_rank=row["culprit_rank"],
            culprit_host=row["culprit_host"],
            host=HostRecord(
                host=row["culprit_host"], incidents=_n(row["host_incidents"]), attempts=_n(row["host_attempts"]),
                rate=row["host_rate"], rate_low=row["host_rate_low"], fleet_rate=row["fleet_rate"] or 0.0,
                jobs=_n(row["host_jobs"]), stalls=_n(row["host_stalls"]),
                same_rank_elsewhere=_n(row["rank_elsewhere"]), inferred=bool(row["culprit_host_inferred"]),
                drain_score=None if drain is None else drain["score"],
                drain_action=None if drain is None else drain["action"], strong=bool(row["host_strong"])),
            code=StallRecord(
                signature=row["stall_signature"], top_frame=row["top_frame"], incidents=_n(row["stall_incidents"]),
                jobs=_n(row["stall_jobs"]), hosts=_n(row["stall_hosts"]), other_hosts=_n(row["stall_other_hosts"]),
                ran=_n(row["stall_ran"]), same_job_elsewhere=_n(row["job_stall_elsewhere"]),
                strong=bool(row["code_strong"])),
            as_of=row.get("started_at"),
        )


@dataclass(frozen=True)
class _Before(Window):
    """The attempts that started before an instant, to the nanosecond."""

    before_ns: int = 0

    def bounds_ns(self) -> tuple[int | None, int | None]:
        return None, self.before_ns


def cause_of(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> Cause | None:
    """The call for one attempt, the same as its row of ``frlake report
    causes``, with the culprit host's drain score and action just before it;
    None for a healthy attempt (or one not diagnosed)."""
    from frlake.query.drain import DrainPolicy, drain

    sql = f"SELECT * FROM ({CAUSES}) c WHERE c.job = $job AND c.attempt = $attempt"
    cur = con.execute(sql, {"since": None, "until": None, "job": job, "attempt": attempt})
    names = [d[0] for d in cur.description]
    found = cur.fetchone()
    if found is None:
        return None
    row = finish(dict(zip(names, found)))
    record = None
    started_ns = con.execute("SELECT started_ns FROM attempts WHERE job = $job AND attempt = $attempt",
                             {"job": job, "attempt": attempt}).fetchone()
    if row["culprit_host"] is not None and started_ns and started_ns[0] is not None:
        at = started_ns[0]
        policy = DrainPolicy(now=datetime.fromtimestamp(at / 1e9, tz=UTC))
        record = next((r for r in drain(con, _Before(before_ns=at), policy=policy)
                       if r["host"] == row["culprit_host"]), {"score": 0.0, "action": "ok"})
    return Cause.of(row, record)


__all__ = ["CALLS", "CAUSES", "CAUSE_CTES", "CAUSE_VIEWS", "LABEL", "Cause", "HostRecord", "StallRecord",
           "cause_of", "finish", "why"]
