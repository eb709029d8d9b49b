"""Ingest benchmark: frlake ingest against plainly unpickling the same files.

    python bench/bench_ingest.py [--world 256] [--entries 2000] [--workdir DIR]

Generates a faithful synthetic NCCL-style job (bench/synth.py), then in one
run and from a warm page cache times:
  * plain   : pickle.load of every file (what a script would do, unsafely);
  * ingest 1: frlake ingest with one worker (safe load, parse, raw copy,
              Parquet, catalog);
  * ingest 2: the same with --workers 2, into a fresh lake;
  * rescan  : a no-op re-run over the same tree (nothing changed), and over a
              tree of --rescan-files files (hard links to the test corpus).
Prints the ratios and writes bench/results/ingest.json.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import pickle
import resource
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from synth import write_job  # noqa: E402

CORPUS = HERE.parent / "tests" / "corpus" / "visible"

from _frlake import ingest  # noqa: E402

from frlake.config import Settings  # noqa: E402
from frlake.ingest import IngestOptions  # noqa: E402


def tree_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def cpu_timed(fn):
    """(wall s, CPU s of this process, result): the CPU seconds do not depend on what else the machine runs."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    seconds, result = timed(fn)
    after = resource.getrusage(resource.RUSAGE_SELF)
    return seconds, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=256)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--workdir", default="/tmp/frlake-bench-ingest")
    ap.add_argument("--rescan-files", type=int, default=100_000)
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
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

    t_plain, cpu_plain, _ = cpu_timed(plain)
    results = {"world": args.world, "entries_per_rank": args.entries, "files": len(files),
                "pickle_bytes": pickle_bytes, "plain_unpickle_s": round(t_plain, 3),
                "plain_unpickle_cpu_s": round(cpu_plain, 3)}

    for workers in (1, 2):
        lake = Settings.resolve(work / f"lake-w{workers}")
        t, cpu, summary = cpu_timed(lambda: ingest([dumps], lake, IngestOptions(workers=workers)))
        assert summary.ingested == len(files) and summary.rejected == 0, summary
        results[f"ingest_w{workers}_s"] = round(t, 3)
        if workers == 1:  # in-process: every CPU second of the ingest is this process'
            results["ingest_w1_cpu_s"] = round(cpu, 3)
        results[f"entries_w{workers}"] = summary.entries

    lake = Settings.resolve(work / "lake-w2")
    t_noop, summary = timed(lambda: ingest([dumps], lake, IngestOptions(workers=2)))
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
        t_first, first = timed(lambda: ingest([big], many_lake, IngestOptions(workers=2)))
        t_again, again = timed(lambda: ingest([big], many_lake, IngestOptions(workers=2)))
        assert again.unchanged == n and again.ingested == 0
        results.update({"rescan_tree_files": n, "rescan_tree_first_s": round(t_first, 3),
                        "rescan_tree_noop_s": round(t_again, 3), "rescan_us_per_file": round(t_again / n * 1e6, 1)})

    results["ratio_ingest_w1_vs_plain"] = round(results["ingest_w1_s"] / t_plain, 2)
    results["ratio_ingest_w2_vs_plain"] = round(results["ingest_w2_s"] / t_plain, 2)
    results["ratio_ingest_w1_vs_plain_cpu"] = round(results["ingest_w1_cpu_s"] / cpu_plain, 2)
    results["speedup_w2_vs_w1"] = round(results["ingest_w1_s"] / results["ingest_w2_s"], 2)
    results["parquet_over_pickle"] = round(results["parquet_bytes"] / pickle_bytes, 3)

    print(f"{len(files)} files, {pickle_bytes / 1e6:.0f} MB of pickles, {results['entries_w1']:,} entries")
    print(f"  plain pickle.load      {t_plain:7.2f} s  ({cpu_plain:.2f} CPU s)")
    print(f"  frlake ingest, 1 worker {results['ingest_w1_s']:7.2f} s  = {results['ratio_ingest_w1_vs_plain']}x plain "
          f"({results['ingest_w1_cpu_s']:.2f} CPU s = {results['ratio_ingest_w1_vs_plain_cpu']}x plain's CPU)")
    print(f"  frlake ingest, 2 workers{results['ingest_w2_s']:7.2f} s  = {results['ratio_ingest_w2_vs_plain']}x plain, "
          f"{results['speedup_w2_vs_w1']}x faster than 1 worker")
    print(f"  no-op re-scan           {t_noop:7.2f} s")
    print(f"  Parquet {results['parquet_bytes'] / 1e6:.1f} MB = {results['parquet_over_pickle']} of the pickle bytes "
          f"(raw copies {results['raw_copy_bytes'] / 1e6:.1f} MB, zstd)")
    if n:
        print(f"  no-op re-scan of {n:,} files: {t_again:.2f} s ({results['rescan_us_per_file']} us per file; "
              f"first pass {t_first:.1f} s)")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "ingest.json").write_text(json.dumps(results, indent=2) + "\n")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
