#!/usr/bin/env python3
""""No slower": ingest and diagnose CPU of two commits, side by side in one run.

    python bench/compare_commits.py BEFORE [AFTER] [--rounds 5] [--world 1024] [--ingest-world 256]
                                    [--entries 2000] [--fault missing_last|straggler] [--no-ingest] [--flat]

Checks out each commit into a temporary git worktree (building its compiled
parser in place, where it has one) and, with this checkout's Python
environment, alternates fresh processes of the two (before, after,
before, ...), so a busy machine slows both alike:
  * diagnose: one ``--world``-rank attempt (bench/synth.py, ``--entries`` per
    rank, default 2,000; ``--fault`` missing_last: rank 700 never joins, or
    straggler: rank 700 arrives late, the path that weighs lateness, clocks
    and cost), ingested once per commit into its own lake, then
    ``Frlake.diagnose`` timed in a fresh process per round (wall and CPU):
    cold (the process' first call, its lazy imports included) and warm (a
    second call: the diagnosis alone);
  * ingest: ``--ingest-world`` ranks, one worker, in-process (CPU of the
    whole ingest), beside plain ``pickle.load`` of the same files (not with
    ``--no-ingest``); with ``--flat``, the ingest tree is one flat folder of
    torch's default names (``<job>/nccl_trace_rank_<r>``: no attempt, no host
    in the path), the path that tells restarts from snapshots.
Prints the medians and the after/before ratios; writes
bench/results/compare.json. AFTER defaults to the working tree's HEAD.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

_DIAGNOSE = r'''
import sys, time
from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.session import Frlake
lake, what = sys.argv[1], sys.argv[2]
with Frlake(Settings.resolve(lake)) as fl:
    if what == "ingest":
        fl.ingest([sys.argv[3]], IngestOptions(workers=2, diagnose=False))
    else:
        times = []
        for _ in range(2):  # cold (the process' first: its imports and caches too), then warm (the diagnosis alone)
            wall, cpu = time.perf_counter(), time.process_time()
            d = fl.diagnose("cmp", 0)
            times += [time.perf_counter() - wall, time.process_time() - cpu]
        print(*times, d.verdict, d.root.rank if d.root else None)
'''
_INGEST = r'''
import pathlib, pickle, shutil, sys, time
from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.session import Frlake
files = sorted(p for p in pathlib.Path(sys.argv[2]).rglob("*rank_*") if p.is_file())
for p in files:
    p.read_bytes()
cpu = time.process_time()
for p in files:
    with open(p, "rb") as f:
        pickle.load(f)  # the unsafe baseline, on our own synthetic files
plain = time.process_time() - cpu
shutil.rmtree(sys.argv[1], ignore_errors=True)
with Frlake(Settings.resolve(sys.argv[1])) as fl:
    wall, cpu = time.perf_counter(), time.process_time()
    s = fl.ingest([sys.argv[2]], IngestOptions(workers=1, diagnose=False))
    print(time.perf_counter() - wall, time.process_time() - cpu, plain, s.ingested)
'''


def run(tree: Path, code: str, *args: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # from the tree's own folder: ``python -c`` puts the current folder first on sys.path, and this checkout's
    # frlake would shadow the tree's (both sides would run the same code)
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, cwd=tree)
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr[-2000:]}")
    lines = done.stdout.strip().splitlines()
    return lines[-1].split() if lines else []  # the figures are the last line


def flatten(job: Path) -> None:
    """Move each rank's dump to ``job/nccl_trace_rank_<r>``, the names torch's default prefix writes."""
    for dump in sorted(job.glob("attempt-*/*/rank_*")):
        dump.rename(job / f"nccl_trace_{dump.name}")
    for folder in sorted(job.glob("attempt-*/*"), reverse=True) + sorted(job.glob("attempt-*")):
        folder.rmdir()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after", nargs="?", default="HEAD")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--world", type=int, default=1024)
    ap.add_argument("--ingest-world", type=int, default=256)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--fault", choices=("missing_last", "straggler"), default="missing_last")
    ap.add_argument("--no-ingest", action="store_true", help="compare the diagnosis only")
    ap.add_argument("--flat", action="store_true", help="ingest a flat folder of torch's default file names")
    ap.add_argument("--out", default=str(HERE / "results" / "compare.json"))
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="frlake-compare-"))
    sys.path.insert(0, str(HERE))
    from measure import checkouts

    try:
        with checkouts(ROOT, work, {"before": args.before, "after": args.after}) as trees:
            compare(args, work, trees)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def compare(args, work: Path, trees: dict[str, Path]) -> None:
    """The diagnosis (and the ingest) of each side's tree, round by round; the medians and their ratios."""
    from synth import write_job

    big, small = work / "dumps-diagnose", work / "dumps-ingest"
    write_job(big, args.world, args.entries, job="cmp", fault=args.fault, culprit=min(700, args.world - 1))
    if not args.no_ingest:
        write_job(small, args.ingest_world, 2000, job="cmp-ingest")
        if args.flat:
            flatten(small / "cmp-ingest")
    for side, tree in trees.items():
        run(tree, _DIAGNOSE, str(work / f"lake-{side}"), "ingest", str(big))
    diag = {side: [] for side in trees}
    ingest = {side: [] for side in trees}
    for _ in range(args.rounds):
        for side, tree in trees.items():
            wall, cpu, warm_wall, warm_cpu, verdict, rank = run(tree, _DIAGNOSE, str(work / f"lake-{side}"),
                                                                "diagnose")
            diag[side].append({"wall_s": float(wall), "cpu_s": float(cpu), "warm_wall_s": float(warm_wall),
                               "warm_cpu_s": float(warm_cpu), "verdict": verdict, "rank": rank})
            if not args.no_ingest:
                wall, cpu, plain, n = run(tree, _INGEST, str(work / f"ilake-{side}"), str(small))
                ingest[side].append({"wall_s": float(wall), "cpu_s": float(cpu), "plain_cpu_s": float(plain)})
    out = {"before": args.before, "after": args.after, "rounds": args.rounds, "world": args.world,
           "entries": args.entries, "fault": args.fault, "ingest_world": args.ingest_world, "flat": args.flat, "diagnose": diag,
           "ingest": ingest}
    for name, runs in (("diagnose", diag), ("ingest", ingest)):
        if not runs["before"]:
            continue
        for key in ("wall_s", "cpu_s", "warm_wall_s", "warm_cpu_s") if name == "diagnose" else ("wall_s", "cpu_s"):
            b, a = (statistics.median(r[key] for r in runs[s]) for s in ("before", "after"))
            out[f"{name}_{key}_median"] = {"before": round(b, 3), "after": round(a, 3), "ratio": round(a / b, 3)}
            print(f"{name:9} {key:11} median: before {b:.3f} s, after {a:.3f} s, after/before {a / b:.3f}")
    for side in trees:
        answers = {(r["verdict"], r["rank"]) for r in diag[side]}
        print(f"{side}: diagnosis {answers}")
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
