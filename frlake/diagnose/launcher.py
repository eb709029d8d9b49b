"""What the fleet's other sources say of an attempt: the hosts its host maps name (and where they disagree),
and how the workers its launcher saw fail died (frlake.ingest.hostmaps reads both).

A dump's host comes from its place (a host folder, ``--hosts``) or, failing that, the first host map by
precedence; a map attached later (``frlake hosts attach``) fills the hosts still unknown. Where two sources
name different hosts for one rank, the diagnosis names both and says which it used: never a silent pick."""

from __future__ import annotations

from datetime import UTC, datetime

from frlake.entities import exit_words, signal_name

TIME_FORMAT = "%Y-%m-%d_%H:%M:%S"  # torchelastic's failure summary (its local time, without the zone)

def died(failure: dict) -> str:
    """One failed worker in words: "died: exit -9 (SIGKILL; ...) at 2024-01-01_12:03:11"."""
    when = f" at {failure['time']} (the launcher's clock)" if failure.get("time") else ""
    return f"died: {exit_words(failure.get('exitcode'), failure.get('message'))}{when}"


def seconds_before(failed_at: str | None, later_ns: int | None) -> float | None:
    """How many seconds ``failed_at`` (the launcher's "2024-01-01_12:03:11", read as UTC) came before
    ``later_ns``; None when either is unknown or unreadable."""
    if not failed_at or later_ns is None:
        return None
    try:
        at = datetime.strptime(failed_at, TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None
    return later_ns / 1e9 - at.timestamp()


def failures_of(failures: list[dict]) -> list[dict]:
    """The launcher's failures as the diagnosis shows them: one per rank (a root cause first), with words."""
    by_rank: dict[int, dict] = {}
    for f in sorted(failures, key=lambda f: (f["rank"], not f.get("root_cause"), f.get("path") or "")):
        by_rank.setdefault(f["rank"], f)
    out = []
    for rank in sorted(by_rank):
        f = by_rank[rank]
        out.append({k: v for k, v in {
            "rank": rank, "local_rank": f.get("local_rank"), "host": f.get("host"), "exitcode": f.get("exitcode"),
            "signal": signal_name(f.get("exitcode")), "time": f.get("time"), "error_file": f.get("error_file"),
            "message": f.get("message"), "root_cause": bool(f.get("root_cause")), "source": f.get("path"),
            "words": died(f)}.items() if v is not None})
    return out


def hosts_from_claims(hosts: dict[int, str | None], claims: list[dict]) -> tuple[dict[int, str | None], dict[int, str]]:
    """The dumped ranks' hosts with the unknown ones filled from the claims (by precedence, the first per
    rank), and which were so filled: rank -> the source that named it."""
    filled: dict[int, str] = {}
    out = dict(hosts)
    for c in claims:  # by rank, precedence, path (catalog.dumps.host_claims)
        if c["rank"] in out and out[c["rank"]] is None:
            out[c["rank"]] = c["host"]
            filled[c["rank"]] = c["source"]
    return out, filled


def by_rank(claims: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for c in claims:
        out.setdefault(c["rank"], []).append(c)
    return out


def source_of(rank: int, host: str | None, claims: list[dict], filled: dict[int, str]) -> str:
    """Where a rank's host came from: the claim that filled it, else the first of its claims (``claims``, by
    precedence) that names the same host (the ingest stored that map's host), else the dump's place (its
    folder, --hosts)."""
    if rank in filled:
        return filled[rank]
    return next((c["source"] for c in claims if c["host"] == host), "dump's place")


def disputes(hosts: dict[int, str | None], ranks: dict[int, list[dict]], filled: dict[int, str]) -> list[dict]:
    """The ranks whose sources (``ranks``: each rank's claims, :func:`by_rank`) name more than one host:
    [{"rank", "host" (the one used), "used" (its source), "claims": [{"host", "source", "path"}]}]."""
    out = []
    for rank in sorted(ranks):
        used = hosts.get(rank)
        named = {c["host"] for c in ranks[rank]} | ({used} if used else set())
        if len(named) > 1:
            out.append({"rank": rank, "host": used, "used": source_of(rank, used, ranks[rank], filled),
                        "claims": [{"host": c["host"], "source": c["source"], "path": c["path"]}
                                   for c in ranks[rank]]})
    return out


def dispute_note(found: list[dict], most: int = 3) -> str | None:
    if not found:
        return None
    parts = []
    for d in found[:most]:
        others = ", ".join(f"{c['source']} says {c['host']}" for c in d["claims"] if c["host"] != d["host"])
        parts.append(f"rank {d['rank']}: {d['host'] or 'host unknown'} from {d['used']}, but {others}")
    more = f" (and {len(found) - most} more ranks)" if len(found) > most else ""
    return "the host sources disagree: " + "; ".join(parts) + more
