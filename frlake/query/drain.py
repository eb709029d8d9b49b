"""Which hosts (and GPUs) to avoid or exclude now, and why: a repeat-offender
policy over the stored diagnoses, in the shape NVIDIA's resiliency-ext
describes (suspect -> avoid -> exclude).

Each time a host holds a root cause of an attempt that stopped or straggled,
it gets evidence worth 1, and then:

- the evidence halves every ``half_life_days`` (an incident of last month
  counts little today);
- it halves again for every ``clean_half_life`` attempts the host then ran
  without being a root cause (successful runtime since clears it);
- an incident that blames many hosts at once (a cascade, a switch) is shared
  among them: each of ``n`` blamed hosts gets ``1 / n``;
- the k-th incident of the same failure family (hang, mismatch, straggler)
  on a host counts ``1 + repeat_bonus * (k - 1)``: repeats weigh more;
- an incident whose host is inferred (its rank left no dump, and only where
  the ranks beside it ran names a host) counts ``inferred_host`` of itself:
  a guess of placement should not drain a host as a dump that names it does.

The score is the sum; the thresholds name the action. Every row carries its
evidence and the arithmetic (``--explain HOST`` prints it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from frlake.entities import BLAMED_VERDICTS

if TYPE_CHECKING:
    import duckdb

    from frlake.query.window import Window
    from frlake.values import Row

FAMILY = {"missing": "hang", "no_dump": "hang", "straggler": "straggler"}  # the rest: mismatch


@dataclass(frozen=True)
class DrainPolicy:
    half_life_days: float = 14.0
    clean_half_life: float = 25.0  # clean attempts on the host that halve an incident's weight
    repeat_bonus: float = 1.0
    suspect: float = 1.0
    avoid: float = 2.0
    exclude: float = 3.0
    inferred_host: float = 0.5  # the weight of an incident whose host is inferred from placement
    now: datetime | None = None  # the moment the policy is applied (default: now, UTC)

    def action(self, score: float) -> str:
        if score >= self.exclude:
            return "exclude"
        if score >= self.avoid:
            return "avoid"
        if score >= self.suspect:
            return "suspect"
        return "ok"


_BLAMED = ", ".join(f"'{v}'" for v in BLAMED_VERDICTS)
_INCIDENTS = f"""
    WITH att AS (
      SELECT job, attempt, started_ns FROM attempts
      WHERE ($since::BIGINT IS NULL OR started_ns >= $since) AND ($until::BIGINT IS NULL OR started_ns < $until)
    ), roots AS (
      SELECT c.job, c.attempt, c.rank, c.host, c.reason, c.verdict, coalesce(c.host_inferred, false) AS inferred,
             att.started_ns
      FROM culprits c JOIN att USING (job, attempt)
      WHERE c.role = 'root' AND c.host IS NOT NULL AND c.verdict IN ({_BLAMED})
    ), blamed AS (
      SELECT job, attempt, count(DISTINCT host) AS n_hosts FROM roots GROUP BY ALL
    ), base AS (  -- the lowest rank of each host in the attempt: local rank = rank - base (ranks per host are blocks)
      SELECT job, attempt, host, first_rank AS base FROM attempt_hosts
    )
    SELECT r.host, r.job, r.attempt, r.rank, r.rank - b.base AS local_rank, r.reason, r.verdict, r.started_ns,
           bl.n_hosts, r.inferred
    FROM roots r JOIN blamed bl USING (job, attempt) LEFT JOIN base b USING (job, attempt, host)
    QUALIFY row_number() OVER (PARTITION BY r.host, r.job, r.attempt ORDER BY r.inferred, r.rank) = 1
    ORDER BY r.host, r.started_ns, r.job, r.attempt
"""
# every attempt each host took part in, and whether it held a root cause there
_USAGE = """
    WITH att AS (
      SELECT job, attempt, started_ns FROM attempts
      WHERE ($since::BIGINT IS NULL OR started_ns >= $since) AND ($until::BIGINT IS NULL OR started_ns < $until)
    )
    SELECT h.host, h.job, h.attempt, att.started_ns FROM attempt_hosts h JOIN att USING (job, attempt)
"""


def drain(con: duckdb.DuckDBPyConnection, window: Window, limit: int | None = None,
          policy: DrainPolicy = DrainPolicy()) -> list[Row]:
    """Hosts with any evidence, highest score first; each row: host, score,
    action, incidents, the GPUs (local ranks) involved, and the evidence."""
    since, until = window.bounds_ns()
    params = {"since": since, "until": until}
    incidents = con.execute(_INCIDENTS, params).fetchall()
    usage: dict[str, list[tuple[int, str, int]]] = {}
    for host, job, attempt, started in con.execute(_USAGE, params).fetchall():
        usage.setdefault(host, []).append((started or 0, job, attempt))
    now = policy.now or datetime.now(UTC)
    now_ns = int(now.timestamp() * 1e9)
    by_host: dict[str, list[tuple]] = {}
    for row in incidents:
        by_host.setdefault(row[0], []).append(row)
    rows = []
    for host, items in by_host.items():
        blamed_at = {(job, attempt) for _, job, attempt, *_ in items}
        seen_family: dict[str, int] = {}
        evidence = []
        for _, job, attempt, rank, local_rank, reason, verdict, started, n_hosts, inferred in items:
            family = FAMILY.get(reason, "mismatch")
            k = seen_family[family] = seen_family.get(family, 0) + 1
            age_days = max(0.0, (now_ns - (started or now_ns)) / 86400e9)
            clean_since = sum(1 for t, j, a in usage.get(host, ()) if t > (started or 0) and (j, a) not in blamed_at)
            decay = 0.5 ** (age_days / policy.half_life_days)
            cleared = 0.5 ** (clean_since / policy.clean_half_life)
            share = 1.0 / max(1, n_hosts)
            repeat = 1.0 + policy.repeat_bonus * (k - 1)
            guessed = policy.inferred_host if inferred else 1.0
            weight = decay * cleared * share * repeat * guessed
            evidence.append({
                "job": job, "attempt": attempt, "rank": rank, "gpu": None if local_rank is None else int(local_rank),
                "reason": reason, "family": family, "started_at": _iso(started), "age_days": round(age_days, 2),
                "decay": round(decay, 4), "clean_attempts_since": clean_since, "cleared": round(cleared, 4),
                "hosts_blamed": n_hosts, "share": round(share, 4), "repeat": k, "repeat_factor": repeat,
                "host_inferred": bool(inferred), "inferred_factor": guessed,
                "weight": round(weight, 4),
            })
        score = sum(e["weight"] for e in evidence)
        gpus: dict[int, float] = {}
        for e in evidence:
            if e["gpu"] is not None:
                gpus[e["gpu"]] = gpus.get(e["gpu"], 0.0) + e["weight"]
        rows.append({
            "host": host, "score": round(score, 4), "action": policy.action(score), "incidents": len(evidence),
            "attempts_used": len(usage.get(host, ())),
            "gpus": [{"gpu": g, "score": round(s, 4), "action": policy.action(s)}
                     for g, s in sorted(gpus.items(), key=lambda kv: (-kv[1], kv[0]))],
            "evidence": evidence,
        })
    rows.sort(key=lambda r: (-r["score"], r["host"]))
    return rows[:limit] if limit else rows


def slurm_exclude(rows: list[dict], at_least: str = "exclude") -> str:
    """The hosts whose action is ``at_least`` or stronger, as Slurm's
    ``--exclude`` takes them: ``host1,host2``."""
    order = ["ok", "suspect", "avoid", "exclude"]
    return ",".join(r["host"] for r in rows if order.index(r["action"]) >= order.index(at_least))


def explain(row: dict, policy: DrainPolicy = DrainPolicy()) -> str:
    """The evidence behind one host and the arithmetic, in words."""
    lines = [f"{row['host']}: score {row['score']:.3f} -> {row['action']} "
             f"(suspect >= {policy.suspect:g}, avoid >= {policy.avoid:g}, exclude >= {policy.exclude:g}); "
             f"{row['incidents']} incident(s) in {row['attempts_used']} attempt(s) it ran"]
    for e in row["evidence"]:
        gpu = "" if e["gpu"] is None else f" (GPU {e['gpu']})"
        lines.append(f"  {e['job']} attempt {e['attempt']} ({e['started_at']}): rank {e['rank']}{gpu} "
                     f"{e['reason']}, {e['family']} #{e['repeat']}")
        lines.append(
            f"    weight {e['weight']:.4f} = decay 0.5^({e['age_days']} d / {policy.half_life_days:g} d) "
            f"{e['decay']:.4f} x cleared 0.5^({e['clean_attempts_since']} clean / {policy.clean_half_life:g}) "
            f"{e['cleared']:.4f} x share 1/{e['hosts_blamed']} x repeat {e['repeat_factor']:g}"
            + (f" x inferred host {e['inferred_factor']:g}" if e.get("host_inferred") else ""))
    return "\n".join(lines)


def _iso(ns: int | None) -> str | None:
    if ns is None:
        return None
    return datetime.fromtimestamp(ns / 1e9, tz=UTC).isoformat(timespec="seconds")


__all__ = ["DrainPolicy", "drain", "explain", "slurm_exclude"]
