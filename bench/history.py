#!/usr/bin/env python3
"""Synthetic Flight Recorder history: many jobs and attempts over weeks, on a
fleet of hosts, a few of them flaky and a couple of stragglers.

Built on ``synth.write_job`` (one attempt of faithful NCCL "2.10" pickles):

* jobs with 1-4 attempts (restarts), worlds of 8 to 256 ranks (8 per host),
  ``entries`` per rank (2,000 by default), spread over ``weeks`` from
  ``start``: each job starts at its own date and time, each restart 15 min
  to 5 h after the previous attempt started;
* a fixed fleet of hosts (``h-rack<r>-<nn>``, 8 per rack): every attempt runs
  on a random sample of it, so the same hosts recur across jobs. synth names
  hosts ``node-XXXX`` per job; the host folders are renamed to fleet hosts
  (the layout is ``<job>/attempt-<n>/<host>/rank_<r>``; dumps do not carry
  their host, frlake takes it from this folder);
* flaky hosts: when one is in an attempt, with probability ``p_flaky`` the
  attempt hangs with the culprit rank on it (fault ``missing_last``);
  stragglers: when one is in an attempt, with probability ``p_straggler``
  one of its ranks enqueues every op 20-50 ms late (fault ``straggler``);
  every other host causes a background hang or straggle at low rates, so
  most attempts are healthy (an on-demand dump).

Times: synth has no start-time parameter; it draws each attempt's base time
as ``T0_NS + rng.randrange(10**15)`` (a random point in 11.6 days of
2026-09) from a generator seeded by the attempt's seed. We replay that draw
and set ``synth.T0_NS`` for the duration of the call so that the attempt's
first step lands on its planned date: the files are exactly what synth would
write, at no extra cost. The first attempt of every call is checked (one rank
reloaded with a no-globals unpickler); if synth ever draws differently, every
attempt is instead re-timed after the fact (loaded with a no-globals
unpickler, every time shifted, re-pickled with protocol 4), which is slower
but exact as well.

    python bench/history.py OUTDIR --jobs 40 [--seed 1] [--entries 2000] [--weeks 6]
        [--fleet 64] [--flaky H ...] [--stragglers H ...] [--target-entries N]

prints the truth (which hosts are flaky, which straggle, counts) as JSON.
Python: ``write_history(outdir, jobs=40, seed=1)`` returns that truth;
``plan_history(...)`` and ``write_attempts(outdir, plan.attempts)`` let a
caller write the history in batches (bench/bench_reports.py does).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import synth  # noqa: E402
from synth import write_job  # noqa: E402

__all__ = ["AttemptPlan", "History", "plan_history", "write_attempts", "write_history", "fleet_hosts", "truth_summary"]

START = datetime(2026, 10, 1, tzinfo=UTC)
RPH = 8                                    # ranks per host, as synth's default
# world sizes and their weights: mostly small jobs, a few large ones (mean ~42 ranks)
WORLDS = ((8, 30), (16, 25), (32, 20), (64, 12), (128, 8), (256, 5))
ATTEMPTS = ((1, 45), (2, 30), (3, 15), (4, 10))


@dataclass
class AttemptPlan:
    job: str
    attempt: int
    world: int
    seed: int
    start_ns: int                          # the first step of the attempt
    hosts: list[str]                       # fleet host of synth's node-%04d i
    fault: str = "none"                    # none, missing_last, straggler
    culprit: int | None = None             # culprit rank
    culprit_host: str | None = None
    cause: str = "healthy"                 # healthy, flaky, straggler, background


@dataclass
class History:
    fleet: list[str]
    flaky: list[str]
    stragglers: list[str]
    entries_per_rank: int
    start: str
    weeks: int
    seed: int
    attempts: list[AttemptPlan] = field(default_factory=list)

    def entries(self, attempts: list[AttemptPlan] | None = None) -> int:
        return sum(a.world for a in (self.attempts if attempts is None else attempts)) * self.entries_per_rank


def fleet_hosts(n: int, rack_size: int = 8) -> list[str]:
    """``h-rack<r>-<nn>``: ``n`` host names, ``rack_size`` per rack."""
    return [f"h-rack{i // rack_size}-{i % rack_size:02d}" for i in range(n)]


def _pick(rng: random.Random, table) -> int:
    values, weights = zip(*table)
    return rng.choices(values, weights)[0]


def plan_history(*, jobs: int | None = None, target_entries: int | None = None, seed: int = 0,
                 start: datetime = START, weeks: int = 6, fleet: int | list[str] = 64,
                 flaky: list[str] | None = None, stragglers: list[str] | None = None,
                 entries: int = 2000, worlds=WORLDS, attempts=ATTEMPTS,
                 p_flaky: float = 0.35, p_straggler: float = 0.35,
                 background_hang: float = 0.05, background_straggle: float = 0.02,
                 n_flaky: int = 3, n_stragglers: int = 2) -> History:
    """Plan a history (nothing is written): ``jobs`` jobs, or as many as it
    takes to reach ``target_entries`` entries. Deterministic in its arguments."""
    if (jobs is None) == (target_entries is None):
        raise ValueError("give jobs or target_entries")
    rng = random.Random(seed * 7_777_777 + 3)
    hosts = fleet_hosts(fleet) if isinstance(fleet, int) else list(fleet)
    if max(w for w, _ in worlds) // RPH > len(hosts):
        raise ValueError(f"a fleet of {len(hosts)} hosts cannot run a world of {max(w for w, _ in worlds)} ranks")
    shuffled = rng.sample(hosts, len(hosts))
    if flaky is None:
        flaky = sorted(shuffled[:n_flaky])
    if stragglers is None:
        stragglers = sorted(h for h in shuffled[n_flaky:n_flaky + n_stragglers] if h not in flaky)
    for h in list(flaky) + list(stragglers):
        if h not in hosts:
            raise ValueError(f"{h!r} is not a fleet host")
    if start.tzinfo is None:
        start = start.replace(tzinfo=UTC)
    t_lo = int(start.timestamp()) * 10**9
    span = (weeks * 7 - 1) * 86_400 * 10**9   # jobs start in the window's first weeks*7-1 days
    hist = History(fleet=hosts, flaky=list(flaky), stragglers=list(stragglers), entries_per_rank=entries,
                   start=start.isoformat(), weeks=weeks, seed=seed)
    flaky_set, strag_set = set(flaky), set(stragglers)
    j = 0
    while True:
        if jobs is not None and j >= jobs:
            break
        if target_entries is not None and hist.entries() >= target_entries:
            break
        world = _pick(rng, worlds)
        n_att = _pick(rng, attempts)
        name = f"job-{seed:02d}{j:05d}"
        t = t_lo + rng.randrange(span)
        n_hosts = (world + RPH - 1) // RPH
        for k in range(n_att):
            if k:
                t += rng.randrange(15 * 60, 5 * 3600) * 10**9
            att_hosts = rng.sample(hosts, n_hosts)
            plan = AttemptPlan(job=name, attempt=k, world=world, seed=seed * 10_000_000 + j * 10 + k,
                               start_ns=t + rng.randrange(10**9), hosts=att_hosts)
            # flaky hosts present may hang the attempt; stragglers may slow it
            present_flaky = [i for i, h in enumerate(att_hosts) if h in flaky_set]
            present_strag = [i for i, h in enumerate(att_hosts) if h in strag_set]
            hit_flaky = [i for i in present_flaky if rng.random() < p_flaky]
            hit_strag = [i for i in present_strag if rng.random() < p_straggler]
            node = None
            if hit_flaky:
                plan.fault, plan.cause, node = "missing_last", "flaky", rng.choice(hit_flaky)
            elif hit_strag:
                plan.fault, plan.cause, node = "straggler", "straggler", rng.choice(hit_strag)
            else:
                x = rng.random()
                if x < background_hang:
                    plan.fault, plan.cause = "missing_last", "background"
                elif x < background_hang + background_straggle:
                    plan.fault, plan.cause = "straggler", "background"
                if plan.fault != "none":  # a background fault on an ordinary host
                    plain = [i for i, h in enumerate(att_hosts) if h not in flaky_set and h not in strag_set]
                    node = rng.choice(plain or list(range(n_hosts)))
            if node is not None:
                ranks_on = range(node * RPH, min(world, (node + 1) * RPH))
                plan.culprit = rng.choice(list(ranks_on))
                plan.culprit_host = att_hosts[node]
            hist.attempts.append(plan)
        j += 1
    return hist


# ----------------------------------------------------------------------------
# times


def _synth_offset(seed: int) -> int:
    """Replay synth's draw of an attempt's base time: T0_NS + this."""
    rng = random.Random(seed * 1_000_003 + 17)
    rng.randrange(20_000)          # `final` (the number of steps before the buffer)
    return rng.randrange(10**15)   # t0 = T0_NS + this


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} in a FR dump")


def _load(path: Path) -> dict:
    return _PlainUnpickler(io.BytesIO(path.read_bytes())).load()


_TIME_KEYS = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")


def retime_attempt(folder: Path, delta_ns: int) -> None:
    """Shift every time of every dump under ``folder`` by ``delta_ns`` (the
    fallback when synth's base time cannot be set): no-globals load, re-pickle."""
    for p in sorted(folder.rglob("rank_*")):
        d = _load(p)
        for e in d["entries"]:
            for k in _TIME_KEYS:
                if e.get(k):
                    e[k] += delta_ns
        p.write_bytes(pickle.dumps(d, protocol=4))


def _first_time(folder: Path) -> int:
    p = min(folder.rglob("rank_0"), key=str)
    return _load(p)["entries"][0]["time_created_ns"]


_MODE = {"retime": None}  # None: not checked yet; False: set T0_NS; True: re-pickle


def write_attempts(outdir: str | Path, history: History, attempts: list[AttemptPlan] | None = None, *,
                   procs: int | None = None, log=None) -> list[dict]:
    """Write the given planned attempts (default: all) under ``outdir``;
    return synth's truth of each, with the fleet host names."""
    outdir = Path(outdir)
    out = []
    saved = synth.T0_NS
    for a in (history.attempts if attempts is None else attempts):
        t0 = time.perf_counter()
        folder = outdir / a.job / f"attempt-{a.attempt}"
        shutil.rmtree(folder, ignore_errors=True)  # written again: replace it
        retime = _MODE["retime"] is True
        if not retime:
            synth.T0_NS = a.start_ns - _synth_offset(a.seed)
        try:
            truth = write_job(str(outdir), a.world, history.entries_per_rank, job=a.job, attempt=a.attempt,
                              ranks_per_host=RPH, fault=a.fault, culprit=a.culprit, seed=a.seed,
                              fmt="pickle", procs=procs)
        finally:
            synth.T0_NS = saved
        if _MODE["retime"] is None:  # check once that the base time took
            got = _first_time(folder)
            _MODE["retime"] = not (0 <= got - a.start_ns < 60 * 10**9)
            if _MODE["retime"]:
                print("history: synth's base time could not be set; re-timing dumps by re-pickling",
                      file=sys.stderr)
                retime = True
        if retime:
            retime_attempt(folder, a.start_ns - _first_time(folder))
        # synth's node-XXXX -> the fleet's hosts
        for i, h in enumerate(truth["hosts"]):
            os.rename(folder / h, folder / a.hosts[i])
        truth["synth_hosts"], truth["hosts"] = truth["hosts"], list(a.hosts)
        if truth["culprit_rank"] is not None:
            truth["culprit_host"] = a.hosts[truth["culprit_rank"] // RPH]
            assert truth["culprit_host"] == a.culprit_host, (truth["culprit_host"], a.culprit_host)
        truth.pop("groups", None)  # large and the same for every world
        truth.update(start_ns=a.start_ns, cause=a.cause)
        out.append(truth)
        if log:
            log(f"{a.job}#{a.attempt} world {a.world} {a.fault} in {time.perf_counter() - t0:.2f} s")
    return out


def truth_summary(history: History, attempts: list[AttemptPlan] | None = None) -> dict:
    """What a correct report should find in these attempts."""
    att = history.attempts if attempts is None else attempts
    used = Counter(h for a in att for h in a.hosts)
    hangs = Counter(a.culprit_host for a in att if a.fault == "missing_last")
    strag = Counter(a.culprit_host for a in att if a.fault == "straggler")
    rate = {h: round(hangs[h] / used[h], 3) for h in used}
    top = sorted(used, key=lambda h: (-rate[h], -hangs[h], h))
    return {
        "flaky": history.flaky, "stragglers": history.stragglers,
        "jobs": len({a.job for a in att}), "attempts": len(att), "entries": history.entries(att),
        "entries_per_rank": history.entries_per_rank, "fleet": len(history.fleet),
        "window": [history.start, (datetime.fromisoformat(history.start) + timedelta(weeks=history.weeks)).isoformat()],
        "faults": dict(Counter(a.fault for a in att)),
        "causes": dict(Counter(a.cause for a in att)),
        "hang_rate_by_host_top": [{"host": h, "hangs": hangs[h], "attempts": used[h], "rate": rate[h]} for h in top[:8]],
        "flaky_hangs": {h: f"{hangs[h]}/{used[h]}" for h in history.flaky},
        "straggler_attempts": {h: strag[h] for h in history.stragglers},
        "background_straggler_hosts": sorted(h for h in strag if h not in history.stragglers),
    }


def write_history(outdir: str | Path, *, jobs: int | None = None, seed: int = 0, start: datetime = START,
                  weeks: int = 6, fleet: int | list[str] = 64, flaky: list[str] | None = None,
                  stragglers: list[str] | None = None, entries: int = 2000, target_entries: int | None = None,
                  procs: int | None = None, **plan_kw) -> dict:
    """Write a whole history under ``outdir``; return its truth summary."""
    hist = plan_history(jobs=jobs, target_entries=target_entries, seed=seed, start=start, weeks=weeks,
                        fleet=fleet, flaky=flaky, stragglers=stragglers, entries=entries, **plan_kw)
    write_attempts(outdir, hist, procs=procs)
    return truth_summary(hist)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Write a synthetic FR history (many jobs, a fleet, flaky hosts).")
    ap.add_argument("outdir")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--target-entries", type=float, default=None, help="plan jobs until this many entries")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", default="2026-10-01")
    ap.add_argument("--weeks", type=int, default=6)
    ap.add_argument("--fleet", type=int, default=64)
    ap.add_argument("--flaky", nargs="*", default=None)
    ap.add_argument("--stragglers", nargs="*", default=None)
    ap.add_argument("--entries", type=int, default=2000, help="entries per rank")
    ap.add_argument("--procs", type=int, default=None)
    a = ap.parse_args(argv)
    if a.jobs is None and a.target_entries is None:
        a.jobs = 20
    t = time.perf_counter()
    truth = write_history(a.outdir, jobs=a.jobs, seed=a.seed, start=datetime.fromisoformat(a.start),
                          weeks=a.weeks, fleet=a.fleet, flaky=a.flaky, stragglers=a.stragglers, entries=a.entries,
                          target_entries=None if a.target_entries is None else int(a.target_entries), procs=a.procs)
    print(json.dumps(truth))
    print(f"wrote {truth['attempts']} attempts of {truth['jobs']} jobs, {truth['entries']:,} entries "
          f"in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
