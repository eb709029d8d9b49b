"""Ingest benchmark: frlake ingest against plainly unpickling the same files.

    python bench/bench_ingest.py [--world 256] [--entries 2000] [--rounds 3] [--workdir DIR]

Generates a faithful synthetic NCCL-style job (bench/synth.py), then in one
run and from a warm page cache times, in --rounds rounds that each run every
contender once (the figures are medians, each ratio the median of the
rounds' ratios: the machine's speed moves, and moves all of them alike):
  * plain   : pickle.load of every file (what a script would do, unsafely),
              timed in a fresh Python process (and, for the record, in this one);
  * ingest 1: frlake ingest with one worker (safe load, parse, raw copy,
              Parquet, catalog), into a new lake whose catalog exists (its
              creation, once per lake, is timed apart);
  * ingest 2: the same with --workers 2, into another new lake;
  * ingest only, 1 and 2 workers: the same without the diagnosis that
              ``Frlake.ingest`` runs after it (``IngestOptions(diagnose=False)``);
              two workers are those the run before kept (warm, as the
              one worker in this process is), and once more new ("cold",
              as every `frlake ingest` command starts its own);
  * rescan  : a no-op re-run over the same tree (nothing changed), and over a
              tree of --rescan-files files (hard links to the test corpus);
  * per file: CPU ms per dump of each step of a worker (the fast reader's
              decode and parse beside the reference's safe unpickle and column
              parse, Arrow tables, raw copy, sha256, Parquet) on --breakdown-files
              of the dumps, beside plain pickle.load with and without the GC.
For every ingest it also reads the machine's busy CPU seconds (/proc/stat:
the workers' processes and threads included) and gives the cores each run
kept busy. Two workers can be at most (cores of the machine) / (cores one
worker keeps busy) times faster than one: that ceiling is printed beside
the speed-up, and the fraction of it reached (the median of the rounds',
with their range).
Prints the ratios and writes bench/results/ingest.json.
"""

from __future__ import annotations

import argparse
import errno
import gc
import hashlib
import json
import math
import os
import pickle
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from synth import write_job  # noqa: E402

CORPUS = HERE.parent / "tests" / "corpus" / "visible"

from frlake.config import Settings  # noqa: E402
from frlake.ingest import IngestOptions  # noqa: E402
from frlake.ingest.pool import stop_kept_pools  # noqa: E402
from frlake.session import Frlake  # noqa: E402


def tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def timed(fn, settings: Settings | None = None):
    """(wall s, fn()). With ``settings``: fn(session) in a session of its own, opened and closed inside the
    timing, as `frlake ingest` runs (every figure of this benchmark counted its session: they stay comparable)."""
    start = time.perf_counter()
    if settings is None:
        result = fn()
    else:
        with Frlake(settings) as fl:
            result = fn(fl)
    return time.perf_counter() - start, result


def settled() -> None:
    """Start each contender alike: the writes of the one before on disk (an ingest's fsyncs would otherwise
    wait for the last run's hundreds of MB of lake, which the kernel writes back meanwhile) and this
    process' garbage collected."""
    os.sync()
    gc.collect()


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has been busy since boot (/proc/stat: all but idle and iowait),
    or NaN where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return math.nan
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def cpu_timed(fn, settings: Settings | None = None):
    """(wall s, CPU s of this process, busy CPU s of the whole machine, result): this process' CPU
    seconds do not depend on what else the machine runs; the machine's count the worker processes too
    (and whatever else runs: keep the machine otherwise idle). ``settings``: as for :func:`timed`."""
    settled()
    before, busy_before = resource.getrusage(resource.RUSAGE_SELF), machine_busy_s()
    seconds, result = timed(fn, settings)
    after, busy_after = resource.getrusage(resource.RUSAGE_SELF), machine_busy_s()
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return seconds, cpu, busy_after - busy_before, result


_PLAIN_SCRIPT = """
import pickle, resource, sys, time
paths = open(sys.argv[1]).read().split(chr(10))
start, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
for path in paths:
    with open(path, "rb") as f:
        pickle.load(f)
after = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - start, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
"""


def plain_in_fresh_process(files: list[Path]) -> tuple[float, float]:
    """(wall s, CPU s) of plain pickle.load of every file, timed inside a new Python process (its start-up
    left out)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as listing:
        listing.write("\n".join(map(str, files)))
        listing.flush()
        settled()
        out = subprocess.run([sys.executable, "-c", _PLAIN_SCRIPT, listing.name], check=True, capture_output=True,
                             text=True).stdout.split()
    return float(out[0]), float(out[1])


def per_file_breakdown(files: list[Path], batch: int = 32) -> dict[str, float]:
    """CPU ms per dump of each step a worker takes (best of 3 passes over the
    files, one step at a time), and of plain pickle.load with and without the GC."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from frlake.ingest.identity import Identity
    from frlake.ingest.parse import Limits, parse_bytes, parse_dump
    from frlake.ingest.safeload import decode
    from frlake.ingest.sources import Source
    from frlake.ingest.worker import _dump_tables, gc_paused
    from frlake.storage.lake import Lake, compress_raw

    datas = [p.read_bytes() for p in files]
    limits, now = Limits(), datetime.now(UTC)

    def best(step, gc_on=False) -> float:
        times = []
        for _ in range(3):
            start = time.process_time()
            if gc_on:
                step()
            else:
                with gc_paused():
                    step()
            times.append(time.process_time() - start)
        return round(min(times) / len(datas) * 1e3, 3)

    def each(fn, *columns):
        for args in zip(*columns):
            fn(*args)  # each result dropped at once, as a worker does

    out = {  # first, while this process holds no decoded dump for the GC to walk
        "plain_pickle_load_gc_on": best(lambda: each(pickle.loads, datas), gc_on=True),
        "plain_pickle_load_gc_off": best(lambda: each(pickle.loads, datas)),
        "safe_unpickle": best(lambda: each(decode, datas, [1 << 31] * len(datas))),
        # What a worker runs: the fast reader's decode and parse (frlake/ingest/_fastpickle.pyx), and the
        # reference's (safe unpickling, then the parse of the Python objects: the two steps below).
        "fast_read_and_parse": best(lambda: each(lambda d: parse_bytes(d, limits), datas)),
        "reference_read_and_parse": best(lambda: each(lambda d: parse_bytes(d, limits, native=False), datas)),
    }
    decoded = [decode(d, 1 << 31) for d in datas]
    parsed = [parse_dump(obj, enc, len(d), limits) for (obj, enc), d in zip(decoded, datas)]

    def tables_of(i):
        d = datas[i]
        return _dump_tables(parsed[i], i, "0" * 64, Identity("bench", 0, "host", i), "pickle", Source(str(files[i]), len(d), 1),
                            len(d), 1, now)

    tables = [tables_of(i) for i in range(len(datas))]
    lake = Lake(Path(files[0]).parent / ".bench-staging")

    def parquet():
        for start in range(0, len(tables), batch):
            for name in tables[start]:
                staged, _ = lake.stage_table(pa.concat_tables([t[name] for t in tables[start:start + batch] if name in t]))
                staged.unlink()

    out |= {
        "column_parse": best(lambda: each(lambda pair, d: parse_dump(*pair, len(d), limits), decoded, datas)),
        "arrow_tables": best(lambda: each(tables_of, range(len(datas)))),
        "raw_copy_zstd": best(lambda: each(compress_raw, datas)),
        "sha256": best(lambda: each(lambda d: hashlib.sha256(d).hexdigest(), datas)),
        "parquet": best(parquet),
    }
    shutil.rmtree(lake.root, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=256)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--workdir", default="/tmp/frlake-bench-ingest")
    ap.add_argument("--rescan-files", type=int, default=100_000)
    ap.add_argument("--breakdown-files", type=int, default=64, help="dumps the per-file breakdown reads (0: none)")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every contender, one after the other (medians)")
    args = ap.parse_args()

    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    dumps = work / "dumps"
    write_job(dumps, args.world, args.entries, job="bench", ranks_per_host=8)
    files = sorted(p for p in dumps.rglob("rank_*"))
    pickle_bytes = sum(p.stat().st_size for p in files)
    for p in files:  # warm the page cache for every contender alike
        p.read_bytes()

    def plain():
        for p in files:
            with open(p, "rb") as f:
                pickle.load(f)  # the unsafe baseline: never do this in product code

    # The baseline is a script that unpickles the files: a fresh process, whose garbage collector has only
    # its own few objects to walk. In this process (frlake, pyarrow and the generator loaded) the same loop
    # is 1.5-2x slower, which flattered the ratios of the runs before 2026-12-02's seventh.
    t_plain_here, cpu_plain_here, _, _ = cpu_timed(plain)
    # Once per lake: creating its catalog (the migrations), timed apart. Each run below ingests into a new
    # lake whose catalog exists, as every ingest but a lake's first does (the runs before 2026-12-02's eighth
    # timed the creation inside each run).
    with Frlake(Settings.resolve(work / "lake-empty")) as fl:
        t_catalog, _ = timed(lambda: fl.catalog)

    def new_lake(name: str) -> Settings:
        settings = Settings.resolve(work / name)
        with Frlake(settings) as fl:
            fl.catalog
        return settings

    # Rounds: each runs every contender once, one after the other, so that a machine whose speed moves
    # (these VMs' does, by up to 40% within the hour) slows all of them alike; the figures are the medians,
    # and each ratio the median of the rounds' ratios.
    rounds: list[dict] = []
    for r in range(args.rounds):
        row: dict = {}
        row["plain_unpickle_s"], row["plain_unpickle_cpu_s"] = plain_in_fresh_process(files)
        for diagnose in (True, False):  # with the diagnosis that Frlake.ingest runs after it, and alone
            # Two workers are the ones the run before kept (frlake.ingest.pool), as warm as the one worker in
            # this process; "cold": new ones, as every `frlake ingest` command starts (ingest only).
            for workers, cold in ((1, False), (2, False)) + (((2, True),) if not diagnose else ()):
                key = f"ingest{'' if diagnose else '_only'}_w{workers}{'_cold' if cold else ''}"
                if cold:
                    stop_kept_pools()
                lake = new_lake(f"lake-{r}-w{workers}{'' if diagnose else '-only'}{'-cold' if cold else ''}")
                t, cpu, busy, summary = cpu_timed(
                    lambda fl: fl.ingest([dumps], IngestOptions(workers=workers, diagnose=diagnose)), lake)
                assert summary.ingested == len(files) and summary.rejected == 0, summary
                assert bool(summary.diagnosed) == diagnose, summary
                row[f"{key}_s"] = t
                row[f"{key}_cores"] = busy / t  # cores the run kept busy, on average
                if workers == 1:  # in-process: every CPU second of the ingest is this process'
                    row[f"{key}_cpu_s"] = cpu
                row[f"entries_w{workers}"] = summary.entries
        rounds.append(row)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if k.endswith(("_s", "_cores"))), flush=True)

    def median(key: str) -> float:
        return round(statistics.median(row[key] for row in rounds), 3)

    def ratio(a: str, b: str) -> float:
        return round(statistics.median(row[a] / row[b] for row in rounds), 2)

    t_plain, cpu_plain = median("plain_unpickle_s"), median("plain_unpickle_cpu_s")
    results = {"world": args.world, "entries_per_rank": args.entries, "files": len(files), "rounds": args.rounds,
               "pickle_bytes": pickle_bytes, "plain_unpickle_s": t_plain, "plain_unpickle_cpu_s": cpu_plain,
               "plain_unpickle_in_bench_process_s": round(t_plain_here, 3), "catalog_create_s": round(t_catalog, 3)}
    results |= {key: median(key) for key in rounds[0] if key.startswith("ingest")}
    results |= {f"entries_w{w}": rounds[0][f"entries_w{w}"] for w in (1, 2)}
    results["each_round"] = [{k: round(v, 3) for k, v in row.items()} for row in rounds]

    lake = Settings.resolve(work / f"lake-{args.rounds - 1}-w2")
    t_noop, summary = timed(lambda fl: fl.ingest([dumps], IngestOptions(workers=2)), lake)
    assert summary.ingested == 0 and summary.unchanged == len(files)
    results["rescan_noop_s"] = round(t_noop, 3)
    results["parquet_bytes"] = tree_bytes(lake.lake / "tables")
    results["raw_copy_bytes"] = tree_bytes(lake.lake / "raw")

    # A no-op re-scan of a large tree: copies of the corpus made of hard links (no extra disk).
    # Every link gets its own new path; nothing is ever written through a link.
    corpus = sorted(p for p in CORPUS.rglob("rank_*") if p.is_file())
    big = work / "many"
    n = 0
    while n < args.rescan_files:
        for p in corpus:
            if n >= args.rescan_files:
                break
            target = big / f"copy-{n // len(corpus):05d}" / p.relative_to(CORPUS)
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(p, target)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
                shutil.copy(p, target)  # another filesystem: target is new, so a copy is safe
            n += 1
    if n:
        many_lake = Settings.resolve(work / "lake-many")
        t_first, first = timed(lambda fl: fl.ingest([big], IngestOptions(workers=2)), many_lake)
        t_again, again = timed(lambda fl: fl.ingest([big], IngestOptions(workers=2)), many_lake)
        assert again.unchanged == n and again.ingested == 0
        results.update({"rescan_tree_files": n, "rescan_tree_first_s": round(t_first, 3),
                        "rescan_tree_noop_s": round(t_again, 3), "rescan_us_per_file": round(t_again / n * 1e6, 1)})

    results["ratio_ingest_w1_vs_plain"] = ratio("ingest_w1_s", "plain_unpickle_s")
    results["ratio_ingest_w2_vs_plain"] = ratio("ingest_w2_s", "plain_unpickle_s")
    results["ratio_ingest_w1_vs_plain_cpu"] = ratio("ingest_w1_cpu_s", "plain_unpickle_cpu_s")
    results["speedup_w2_vs_w1"] = ratio("ingest_w1_s", "ingest_w2_s")
    results["parquet_over_pickle"] = round(results["parquet_bytes"] / pickle_bytes, 3)
    results["ratio_ingest_only_w1_vs_plain"] = ratio("ingest_only_w1_s", "plain_unpickle_s")
    results["ratio_ingest_only_w1_vs_plain_cpu"] = ratio("ingest_only_w1_cpu_s", "plain_unpickle_cpu_s")
    results["speedup_only_w2_vs_w1"] = ratio("ingest_only_w1_s", "ingest_only_w2_s")
    # Two workers do at least one worker's CPU work, on at most this machine's cores: at most
    # cores / (cores one worker keeps busy) times faster, and never more than 2x.
    cores = os.cpu_count() or 1
    results["machine_cores"] = cores
    for key in ("", "_only"):
        results[f"ceiling{key}_w2_vs_w1"] = round(statistics.median(
            min(2.0, cores / row[f"ingest{key}_w1_cores"]) for row in rounds), 2)
    # the fraction of that ceiling two workers reach, round by round (the machine's speed moves between
    # rounds more than within one): the median, and the spread, which says how far to trust it
    for key, two in (("", "ingest_w2"), ("_only", "ingest_only_w2"), ("_only_cold", "ingest_only_w2_cold")):
        one = "ingest_w1" if key == "" else "ingest_only_w1"
        fractions = [row[f"{one}_s"] / row[f"{two}_s"] / min(2.0, cores / row[f"{one}_cores"]) for row in rounds]
        results[f"fraction{key}_of_ceiling"] = round(statistics.median(fractions), 3)
        results[f"fraction{key}_of_ceiling_range"] = [round(min(fractions), 3), round(max(fractions), 3)]
    if args.breakdown_files:
        results["per_file_cpu_ms"] = per_file_breakdown(files[: args.breakdown_files])

    print(f"{len(files)} files, {pickle_bytes / 1e6:.0f} MB of pickles, {results['entries_w1']:,} entries")
    print(f"  medians of {args.rounds} rounds; each ratio the median of the rounds' ratios")
    print(f"  plain pickle.load      {t_plain:7.2f} s  ({cpu_plain:.2f} CPU s) in a fresh process; "
          f"{t_plain_here:.2f} s in this one")
    print(f"  frlake ingest, 1 worker {results['ingest_w1_s']:7.2f} s  = {results['ratio_ingest_w1_vs_plain']}x plain "
          f"({results['ingest_w1_cpu_s']:.2f} CPU s = {results['ratio_ingest_w1_vs_plain_cpu']}x plain's CPU)")
    print(f"  frlake ingest, 2 workers{results['ingest_w2_s']:7.2f} s  = {results['ratio_ingest_w2_vs_plain']}x plain, "
          f"{results['speedup_w2_vs_w1']}x faster than 1 worker (at most {results['ceiling_w2_vs_w1']}x here)")
    print(f"  ingest only (no diagnosis), 1 worker {results['ingest_only_w1_s']:.2f} s = "
          f"{results['ratio_ingest_only_w1_vs_plain']}x plain ({results['ingest_only_w1_cpu_s']:.2f} CPU s = "
          f"{results['ratio_ingest_only_w1_vs_plain_cpu']}x); 2 workers {results['ingest_only_w2_s']:.2f} s, "
          f"{results['speedup_only_w2_vs_w1']}x faster than 1 worker")
    print(f"  cores kept busy (of {cores}): ingest only, 1 worker {results['ingest_only_w1_cores']:.2f}, "
          f"2 workers {results['ingest_only_w2_cores']:.2f}; so 2 workers can be at most "
          f"{results['ceiling_only_w2_vs_w1']}x faster than 1 on this machine")
    def fraction(key: str) -> str:
        low, high = results[f"fraction{key}_of_ceiling_range"]
        return f"{results[f'fraction{key}_of_ceiling']} ({low}-{high})"

    print(f"  fraction of that ceiling 2 workers reach (median of the rounds'; their range): ingest only "
          f"{fraction('_only')}; with new workers (as each `frlake ingest` command) {fraction('_only_cold')}, "
          f"{results['ingest_only_w2_cold_s']:.2f} s; with the diagnosis {fraction('')}")
    print(f"  no-op re-scan           {t_noop:7.2f} s; creating a lake's catalog (once per lake, before each run above) "
          f"{t_catalog:.2f} s")
    print(f"  Parquet {results['parquet_bytes'] / 1e6:.1f} MB = {results['parquet_over_pickle']} of the pickle bytes "
          f"(raw copies {results['raw_copy_bytes'] / 1e6:.1f} MB, zstd)")
    if n:
        print(f"  no-op re-scan of {n:,} files: {t_again:.2f} s ({results['rescan_us_per_file']} us per file; "
              f"first pass {t_first:.1f} s)")
    if args.breakdown_files:
        print("  per file, CPU ms: " + ", ".join(f"{k} {v}" for k, v in results["per_file_cpu_ms"].items()))
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "ingest.json").write_text(json.dumps(results, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
