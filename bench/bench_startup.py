#!/usr/bin/env python3
"""How long the ``frlake`` command takes to start: the commands a user types
most (``--version``, ``--help``, a stored diagnosis, ``query "select 1"``)
beside ``python -c pass`` in the same run.

Every command runs ``--runs`` times, round robin (so a burst of load on a
shared machine falls on all of them alike); the median wall and CPU time of
each, its ratio to ``python -c pass``, and how many modules it imports
(``python -X importtime``: a count that no load changes) are printed as JSON
and written to ``bench/results/startup.json``.

    python bench/bench_startup.py [--runs 30] [--out bench/results/startup.json]
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
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "samples" / "fr"
FLOOR_S = 0.25  # issue 32: the median of each frlake command, here


def commands(lake: Path) -> dict[str, list[str]]:
    frlake = [sys.executable, "-m", "frlake"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "frlake --version": [*frlake, "--version"],
        "frlake --help": [*frlake, "--help"],
        "frlake diagnose J (stored)": [*frlake, "--lake", str(lake), "diagnose", "job-5f5228"],
        'frlake query "select 1"': [*frlake, "--lake", str(lake), "query", "select 1"],
    }


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one run; its output must be a success."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()}")
    proc.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def modules_imported(cmd: list[str]) -> int:
    """How many modules the command imports (each is one line of ``-X importtime``)."""
    out = subprocess.run([cmd[0], "-X", "importtime", *cmd[1:]], capture_output=True, text=True, check=True)
    return sum(line.startswith("import time:") for line in out.stderr.splitlines()) - 1  # less the header


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "startup.json")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="frlake-startup-"))
    try:
        lake = work / "lake"
        subprocess.run([sys.executable, "-m", "frlake", "--lake", str(lake), "ingest", str(SAMPLES), "--quiet"],
                       check=True, stdout=subprocess.DEVNULL)
        cmds = commands(lake)
        for cmd in cmds.values():  # warm the file cache and the bytecode
            timed(cmd)
        walls: dict[str, list[float]] = {name: [] for name in cmds}
        cpus: dict[str, list[float]] = {name: [] for name in cmds}
        load_start = os.getloadavg()
        for _ in range(args.runs):
            for name, cmd in cmds.items():
                wall, cpu = timed(cmd)
                walls[name].append(wall)
                cpus[name].append(cpu)
        load_end = os.getloadavg()
        base = statistics.median(walls["python -c pass"])
        result = {
            "machine": {"cpus": os.cpu_count(), "loadavg_start": load_start, "loadavg_end": load_end},
            "runs": args.runs, "floor_s": FLOOR_S,
            "commands": {name: {
                "median_wall_s": round(statistics.median(walls[name]), 4),
                "best_wall_s": round(min(walls[name]), 4),
                "median_cpu_s": round(statistics.median(cpus[name]), 4),
                "minus_python_s": round(statistics.median(walls[name]) - base, 4),
                "modules": modules_imported(cmd),
                "under_floor": statistics.median(walls[name]) < FLOOR_S,
            } for name, cmd in cmds.items()},
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
