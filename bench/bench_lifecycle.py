#!/usr/bin/env python3
"""A lake to live with for years (issue 12): what compaction buys, and
whether ingest's cost grows with the lake.

Part 1, small files: a lake built by many small ingests of bench/history.py
data (one batch per dump, the worst case of a cron every few minutes) until
it holds ``--small-files`` Parquet files; then view set-up (a DuckDB
connection with every view), each report and a typical query, before and
after ``compact``.

Part 2, history: a no-op re-scan and a one-attempt ingest (with its
diagnosis) on a fresh lake and on a lake of ``--attempts`` attempts.

    python bench/bench_lifecycle.py [--small-files 20000] [--attempts 10000] [--repeat 3]

writes bench/results/lifecycle.json. Run it on a quiet machine: these
timings are small, and a shared machine's noise is of their size.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from history import plan_history, write_attempts  # noqa: E402

from frlake.config import Settings  # noqa: E402
from frlake.ingest import IngestOptions  # noqa: E402
from frlake.query.reports import REPORTS  # noqa: E402
from frlake.session import Frlake  # noqa: E402
from frlake.storage.compact import CompactOptions  # noqa: E402
from frlake.storage.files import LakeFiles  # noqa: E402

QUERY = "SELECT op, count(*) AS n, avg(duration_ms) AS ms FROM entries WHERE job = '{job}' GROUP BY op ORDER BY n DESC"


def timed(fn, repeat: int) -> float:
    """The median of ``repeat`` runs, in seconds."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 4)


def read_figures(settings: Settings, job: str, repeat: int) -> dict:
    out = {}
    with Frlake(settings) as fl:
        out["view_setup_s"] = timed(lambda: fl.connect().close(), repeat)
        for name in REPORTS:
            out[f"report_{name}_s"] = timed(lambda name=name: fl.report(name), repeat)
        con = fl.connect()
        out["query_s"] = timed(lambda: con.execute(QUERY.format(job=job)).fetchall(), repeat)
        out["files"] = len(LakeFiles(fl.catalog).committed())
    return out


def small_files(work: Path, target_files: int, repeat: int) -> dict:
    dumps = work / "small"
    hist = plan_history(jobs=target_files // 30 + 8, seed=12, entries=100, worlds=((8, 1),),
                        attempts=((1, 1),))
    write_attempts(dumps, hist)
    settings = Settings.resolve(work / "small-lake")
    jobs = sorted(p for p in dumps.iterdir() if p.is_dir())
    started = time.perf_counter()
    runs = 0
    with Frlake(settings) as fl:
        for i in range(0, len(jobs), 4):  # a small ingest of four new jobs at a time, a batch per dump
            fl.ingest(jobs[i:i + 4], IngestOptions(chunk_files=1, compact_min_files=None, workers=1))
            runs += 1
            if len(LakeFiles(fl.catalog).committed()) >= target_files:
                break
    build_s = time.perf_counter() - started
    job = jobs[0].name
    before = read_figures(settings, job, repeat)
    with Frlake(settings) as fl:
        t = time.perf_counter()
        summary = fl.compact(options=CompactOptions(retire_grace_s=0))
        compact_s = time.perf_counter() - t
    after = read_figures(settings, job, repeat)
    return {"ingest_runs": runs, "build_s": round(build_s, 1), "compact_s": round(compact_s, 2),
            "compacted": summary.to_dict() | {"merged": len(summary.merged)}, "before": before, "after": after}


def history_cost(work: Path, attempts: int, repeat: int) -> dict:
    dumps = work / "history"
    one = work / "one"
    hist = plan_history(jobs=attempts + 1, seed=13, entries=50, worlds=((8, 1),), attempts=((1, 1),))
    write_attempts(dumps, hist)
    probe = sorted(p for p in dumps.iterdir() if p.is_dir())[-1]
    shutil.move(str(probe), one / probe.name)
    out = {}
    for label, n in (("fresh", 0), ("big", attempts)):
        settings = Settings.resolve(work / f"lake-{label}")
        with Frlake(settings) as fl:
            if n:
                t = time.perf_counter()
                fl.ingest([dumps], IngestOptions(workers=2, chunk_files=256))
                out["build_s"] = round(time.perf_counter() - t, 1)
            # the one-attempt ingest, then it again (a no-op re-scan), each timed in a fresh copy of the probe
            times, rescans = [], []
            for k in range(repeat):
                folder = work / f"probe-{label}-{k}" / f"{probe.name}-{k}"
                shutil.copytree(one / probe.name, folder)
                t = time.perf_counter()
                s = fl.ingest([folder])
                times.append(time.perf_counter() - t)
                assert s.ingested == 8, s
                t = time.perf_counter()
                s = fl.ingest([folder])
                rescans.append(time.perf_counter() - t)
                assert s.unchanged == 8, s
            out[label] = {"attempts": len(fl.catalog.attempts.keys()), "files": len(LakeFiles(fl.catalog).committed()),
                          "one_attempt_ingest_s": round(statistics.median(times), 4),
                          "noop_rescan_s": round(statistics.median(rescans), 4)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small-files", type=int, default=20_000)
    ap.add_argument("--attempts", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "lifecycle.json"))
    ap.add_argument("--skip", choices=["small", "history"], action="append", default=[])
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="frlake-lifecycle-"))
    results = {"small_files_target": args.small_files, "attempts_target": args.attempts}
    try:
        if "small" not in args.skip:
            results["small_files"] = small_files(work, args.small_files, args.repeat)
            print(json.dumps(results["small_files"], indent=2), flush=True)
        if "history" not in args.skip:
            results["history"] = history_cost(work, args.attempts, args.repeat)
            print(json.dumps(results["history"], indent=2), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
