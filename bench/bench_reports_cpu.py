"""Wall and CPU seconds of the reports on an existing lake, in process: for a shared machine, where the
CPU a report takes (every DuckDB thread counted) moves far less with the load than its wall time.

    PYTHONPATH=CHECKOUT python bench/bench_reports_cpu.py LAKE [--repeat 5] [NAME ...]

NAME: connect (Frlake.connect, every view), a report of the registry, or collectives (the rows with missing
members of bench_reports.py's probe attempt, job-0700208#0, through Frlake.query as `frlake query` runs it);
default: all. Each call in a session of its own, opened and closed inside the timing, one warm call first;
prints the best wall and the best CPU of --repeat, the checkout it ran and the load average. Run it with
PYTHONPATH set to two checkouts in turn to compare them on the same lake.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

import frlake  # the checkout on PYTHONPATH (never this file's: two checkouts are compared on one lake)
from frlake.config import Settings
from frlake.query.reports import REPORTS
from frlake.query.sandbox import QueryLimits
from frlake.session import Frlake

COLLECTIVES = """SELECT pg, pg_desc, seq, op, members, arrived, missing, unknown, spread_ms
FROM collectives WHERE job = 'job-0700208' AND attempt = 0 AND len(missing) > 0 ORDER BY pg, seq"""


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lake")
    ap.add_argument("names", nargs="*", default=["connect", *REPORTS, "collectives"])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    settings = Settings.resolve(args.lake)

    def call(name: str) -> int:
        with Frlake(settings, must_exist=True) as fl:
            if name == "connect":
                fl.connect()
                return 0
            if name == "collectives":
                return len(fl.query(COLLECTIVES, QueryLimits(timeout_s=1800, max_rows=1_000_000)).rows)
            return len(fl.report(name))

    print(f"{frlake.__file__}  {args.lake}")
    for name in args.names:
        rows = call(name)
        walls, cpus = [], []
        for _ in range(args.repeat):
            t, c = time.perf_counter(), cpu_s()
            call(name)
            walls.append(time.perf_counter() - t)
            cpus.append(cpu_s() - c)
        print(f"{name:12s} wall {min(walls):.3f} s  cpu {min(cpus):.3f} s  rows {rows:5d}  "
              f"load {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
