"""Each host's clock offset, estimated from the dumps themselves.

Every timestamp in a dump is read from its own host's clock, and hosts' clocks disagree (by milliseconds
to seconds on real fleets). One host 1.5 s ahead makes all its ranks look 1.5 s late to every collective,
and a real straggler elsewhere disappears in that lateness. A clock domain is a host (a rank of unknown
host is a domain of its own); a domain's offset ``s`` is what its times read more than the attempt's
common clock.

Two things in the dumps bound it, and both are used:

* **Causality.** A collective completes only after every member joined it, so a member's *done* time for
  a collective (the watchdog's ``time_discovered_completed_ns`` where the recorder kept it; on gloo, whose
  collectives run on the calling thread, the rank's next call) comes after every member's arrival
  (``time_created_ns``). Against the other domains, each collective bounds ``s`` from both sides
  (``lo``: its latest arrival minus the others' earliest done; ``hi``: its earliest done minus the others'
  latest arrival); over the collectives, the tightest of each that several collectives give (``OUTLIERS``)
  bound it.
* **Alignment.** The members of one collective finish it together, so their done times agree but for the
  time each spends before its next call: a domain's offset is estimated as the median, over its
  collectives, of its done time minus the median of every domain's (iterated until it settles), with the
  robust spread of those deviations.

A domain is corrected, by its alignment estimate kept inside ``[lo, hi]``, when causality demands it: when an
unshifted clock would have the others finish collectives before it arrived, or it finish before they did, by
more than MIN_SHIFT_NS (0 that far outside ``[lo, hi]``: nearer, it is the hosts' own jitter, and a
straggler's host, whose lateness the others' done times barely cover, would be corrected for its rank's
slowness). Or when it completes none of its collectives (others are still on their way when it arrives) and
its estimate is clear of its spread: late or early, it costs nobody anything, and its lateness
would only blur whose lateness does. A rank that is late because it *is* slow (a straggler) breaks
no causality (the others wait for it), so its lateness is never corrected away; a host whose skew is
smaller than the gaps between its collectives cannot be told from a slow one, and is not corrected. Each
estimate is shown with its spread and bounds (:class:`ClockOffset`), corrected or not.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import numpy as np

from frlake.query.vocabulary import Relations

# A bound is as tight as its tightest collectives (where the domain truly arrived last, or finished first), but
# not one stray: the k-th tightest, k this share of the domain's collectives and at least MIN_COLLECTIVES
OUTLIERS = 0.05
ROUNDS = 20  # alignment rounds, at most
SETTLED_NS = 100_000  # 0.1 ms: alignment rounds stop when no domain moves by more
MIN_COLLECTIVES = 3  # a domain is bounded only by this many collectives shared with other domains
MIN_SHIFT_NS = 1_000_000  # 1 ms: a clock nearer than this to the others' is left as it is ...
CONSISTENT = 5.0  # ... and one whose estimate is less than this many robust sds of its own deviations

SAMPLE = 64  # the instances of a group the estimate reads, at most (evenly spread over its sequence)

# Each rank's clock domain, numbered as the offsets are listed: hosts by name, then ranks of unknown host.
DOMAINS = """
    SELECT rank, host, dense_rank() OVER (ORDER BY host IS NULL, coalesce(host, '#' || rank::VARCHAR)) - 1 AS dom
    FROM {dumps}
"""
# The calls the estimate reads: of the groups whose members have more than one clock, every ``step``-th
# sequence id (at most about SAMPLE instances of each, evenly spread): the offsets are medians and quantiles,
# which a few hundred collectives settle as well as all of them (at 16,384 ranks, all of them are 16M calls).
# A call's done time is the watchdog's completion, else, where collectives block (``sync``), the rank's next
# entry (NEXT_CALLS: read only for the calls that need it), unless that is one more op of the same coalesced block.
SAMPLED_CALLS = """
    WITH step AS (SELECT unnest($groups) AS pg_name, unnest($steps) AS step, generate_subscripts($groups, 1) - 1 AS g)
    SELECT c.rank, step.g, c.seq, c.entry_index, c.t, nullif(c.t_done, 0) AS done,
           c.sync AND coalesce(c.t_done, 0) = 0 AS needs_next
    FROM {late} c JOIN step USING (pg_name) WHERE c.seq % step.step = 0
"""
NEXT_CALLS = """
    WITH want AS (SELECT unnest($ranks) AS rank, unnest($entries) AS entry_index, unnest($groups) AS pg_name,
                         unnest($seqs) AS seq, generate_subscripts($ranks, 1) - 1 AS row)
    SELECT w.row, n.t FROM want w JOIN {entries} n ON n.rank = w.rank AND n.entry_index = w.entry_index + 1
    WHERE n.is_p2p OR n.pg_name IS DISTINCT FROM w.pg_name OR n.seq IS DISTINCT FROM w.seq
"""

@dataclass
class ClockOffset:
    """One clock domain's estimate: ``host`` (None for a rank of unknown host, named by ``ranks``)."""

    host: str | None
    ranks: list[int]
    offset_ms: float  # the alignment estimate: how much its clock reads ahead of the attempt's
    spread_ms: float  # the robust standard deviation of its collectives' deviations
    lo_ms: float | None  # causality: the offset is at least this ...
    hi_ms: float | None  # ... and at most this (None: too few collectives shared with other domains)
    collectives: int
    corrected_ms: float = 0.0  # what the lateness was corrected by (0: left as it was)

    @property
    def corrected(self) -> bool:
        return self.corrected_ms != 0.0


@dataclass
class Clocks:
    offsets: list[ClockOffset]  # every domain's, by host (ranks of unknown host last)
    basis: str  # what a done time is: "completion" (the watchdog's), "next call" (gloo) or "" (none known)

    def by_rank(self) -> dict[int, int]:
        """rank -> the nanoseconds to take from its times (only of corrected domains)."""
        return {r: round(o.corrected_ms * 1e6) for o in self.offsets if o.corrected for r in o.ranks}

    def to_dict(self) -> dict:
        corrected = [o for o in self.offsets if o.corrected]
        largest = max(self.offsets, key=lambda o: (abs(o.offset_ms), o.host or ""), default=None)
        return {"basis": self.basis, "domains": len(self.offsets),
                "corrected": [_row(o) for o in corrected],
                "largest": _row(largest) if largest is not None and not largest.corrected else None}


def _row(o: ClockOffset) -> dict:
    return {"host": o.host, "ranks": o.ranks, "offset_ms": o.offset_ms, "spread_ms": o.spread_ms,
            "lo_ms": o.lo_ms, "hi_ms": o.hi_ms, "collectives": o.collectives, "corrected_ms": o.corrected_ms}


def estimate(con: duckdb.DuckDBPyConnection, rel: Relations, late: str) -> Clocks:
    """The attempt's clock domains and their offsets (see the module's docstring), from its relations and its
    calls' lateness (``late``: frlake.diagnose.straggler's LATENESS)."""
    names: dict[int, tuple[str | None, list[int]]] = {}
    of_rank: dict[int, int] = {}
    for rank, host, d in con.execute(f"SELECT * FROM ({DOMAINS.format(dumps=rel.dumps)}) ORDER BY rank").fetchall():
        names.setdefault(d, (host, []))[1].append(rank)
        of_rank[rank] = d
    if len(names) < 2:
        return Clocks([], "")
    # the groups whose members have more than one clock, and how many instances each has
    seen: dict[str, set[int]] = {}
    for rank, pg in con.execute(f"SELECT rank, pg_name FROM {rel.rank_groups} WHERE NOT is_p2p").fetchall():
        if rank in of_rank:
            seen.setdefault(pg, set()).add(of_rank[rank])
    sizes = con.execute(f"SELECT pg_name, count(*) FROM {rel.instances} GROUP BY pg_name ORDER BY pg_name").fetchall()
    spanning = [(pg, n) for pg, n in sizes if len(seen.get(pg, ())) > 1]
    if not spanning:
        return Clocks([], "")
    groups = [pg for pg, _ in spanning]
    calls = con.execute(SAMPLED_CALLS.format(late=late),
                        {"groups": groups, "steps": [-(-n // SAMPLE) for _, n in spanning]}).fetchnumpy()
    if len(calls["rank"]) == 0:
        return Clocks([], "")
    done = np.ma.asarray(calls["done"]).astype(np.float64).filled(np.nan)
    completion = ~np.isnan(done)
    wanted = np.flatnonzero(np.asarray(calls["needs_next"], dtype=bool))
    if len(wanted):
        nxt = con.execute(NEXT_CALLS.format(entries=rel.entries),
                          {"ranks": calls["rank"][wanted].tolist(), "entries": calls["entry_index"][wanted].tolist(),
                           "groups": [groups[g] for g in calls["g"][wanted]],
                           "seqs": calls["seq"][wanted].tolist()}).fetchnumpy()
        done[wanted[nxt["row"].astype(np.int64)]] = nxt["t"].astype(np.float64)
    dom_of = np.full(max(of_rank) + 1, -1, dtype=np.int64)
    dom_of[list(of_rank)] = list(of_rank.values())
    dom, inst, last, done = _per_domain(dom_of[calls["rank"].astype(np.int64)], calls["g"].astype(np.int64),
                                        calls["seq"].astype(np.int64), calls["t"].astype(np.float64), done)
    shared = np.bincount(inst)[inst] > 1  # a collective of one domain bounds nothing
    has_done = ~np.isnan(done)
    basis = "" if not has_done.any() else "completion" if completion.any() else "next call"
    n = len(names)
    aligned, spread = _align(dom, inst, done, shared & has_done, n)
    # the gate: each domain against the others at their current correction (first their estimates), until no
    # domain changes its mind
    corrected = aligned.copy()
    for _ in range(4):
        lo, hi, count, last_share = _bounds(dom, inst, last, done, shared & has_done, corrected, n)
        bounded = (count >= MIN_COLLECTIVES) & (lo <= hi)
        demanded = bounded & ((lo > MIN_SHIFT_NS) | (hi < -MIN_SHIFT_NS))
        # a clock whose collectives it never completes (others are still on their way when it arrives), whose
        # done times are its estimate off on every collective: late or early it costs nobody anything, and its
        # lateness would only blur whose lateness does
        bystander = (bounded & (lo <= aligned) & (aligned <= hi) & (last_share <= OUTLIERS)
                     & (np.abs(aligned) >= MIN_SHIFT_NS) & (np.abs(aligned) >= CONSISTENT * spread))
        decided = np.where(demanded, np.clip(aligned, lo, np.maximum(lo, hi)), np.where(bystander, aligned, 0.0))
        if np.array_equal(decided, corrected):
            break
        corrected = decided
    offsets = [ClockOffset(host=names[i][0], ranks=names[i][1],
                           offset_ms=_ms(aligned[i]), spread_ms=_ms(spread[i]),
                           lo_ms=_ms(lo[i]) if count[i] >= MIN_COLLECTIVES else None,
                           hi_ms=_ms(hi[i]) if count[i] >= MIN_COLLECTIVES else None,
                           collectives=int(count[i]), corrected_ms=_ms(corrected[i]))
               for i in range(n)]
    return Clocks(offsets, basis)


def _per_domain(dom, g, seq, t, done) -> tuple[np.ndarray, ...]:
    """Per clock domain and collective instance (group ``g``'s sequence id ``seq``, numbered 0 .. in that
    order), ordered by both: the domain, the instance, its members' last arrival and their earliest done time."""
    _, inst = np.unique(g * (int(seq.max()) + 1) + seq, return_inverse=True)
    order = np.lexsort((inst, dom))
    key = (dom * (int(inst.max()) + 1) + inst)[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    return (dom[order][starts], inst[order][starts], np.maximum.reduceat(t[order], starts),
            np.fmin.reduceat(done[order], starts))


def _ms(ns: float) -> float:
    return round(float(ns) / 1e6, 3) if np.isfinite(ns) else 0.0


def _by_domain(d: np.ndarray, n: int, *columns: np.ndarray) -> list[list[np.ndarray]]:
    """Each column's values split by domain (0 .. n - 1): one pass, not one per domain."""
    order = np.argsort(d, kind="stable")
    cuts = np.searchsorted(d[order], np.arange(1, n))
    return [np.split(c[order], cuts) for c in columns]


def _align(dom, inst, done, use, n) -> tuple[np.ndarray, np.ndarray]:
    """Each domain's offset by alignment: the median deviation of its done times from their collective's
    median, iterated on the corrected times until no domain moves by more than SETTLED_NS, centred on the
    median domain; and the spread of its deviations there (1.4826 x their median absolute deviation)."""
    s, spread = np.zeros(n), np.zeros(n)
    if not use.any():
        return s, spread
    d, i, t = dom[use], inst[use], done[use]
    present = np.bincount(d, minlength=n) > 0
    for _ in range(ROUNDS):
        step = _medians(d, t - s[d] - _group_median(i, t - s[d]), n)
        s += step
        if np.max(np.abs(step)) < SETTLED_NS:
            break
    deviation = t - s[d] - _group_median(i, t - s[d])
    spread = np.where(present, 1.4826 * _medians(d, np.abs(deviation - _medians(d, deviation, n)[d]), n), 0.0)
    return s - np.median(s), spread


def _bounds(dom, inst, last, done, use, s, n) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Causality's bounds on each domain's offset, the others' times corrected by ``s``: ``lo`` (its latest
    arrival minus the others' earliest done) and ``hi`` (its earliest done minus the others' latest
    arrival), each its k-th tightest over its collectives (OUTLIERS), how many collectives gave them, and the
    share of them it arrived last to."""
    lo, hi, count = np.full(n, -np.inf), np.full(n, np.inf), np.zeros(n, dtype=np.int64)
    last_share = np.ones(n)
    if not use.any():
        return lo, hi, count, last_share
    d, i = dom[use], inst[use]
    last_c, done_c = last[use] - s[d], done[use] - s[d]
    others_done = _others(i, done_c, largest=False)
    others_last = _others(i, last_c, largest=True)
    lo_i = last[use] - others_done
    hi_i = done[use] - others_last
    arrived_last = (last[use] >= others_last).astype(np.float64)
    for k, (los, his, lasts) in enumerate(zip(*_by_domain(d, n, lo_i, hi_i, arrived_last))):
        count[k] = len(los)
        last_share[k] = float(lasts.mean()) if len(lasts) else 1.0
        if count[k] >= MIN_COLLECTIVES:
            keep = max(MIN_COLLECTIVES, round(OUTLIERS * count[k])) - 1
            lo[k] = np.partition(los, len(los) - 1 - keep)[len(los) - 1 - keep]
            hi[k] = np.partition(his, keep)[keep]
    return lo, hi, count, last_share


def _sorted_groups(groups: np.ndarray, key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The rows' order by group, then ``key``; where each group starts in it, and its size."""
    if len(groups) and groups.max() < 1 << 16:  # the same order, by numpy's radix sort of 16-bit keys (4x faster)
        by_key = np.argsort(key)
        order = by_key[np.argsort(groups[by_key].astype(np.uint16), kind="stable")]
    else:
        order = np.lexsort((key, groups))
    g = groups[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    return order, g, starts, np.diff(np.r_[starts, len(g)])


def _group_median(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per row, the median of ``values`` over the rows of its group."""
    order, _, starts, counts = _sorted_groups(groups, values)
    v = values[order]
    median = (v[starts + (counts - 1) // 2] + v[starts + counts // 2]) / 2
    out = np.empty(len(values))
    out[order] = np.repeat(median, counts)
    return out


def _medians(groups: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """The median of ``values`` in each group 0 .. n - 1 (0 for a group of no rows)."""
    order, g, starts, counts = _sorted_groups(groups, values)
    v = values[order]
    out = np.zeros(n)
    out[g[starts]] = (v[starts + (counts - 1) // 2] + v[starts + counts // 2]) / 2
    return out


def _others(groups: np.ndarray, values: np.ndarray, largest: bool) -> np.ndarray:
    """Per row, the largest (or smallest) of ``values`` over the *other* rows of its group."""
    order, g, starts, counts = _sorted_groups(groups, -values if largest else values)
    v = values[order]
    best = v[starts]
    second = np.where(counts > 1, v[np.minimum(starts + 1, len(g) - 1)], np.nan)
    first = np.zeros(len(g), dtype=bool)
    first[starts] = True
    out_sorted = np.where(first, np.repeat(second, counts), np.repeat(best, counts))
    out = np.empty(len(values))
    out[order] = out_sorted
    return out
