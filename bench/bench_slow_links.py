"""slow-links before and after the summary tables, on one lake, runs alternated.

    python bench/bench_slow_links.py LAKE [--before-rev 9d23f68] [--repeat 5]

LAKE is a lake written by this frlake (e.g. `bench/bench_reports.py --sizes
10e6 --keep` leaves one under its --workdir), so it holds both the entries
and the summary tables. "before" is the report's SQL at --before-rev (read
with `git show`, the version that grouped every timed entry on every
report), run on a connection with this frlake's views, the way
Frlake.report ran it; "after" is `Frlake.report("slow-links")`. Each run
opens its own connection; before and after alternate so that both see the
same load. Then the rows are compared: every column but watchdog_lag_ms
must be equal (its definition changed: a median of per-attempt medians), and
the largest difference of watchdog_lag_ms is printed. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from frlake.config import Settings  # noqa: E402
from frlake.query.reports import REPORTS  # noqa: E402
from frlake.query.window import Window  # noqa: E402
from frlake.session import Frlake  # noqa: E402


def old_sql(rev: str) -> str:
    text = subprocess.run(["git", "-C", str(HERE.parent), "show", f"{rev}:frlake/query/links.py"],
                          capture_output=True, text=True, check=True).stdout
    namespace: dict = {}
    exec(compile(text, f"{rev}:frlake/query/links.py", "exec"), namespace)  # our own repository's code
    return namespace["SLOW_LINKS"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lake")
    ap.add_argument("--before-rev", default="9d23f68")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    settings = Settings.resolve(args.lake)
    spec = REPORTS["slow-links"]
    before_sql = old_sql(args.before_rev)

    def before():
        with Frlake(settings) as fl:
            con = fl.connect(catalog_views=spec.views)
            cur = con.execute(before_sql, spec.params(Window()))
            return spec.rows([d[0] for d in cur.description], cur.fetchall())

    def after():
        with Frlake(settings) as fl:
            return fl.report("slow-links")

    times: dict[str, list[float]] = {"before": [], "after": []}
    rows = {}
    load = [os.getloadavg()[0]]
    for i in range(args.repeat + 1):  # the first round warms both (page cache, imports)
        for name, fn in (("before", before), ("after", after)):
            t = time.perf_counter()
            rows[name] = fn()
            if i:
                times[name].append(round(time.perf_counter() - t, 3))
        load.append(os.getloadavg()[0])
    with Frlake(settings) as fl:
        con = fl.connect(catalog_views=())
        entries = con.execute("SELECT count(*) FROM entries").fetchone()[0]
        summary_rows = con.execute("SELECT count(*) FROM collective_durations").fetchone()[0]
        timed = con.execute("SELECT sum(entries) FROM watchdog_lags").fetchone()[0]

    def key(r):
        return {k: v for k, v in r.items() if k != "watchdog_lag_ms"}

    lag = [abs((a["watchdog_lag_ms"] or 0) - (b["watchdog_lag_ms"] or 0))
           for a, b in zip(rows["before"], rows["after"], strict=True)] if len(rows["before"]) == len(rows["after"]) else []
    out = {
        "lake": str(settings.lake), "entries": entries, "timed_entries": int(timed or 0),
        "collective_durations_rows": summary_rows, "before_rev": args.before_rev, "repeat": args.repeat,
        "loadavg_1min": [round(x, 2) for x in load],
        **{name: {"best_s": min(t), "median_s": statistics.median(t), "runs_s": t} for name, t in times.items()},
        "rows": len(rows["after"]),
        "same_rows_but_watchdog_lag": [key(r) for r in rows["before"]] == [key(r) for r in rows["after"]],
        "watchdog_lag_ms_max_abs_difference": round(max(lag), 3) if lag else None,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
