"""False stragglers: real healthy torch jobs must never name a host.

    python bench/bench_false_positives.py [--healthy 100] [--stragglers 5] [--busy 0] [--jitter 0]
                                          [--clock-skew 0] [--workdir DIR]

Runs real 8-rank gloo jobs with torch (tests/fixtures/genuine/make_genuine.py: a 2-D mesh, TP all_gather,
DP all_reduce and world all_reduce, 20 steps), each writing its dumps as torch returns them: ``--healthy``
healthy jobs (the machine's own jitter: 8 processes on this machine's cores) and ``--stragglers`` jobs where
one rank (a different one each time) sleeps 0.3 s before each of its collectives. Every job is ingested
into one lake and diagnosed, and each attempt is diagnosed twice in one run: by the rule of today, and by
the rule before the share of the job's time was required (``MIN_SHARE = 0``), side by side.

``--clock-skew S``: each host's clock reads off by a random offset of up to S seconds either way (uniform,
one per host and job, seeded): every timestamp in its ranks' dumps is moved by it before the ingest, as a
host whose clock disagrees writes them. Then a third rule is weighed beside: today's without the clock
correction (``CORRECT_CLOCKS = False``).

Prints the counts and writes bench/results/false_positives.json. Floors: 0 stragglers among the healthy
jobs, every injected straggler found (its rank and host).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
GENERATOR = ROOT / "tests" / "fixtures" / "genuine" / "make_genuine.py"


def _generator():
    """The fixtures' generator, imported by its name from its folder (its spawned ranks import it so too)."""
    sys.path.insert(0, str(GENERATOR.parent))
    return importlib.import_module(GENERATOR.stem)


def _burn(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def run_jobs(work: Path, healthy: int, stragglers: int, busy: int, jitter: float = 0.0) -> list[dict]:
    """Run the jobs, one at a time, with ``busy`` processes burning CPU beside them (a node shared with
    other work); returns what each is (job, the injected straggler or None)."""
    import multiprocessing as mp

    gen = _generator()
    stop = mp.get_context("spawn").Event()
    burners = [mp.get_context("spawn").Process(target=_burn, args=(stop,), daemon=True) for _ in range(busy)]
    for b in burners:
        b.start()
    try:
        return _run(gen, work, healthy, stragglers, jitter)
    finally:
        stop.set()
        for b in burners:
            b.join(5)


def _run(gen, work: Path, healthy: int, stragglers: int, jitter: float) -> list[dict]:
    jobs = []
    for i in range(healthy + stragglers):
        sick = i >= healthy
        culprit = (i - healthy) % 8 if sick else None
        job = f"{'straggler' if sick else 'healthy'}-{i:03d}"
        started = time.perf_counter()
        res = gen.run_job(str(work), "straggler" if sick else "mesh_healthy_jitter", job=job, fault=sick, seed=i,
                          culprit=culprit if sick else None, jitter=jitter)
        jobs.append({"job": job, "culprit": culprit, "exitcodes": res["exitcodes"],
                     "seconds": round(time.perf_counter() - started, 1)})
        print(f"  {job}: ran in {jobs[-1]['seconds']} s", flush=True)
    return jobs


TIMES = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")


def skew_clocks(work: Path, jobs: list[dict], most: float) -> None:
    """Move every timestamp of each host's dumps by its clock's offset (up to ``most`` seconds either way)."""
    import pickle
    import random

    for i, j in enumerate(jobs):
        rng = random.Random(f"clock-{i}")
        j["clock_offsets_s"] = {}
        for host in sorted((work / j["job"] / "attempt-0").iterdir()):
            offset = rng.uniform(-most, most)
            j["clock_offsets_s"][host.name] = round(offset, 3)
            for path in sorted(host.iterdir()):
                if path.name.endswith(".json"):
                    dump = json.loads(path.read_text())
                else:
                    dump = pickle.loads(path.read_bytes())  # the bench's own dumps, just written by torch
                for entry in dump.get("entries", []):
                    for key in TIMES:
                        if entry.get(key):
                            entry[key] += round(offset * 1e9)
                if path.name.endswith(".json"):
                    path.write_text(json.dumps(dump))
                else:
                    path.write_bytes(pickle.dumps(dump))


def judge(settings, jobs: list[dict], min_share: float, correct_clocks: bool = True) -> dict:
    """Every job's verdict by the straggler rule with ``min_share`` (and the clock correction or not)."""
    from frlake.diagnose import straggler
    from frlake.session import Frlake

    saved = straggler.MIN_SHARE, straggler.CORRECT_CLOCKS
    straggler.MIN_SHARE, straggler.CORRECT_CLOCKS = min_share, correct_clocks
    try:
        out = {}
        with Frlake(settings) as session:
            for j in jobs:
                d = session.diagnose(j["job"], 0, store=False)
                root = d.root
                out[j["job"]] = {"verdict": d.verdict.value, "rank": root.rank if root else None,
                                 "host": root.host if root else None, "p_value": root.p_value if root else None,
                                 "lateness_ms": root.lateness_ms if root else None, "summary": d.summary,
                                 "clocks_corrected": [(c["host"], c["corrected_ms"])
                                                      for c in (d.clocks or {}).get("corrected", [])]}
        return out
    finally:
        straggler.MIN_SHARE, straggler.CORRECT_CLOCKS = saved


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--healthy", type=int, default=100)
    ap.add_argument("--stragglers", type=int, default=5)
    ap.add_argument("--busy", type=int, default=0, help="processes burning CPU beside the jobs (a shared node)")
    ap.add_argument("--jitter", type=float, default=0.0,
                    help="every rank sleeps up to this many seconds (uniform) before each step: ordinary jitter")
    ap.add_argument("--clock-skew", type=float, default=0.0,
                    help="each host's clock off by a random offset of up to this many seconds either way")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--results", type=Path, default=HERE / "results" / "false_positives.json")
    a = ap.parse_args()
    # frlake is imported here, not at the top: the jobs' ranks are spawned processes, which import this
    # module again
    from frlake.config import Settings
    from frlake.diagnose import straggler
    from frlake.ingest import IngestOptions
    from frlake.session import Frlake

    work = a.workdir or Path(tempfile.mkdtemp(prefix="frlake-fp-"))
    dumps, lake = work / "dumps", work / "lake"
    dumps.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    jobs = run_jobs(dumps, a.healthy, a.stragglers, a.busy, a.jitter)
    if a.clock_skew:
        skew_clocks(dumps, jobs, a.clock_skew)
    settings = Settings.resolve(lake)
    with Frlake(settings) as session:
        summary = session.ingest([dumps], IngestOptions(workers=1))
    assert summary.rejected == 0, summary.rejected_files
    rules = {"today": judge(settings, jobs, straggler.MIN_SHARE), "before (no share)": judge(settings, jobs, 0.0)}
    if a.clock_skew:
        rules["no clock correction"] = judge(settings, jobs, straggler.MIN_SHARE, correct_clocks=False)
    hosts = {j["job"]: f"host-{'abcd'[j['culprit'] // 2]}" for j in jobs if j["culprit"] is not None}
    report = {"healthy_jobs": a.healthy, "straggler_jobs": a.stragglers, "busy": a.busy, "jitter_s": a.jitter,
              "clock_skew_s": a.clock_skew,
              "seconds": round(time.perf_counter() - started),
              "jobs": jobs, "rules": {}}
    print(f"\n{a.healthy} healthy and {a.stragglers} straggler jobs (8 ranks, 20 steps, real torch gloo; "
          f"{a.busy} processes burning CPU beside them; each rank up to {a.jitter * 1000:g} ms late to each step; "
          f"each host's clock up to {a.clock_skew:g} s off)")
    for name, verdicts in rules.items():
        healthy = [j for j in jobs if j["culprit"] is None]
        sick = [j for j in jobs if j["culprit"] is not None]
        false = [j["job"] for j in healthy if verdicts[j["job"]]["verdict"] != "healthy"]
        found = [j["job"] for j in sick if verdicts[j["job"]]["verdict"] == "straggler"
                 and verdicts[j["job"]]["rank"] == j["culprit"] and verdicts[j["job"]]["host"] == hosts[j["job"]]]
        report["rules"][name] = {"false_positives": false, "stragglers_found": found, "verdicts": verdicts}
        print(f"  rule {name:<18} healthy jobs called otherwise: {len(false)} of {len(healthy)}; "
              f"stragglers found: {len(found)} of {len(sick)}")
        for job in false:
            print(f"    {verdicts[job]['summary']}")
        for j in sick:
            if j["job"] not in found:
                print(f"    missed: {verdicts[j['job']]['summary']}")
    a.results.parent.mkdir(parents=True, exist_ok=True)
    a.results.write_text(json.dumps(report, indent=1) + "\n")
    print(f"written: {a.results}")


if __name__ == "__main__":
    main()
