"""Reports at scale: the fleet reports and ad-hoc SQL over a lake of 10M and
100M Flight Recorder entries.

    python bench/bench_reports.py [--sizes 10e6 100e6] [--workdir /tmp/frlake-bench-reports]
        [--batch-entries 4e6] [--seed 7] [--entries 2000] [--repeat 3] [--keep]

Plans one synthetic history (bench/history.py: jobs of 8-256 ranks with 1-4
attempts over 6 weeks, a 64-host fleet with 3 flaky hosts and 2 stragglers)
big enough for the largest size, in a random job order so that every prefix
spans the whole 6 weeks. The lake grows in batches: write a batch of whole
jobs (~--batch-entries entries), ingest it with the Python API
(IngestOptions(workers=2), which also diagnoses every attempt it touched),
delete the batch's dump files; so the disk holds the lake plus one batch.
Whenever the lake reaches a size of --sizes, it times, warm (one run first,
then the best and median of --repeat):
  * each report through frlake.query.reports.run(settings, name), and once
    through the CLI (`frlake --lake L report NAME -f json`, a fresh process);
  * ad-hoc SQL through frlake.query.query(sql, settings): per-op counts and
    median duration over one week, the last collective of each rank and group
    of one 256-rank attempt, and SELECT count(*) FROM entries;
  * connect() alone (the DuckDB views every report and query starts with);
and checks the reports against the history's truth. Prints a table and
writes bench/results/reports.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from _frlake import connect, ingest, query, run  # noqa: E402
from history import plan_history, truth_summary, write_attempts  # noqa: E402

from frlake.config import Settings  # noqa: E402
from frlake.ingest import IngestOptions  # noqa: E402
from frlake.query.sandbox import QueryLimits  # noqa: E402

REPORTS = ("flaky-hosts", "slow-ranks", "hangs")
FRLAKE = str(Path(sys.executable).parent / "frlake")
LIMITS = QueryLimits(timeout_s=1800, max_rows=1_000_000)
WEEK = ("2026-10-12", "2026-10-19")

SQL_WEEK = f"""
SELECT op, count(*) AS n, median(duration_ms) AS median_ms, quantile_cont(duration_ms, 0.99) AS p99_ms
FROM entries
WHERE time_created >= TIMESTAMP '{WEEK[0]}' AND time_created < TIMESTAMP '{WEEK[1]}'
GROUP BY op ORDER BY n DESC
"""
SQL_LAST = """
SELECT pg_desc, rank, host, max(collective_seq_id) AS last_seq
FROM entries WHERE job = '{job}' AND attempt = {attempt} AND NOT is_p2p
GROUP BY ALL ORDER BY pg_desc, last_seq, rank
"""
SQL_COUNT = "SELECT count(*) FROM entries"


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)


def tree_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total


def timed(fn, repeat: int) -> dict:
    fn()  # warm: page cache, imports, DuckDB's first plan
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return {"best_s": round(min(times), 4), "median_s": round(statistics.median(times), 4),
            "runs_s": [round(x, 4) for x in times], "result": out}


def check_reports(rows: dict, truth: dict) -> dict:
    """Do the reports find the planted hosts?"""
    flaky, strag = set(truth["flaky"]), set(truth["stragglers"])
    fh = [r["host"] for r in rows["flaky-hosts"]]
    pos = {h: fh.index(h) + 1 if h in fh else None for h in sorted(flaky | strag)}
    ordinary = [i for i, h in enumerate(fh) if h not in flaky | strag]
    first_ordinary = ordinary[0] + 1 if ordinary else None
    flaky_pos = [pos[h] for h in flaky]
    # slow-ranks: one row per (job, rank, host); straggler culprit rows first
    sr = rows["slow-ranks"]
    strag_rows = [r for r in sr if r["straggler_attempts"] > 0]
    by_host: dict[str, int] = {}
    for r in strag_rows:
        by_host[r["host"]] = by_host.get(r["host"], 0) + r["straggler_attempts"]
    top_hosts = sorted(by_host, key=lambda h: -by_host[h])[:len(strag)]
    return {
        "flaky_hosts_top": fh[:6],
        "flaky_hosts_position": pos,
        "first_ordinary_host_position": first_ordinary,
        "flaky_above_every_ordinary_host": all(p is not None and (first_ordinary is None or p < first_ordinary)
                                               for p in flaky_pos),
        "flaky_in_top_3": set(fh[:3]) == flaky,
        "slow_ranks_rows": len(sr),
        "slow_ranks_straggler_attempts_by_host": dict(sorted(by_host.items(), key=lambda kv: -kv[1])),
        "slow_ranks_top_hosts_are_stragglers": set(top_hosts) == strag,
        "slow_ranks_top_rows_hosts": [r["host"] for r in sr[:5]],
    }


def diagnosis_accuracy(settings: Settings, plans: list) -> dict:
    """Verdict and root host of every attempt against the plan."""
    con = connect(settings.lake, settings.db_url)
    try:
        got = {(j, a): (v, h) for j, a, v, h in con.execute("""
            SELECT i.job, i.attempt, i.verdict, c.host FROM incidents i
            LEFT JOIN culprits c ON c.job = i.job AND c.attempt = i.attempt AND c.position = 0""").fetchall()}
    finally:
        con.close()
    want_verdict = {"none": "healthy", "missing_last": "hang", "straggler": "straggler"}
    ok = bad = 0
    wrong = []
    for p in plans:
        v, h = got.get((p.job, p.attempt), (None, None))
        if v == want_verdict[p.fault] and (p.culprit_host is None or h == p.culprit_host):
            ok += 1
        else:
            bad += 1
            if len(wrong) < 10:
                wrong.append({"job": p.job, "attempt": p.attempt, "fault": p.fault, "want_host": p.culprit_host,
                              "verdict": v, "host": h})
    return {"attempts": ok + bad, "right": ok, "wrong": bad, "examples": wrong}


def measure(settings: Settings, repeat: int, probe: tuple[str, int], truth: dict) -> dict:
    res: dict = {}
    # what is in the lake
    con = connect(settings.lake, settings.db_url)
    try:
        n_dumps, n_entries = con.execute("SELECT count(*), sum(n_entries) FROM dumps").fetchone()
        res["dumps"], res["entries_dumps"] = n_dumps, int(n_entries)
        res["attempts"] = con.execute("SELECT count(*) FROM attempts").fetchone()[0]
        res["jobs"] = con.execute("SELECT count(*) FROM jobs").fetchone()[0]
        res["verdicts"] = dict(con.execute("SELECT verdict, count(*) FROM incidents GROUP BY ALL ORDER BY ALL").fetchall())
    finally:
        con.close()
    lake = settings.lake
    res["lake_bytes"] = {"tables": tree_bytes(lake / "tables"), "raw": tree_bytes(lake / "raw"),
                         "all": tree_bytes(lake)}
    res["entries_files"] = sum(len(files) for _, _, files in os.walk(lake / "tables" / "entries"))
    log(f"lake: {res['entries_dumps']:,} entries, {res['attempts']} attempts, {res['dumps']} dumps, "
        f"{res['lake_bytes']['all'] / 1e9:.2f} GB, {res['entries_files']} entries files")

    t = timed(lambda: connect(settings.lake, settings.db_url).close(), repeat)
    res["connect"] = {k: v for k, v in t.items() if k != "result"}

    rows = {}
    for name in REPORTS:
        t = timed(lambda: run(settings, name), repeat)
        rows[name] = t.pop("result")
        t["rows"] = len(rows[name])
        start = time.perf_counter()
        cp = subprocess.run([FRLAKE, "--lake", str(lake), "report", name, "-f", "json"],
                            capture_output=True, text=True)
        t["cli_s"] = round(time.perf_counter() - start, 3)
        assert cp.returncode == 0, cp.stderr
        assert len(json.loads(cp.stdout)) == len(rows[name])
        res[name] = t
        log(f"  {name:12s} best {t['best_s']:.3f} s  median {t['median_s']:.3f} s  cli {t['cli_s']:.2f} s  "
            f"{t['rows']} rows")

    queries = {"adhoc_week_ops": SQL_WEEK, "adhoc_last_per_rank": SQL_LAST.format(job=probe[0], attempt=probe[1]),
               "count_entries": SQL_COUNT}
    for name, sql in queries.items():
        t = timed(lambda: query(sql, settings, LIMITS), repeat)
        r = t.pop("result")
        t["rows"] = len(r.rows)
        if name == "count_entries":
            res["entries"] = r.rows[0][0]
        if name == "adhoc_week_ops":
            t["week"] = list(WEEK)
            t["entries_in_week"] = sum(row[1] for row in r.rows)
        res[name] = t
        log(f"  {name:20s} best {t['best_s']:.3f} s  median {t['median_s']:.3f} s  {t['rows']} rows")
    res["sql"] = {k: " ".join(v.split()) for k, v in queries.items()}
    res["checks"] = check_reports(rows, truth)
    res["top"] = {"flaky-hosts": [{k: r[k] for k in ("host", "score", "attempts", "culprit_attempts", "by_reason")}
                                  for r in rows["flaky-hosts"][:6]],
                  "slow-ranks": [{k: r[k] for k in ("job", "rank", "host", "lateness_ms", "straggler_attempts")}
                                 for r in rows["slow-ranks"][:5]],
                  "hangs": [{k: r[k] for k in ("attempts", "jobs", "reason", "op", "pg_desc", "top_frame")}
                            for r in rows["hangs"][:5]]}
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[10e6, 100e6], help="lake sizes in entries")
    ap.add_argument("--workdir", default="/tmp/frlake-bench-reports")
    ap.add_argument("--batch-entries", type=float, default=4e6, help="entries written and ingested per batch")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--entries", type=int, default=2000, help="entries per rank")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(HERE / "results" / "reports.json"))
    ap.add_argument("--keep", action="store_true", help="keep the lake")
    args = ap.parse_args()

    sizes = sorted(int(s) for s in args.sizes)
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    dumps, settings = work / "dumps", Settings.resolve(work / "lake")

    # disk: ~50 bytes per entry in the lake (Parquet + zstd raw), ~230 per entry of pickles in a batch
    need = 60 * sizes[-1] + 240 * args.batch_entries
    free = shutil.disk_usage(work).free
    log(f"disk: {free / 1e9:.0f} GB free, about {need / 1e9:.1f} GB needed")
    if need > free - 5e9:
        sys.exit(f"not enough disk under {work}: {free / 1e9:.1f} GB free, about {need / 1e9:.1f} GB needed")

    hist = plan_history(target_entries=sizes[-1], seed=args.seed, entries=args.entries)
    by_job: dict[str, list] = {}
    for a in hist.attempts:
        by_job.setdefault(a.job, []).append(a)
    order = list(by_job)
    random.Random(args.seed).shuffle(order)  # every prefix spans the whole window
    log(f"plan: {len(order)} jobs, {len(hist.attempts)} attempts, {hist.entries():,} entries; "
        f"flaky {hist.flaky}, stragglers {hist.stragglers}")

    results: dict = {
        "machine": {"cpus": os.cpu_count(), "loadavg_start": [round(x, 2) for x in os.getloadavg()],
                    "note": "shared 2-core machine: another engineer's work ran at the same time, timings are noisy"},
        "settings": {"sizes": sizes, "seed": args.seed, "entries_per_rank": args.entries,
                     "batch_entries": int(args.batch_entries), "repeat": args.repeat, "workers": args.workers,
                     "fleet": len(hist.fleet), "weeks": hist.weeks},
        "sizes": {}, "batches": [],
    }
    done: list = []
    gen_s = ingest_s = 0.0
    peak_disk = 0
    probe = None
    i = 0
    started = time.perf_counter()
    for size in sizes:
        while hist.entries(done) < size and i < len(order):
            batch = []
            while i < len(order) and (not batch or hist.entries(batch) < args.batch_entries) \
                    and hist.entries(done + batch) < size:
                batch += by_job[order[i]]
                i += 1
            t = time.perf_counter()
            write_attempts(dumps, hist, batch)
            t_gen = time.perf_counter() - t
            peak_disk = max(peak_disk, tree_bytes(work))
            t = time.perf_counter()
            summary = ingest([dumps], settings, IngestOptions(workers=args.workers))
            t_ing = time.perf_counter() - t
            n_files = sum(a.world for a in batch)
            assert summary.ingested == n_files and summary.rejected == 0, (summary.ingested, n_files, summary.rejected_by_reason)
            shutil.rmtree(dumps)
            done += batch
            gen_s += t_gen
            ingest_s += t_ing
            n = hist.entries(batch)
            results["batches"].append({"attempts": len(batch), "entries": n, "generate_s": round(t_gen, 2),
                                       "ingest_s": round(t_ing, 2), "ingest_entries_per_s": round(n / t_ing),
                                       "diagnosed": len(summary.diagnosed), "lake_entries_after": hist.entries(done)})
            log(f"batch {len(results['batches'])}: {len(batch)} attempts, {n:,} entries: generate {t_gen:.1f} s, "
                f"ingest {t_ing:.1f} s ({n / t_ing:,.0f}/s); lake {hist.entries(done):,} entries, "
                f"elapsed {time.perf_counter() - started:.0f} s")
        if probe is None:  # one big hung attempt, the same at every size
            big = max(done, key=lambda a: (a.world, a.fault == "missing_last", -done.index(a)))
            probe = (big.job, big.attempt)
        log(f"size {size:,}: measuring")
        res = measure(settings, args.repeat, probe, truth_summary(hist, done))
        res.update(target=size, planned_entries=hist.entries(done), probe_attempt=list(probe),
                   generate_s_total=round(gen_s, 1), ingest_s_total=round(ingest_s, 1),
                   ingest_entries_per_s=round(hist.entries(done) / ingest_s), peak_work_bytes=peak_disk,
                   truth=truth_summary(hist, done), diagnosis=diagnosis_accuracy(settings, done),
                   loadavg=[round(x, 2) for x in os.getloadavg()])
        results["sizes"][str(size)] = res
        _write(args.out, results)
    results["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]

    # ratios between the largest and the smallest size, and the floors
    keys = ["connect", *REPORTS, "adhoc_week_ops", "adhoc_last_per_rank", "count_entries"]
    if len(sizes) > 1:
        lo, hi = results["sizes"][str(sizes[0])], results["sizes"][str(sizes[-1])]
        results["ratios"] = {"entries": round(hi["entries"] / lo["entries"], 2),
                             **{k: round(hi[k]["best_s"] / lo[k]["best_s"], 2) for k in keys},
                             **{f"{k}_median": round(hi[k]["median_s"] / lo[k]["median_s"], 2) for k in keys}}
    ten = results["sizes"].get(str(10_000_000))
    results["floors"] = {
        "each_report_under_2s_at_10M": None if ten is None else all(ten[r]["best_s"] < 2 for r in REPORTS),
        "each_report_median_under_2s_at_10M": None if ten is None else all(ten[r]["median_s"] < 2 for r in REPORTS),
        "no_faster_than_linear": None if "ratios" not in results else
        all(results["ratios"][r] <= results["ratios"]["entries"] for r in REPORTS),
    }
    _write(args.out, results)
    _print(results, keys)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


def _write(path: str, results: dict) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(results, indent=2, default=str) + "\n")


def _label(size) -> str:
    return f"{int(size) / 1e6:g}M"


def _print(results: dict, keys: list[str]) -> None:
    sizes = list(results["sizes"])
    print(f"{'':22s}" + "".join(f"{_label(s):>10s} entries" for s in sizes)
          + ("   ratio" if "ratios" in results else ""))
    rows = [("entries", lambda r: f"{r['entries']:,}"), ("jobs / attempts", lambda r: f"{r['jobs']} / {r['attempts']}"),
            ("dumps", lambda r: f"{r['dumps']:,}"), ("lake GB", lambda r: f"{r['lake_bytes']['all'] / 1e9:.2f}"),
            ("ingest s (cumulative)", lambda r: f"{r['ingest_s_total']:.0f}"),
            ("ingest entries/s", lambda r: f"{r['ingest_entries_per_s']:,}")]
    for label, fn in rows:
        print(f"{label:22s}" + "".join(f"{fn(results['sizes'][s]):>18s}" for s in sizes)
              + (f"{results['ratios']['entries']:>8.2f}" if label == "entries" and "ratios" in results else ""))
    print("timings: best / median of the warm runs")
    for k in keys:
        cells = "".join(f"{results['sizes'][s][k]['best_s']:>8.3f} /{results['sizes'][s][k]['median_s']:>7.3f} s"
                        for s in sizes)
        print(f"{k:22s}{cells}" + (f"{results['ratios'][k]:>8.2f}" if "ratios" in results else ""))
    for s in sizes:
        c = results["sizes"][s]["checks"]
        print(f"{_label(s)}: flaky-hosts top {c['flaky_hosts_top'][:5]}, flaky above ordinary hosts: "
              f"{c['flaky_above_every_ordinary_host']}; slow-ranks straggler hosts {c['slow_ranks_straggler_attempts_by_host']}, "
              f"top are the stragglers: {c['slow_ranks_top_hosts_are_stragglers']}; "
              f"diagnoses right {results['sizes'][s]['diagnosis']['right']}/{results['sizes'][s]['diagnosis']['attempts']}")
    print("floors:", results["floors"])


if __name__ == "__main__":
    main()
