"""The fleet reports on DuckDB and on Apache Spark (local mode), over the
same lake: a 10M-entry history of bench/history.py.

    python bench/bench_spark.py [--entries-total 10e6] [--workdir /tmp/frlake-bench-spark]
        [--lake EXISTING_LAKE] [--cores 2] [--driver-memory 2g] [--repeat 3] [--keep]

Builds the lake as bench/bench_reports.py does (a history planned for the
size, written and ingested in batches of whole jobs with 2 workers, each
batch's dumps deleted after its ingest), or takes an existing lake with
--lake. Then times, warm (one run first, then the best and median of
--repeat):
  * DuckDB: each report through Frlake.report (which opens its DuckDB views);
  * Spark: its start-up (a local[N] SparkSession: the JVM) apart, the views
    (frlake.engines.spark.register_views, committed files from the catalog and
    the catalog views from Arrow) apart, then each report's SQL alone
    (run_report(register=False)) and once with its views (the default);
and checks that every report's rows are equal on both engines. Spark runs the
portable reports only (Report.portable, as tests/test_spark.py): drain is a
policy computed in Python over DuckDB queries, not one SQL statement, and is
listed as skipped. Prints a table and writes bench/results/spark.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from history import plan_history, write_attempts  # noqa: E402

from frlake.config import Settings  # noqa: E402
from frlake.engines.spark import local_session, register_views, run_report  # noqa: E402
from frlake.engines.transpile import referenced_tables  # noqa: E402
from frlake.ingest import IngestOptions  # noqa: E402
from frlake.query.drain import DrainPolicy  # noqa: E402
from frlake.query.reports import REPORTS  # noqa: E402
from frlake.session import Frlake  # noqa: E402


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)


def timed(fn, repeat: int) -> dict:
    t = time.perf_counter()
    out = fn()  # warm: page cache, imports, the first plan
    first = time.perf_counter() - t
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return {"first_s": round(first, 4), "best_s": round(min(times), 4), "median_s": round(statistics.median(times), 4),
            "runs_s": [round(x, 4) for x in times], "result": out}


def normal(value):
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 9)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, dict):
        return {k: normal(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    return value


def build(settings: Settings, dumps: Path, total: int, seed: int, entries: int, batch_entries: int) -> dict:
    hist = plan_history(target_entries=total, seed=seed, entries=entries)
    by_job: dict[str, list] = {}
    for a in hist.attempts:
        by_job.setdefault(a.job, []).append(a)
    order = list(by_job)
    random.Random(seed).shuffle(order)
    log(f"plan: {len(order)} jobs, {len(hist.attempts)} attempts, {hist.entries():,} entries")
    i, done, t_all = 0, 0, time.perf_counter()
    while i < len(order):
        batch = []
        while i < len(order) and (not batch or hist.entries(batch) < batch_entries):
            batch += by_job[order[i]]
            i += 1
        write_attempts(dumps, hist, batch)
        with Frlake(settings) as fl:  # a session per batch, as `frlake ingest` would run it
            summary = fl.ingest([dumps], IngestOptions(workers=2))
        assert summary.rejected == 0, summary.rejected_by_reason
        shutil.rmtree(dumps)
        done += hist.entries(batch)
        log(f"lake: {done:,} entries, elapsed {time.perf_counter() - t_all:.0f} s")
    return {"entries": hist.entries(), "attempts": len(hist.attempts), "jobs": len(order),
            "build_s": round(time.perf_counter() - t_all, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries-total", type=float, default=10e6)
    ap.add_argument("--workdir", default="/tmp/frlake-bench-spark")
    ap.add_argument("--lake", default=None, help="an existing lake (its SQLite catalog inside): build nothing")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--entries", type=int, default=2000, help="entries per rank")
    ap.add_argument("--batch-entries", type=float, default=4e6)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results" / "spark.json"))
    ap.add_argument("--keep", action="store_true", help="keep the lake that was built")
    ap.add_argument("--now", type=datetime.fromisoformat, default=None,
                    help="drain's policy applied at this moment (ISO 8601; default: now)")
    args = ap.parse_args()

    results: dict = {"machine": {"cpus": os.cpu_count(), "loadavg_start": [round(x, 2) for x in os.getloadavg()],
                                 "note": "shared 2-core machine: other engineers' work ran at the same time"},
                     "settings": vars(args)}
    work = Path(args.workdir)
    if args.lake:
        settings = Settings.resolve(args.lake)
    else:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        settings = Settings.resolve(work / "lake")
        results["build"] = build(settings, work / "dumps", int(args.entries_total), args.seed, args.entries,
                                 int(args.batch_entries))

    with Frlake(settings) as fl:
        con = fl.connect(catalog_views=("attempts",))
        results["lake"] = dict(zip(("entries", "dumps", "attempts"), con.execute(
            "SELECT (SELECT sum(n_entries) FROM dumps), (SELECT count(*) FROM dumps), (SELECT count(*) FROM attempts)"
        ).fetchone()))
        con.close()
        log(f"lake: {results['lake']}")

        duck = {}
        for name in REPORTS:
            params = {"policy": DrainPolicy(now=args.now)} if name == "drain" and args.now else {}
            t = timed(lambda: fl.report(name, **params), args.repeat)
            duck[name] = t.pop("result")
            results.setdefault("duckdb", {})[name] = {**t, "rows": len(duck[name])}
            log(f"duckdb {name:12s} best {t['best_s']:.3f} s  median {t['median_s']:.3f} s")

        t = time.perf_counter()
        spark = local_session(cores=args.cores, driver_memory=args.driver_memory, app_name="frlake-bench")
        results["spark_startup_s"] = round(time.perf_counter() - t, 2)
        log(f"spark start-up {results['spark_startup_s']} s (version {spark.version})")
        results["spark_version"] = spark.version
        portable = [name for name, r in REPORTS.items() if r.portable]
        results["spark_skipped"] = {name: "not portable: computed in Python over DuckDB (Report.portable)"
                                    for name in REPORTS if name not in portable}
        needed = set().union(*(referenced_tables(REPORTS[name].sql) for name in portable))
        t = timed(lambda: register_views(spark, fl, needed), args.repeat)
        t.pop("result")
        results["spark_register_views"] = {**t, "views": sorted(needed)}
        log(f"spark register_views({sorted(needed)}) best {t['best_s']:.3f} s")
        equal = {}
        for name in portable:
            t = timed(lambda: run_report(spark, fl, name, register=False), args.repeat)
            rows = t.pop("result")
            with_views = time.perf_counter()
            rows_again = run_report(spark, fl, name)
            t["with_views_s"] = round(time.perf_counter() - with_views, 4)
            equal[name] = [normal(r) for r in rows] == [normal(r) for r in duck[name]] == \
                [normal(r) for r in rows_again]
            results.setdefault("spark", {})[name] = {**t, "rows": len(rows), "equal_to_duckdb": equal[name]}
            log(f"spark  {name:12s} best {t['best_s']:.3f} s  median {t['median_s']:.3f} s  "
                f"with views {t['with_views_s']:.2f} s  equal to DuckDB: {equal[name]}")
        spark.stop()
    results["all_equal"] = all(equal.values())
    results["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, default=str) + "\n")

    print(f"lake: {results['lake']['entries']:,} entries, {results['lake']['dumps']:,} dumps, "
          f"{results['lake']['attempts']} attempts; Spark {results['spark_version']} local[{args.cores}]")
    print(f"Spark start-up {results['spark_startup_s']:.2f} s; register_views "
          f"{results['spark_register_views']['best_s']:.2f} s (best of {args.repeat})")
    print(f"{'report':14s}{'DuckDB best / median':>24s}{'Spark best / median':>24s}{'rows':>7s}  equal")
    for name in REPORTS:
        d, s = results["duckdb"][name], results["spark"].get(name)
        spark_cells = (f"{s['best_s']:>12.3f} /{s['median_s']:>7.3f} s{s['rows']:>7d}  {s['equal_to_duckdb']}" if s
                       else f"{'skipped (not portable)':>24s}")
        print(f"{name:14s}{d['best_s']:>12.3f} /{d['median_s']:>7.3f} s{spark_cells}")
    if not args.lake and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    if not results["all_equal"]:
        sys.exit("the engines disagree: see " + args.out)


if __name__ == "__main__":  # ingest workers are processes: this module is imported in each
    main()
