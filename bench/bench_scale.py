"""Scale benchmark: one attempt of 1,024 to 16,384 ranks on one machine.

    python bench/bench_scale.py [--sizes 1024 4096 8192 16384] [--entries 1000] [--culprit-frac 0.7324]
                                [--torch-max 1024] [--small 128] [--workdir DIR] [--results scale.json]

For each size: a synthetic NCCL job (bench/synth.py, ``missing_last``, the
culprit at a high rank: 12,000 of 16,384, the same fraction elsewhere), then
in fresh processes, each measured as a process tree (bench/measure.py: wall
time, CPU seconds of every process, peak RSS and PSS of the tree at one
instant):
  * ``frlake ingest --workers 2`` (which diagnoses the attempt it touched);
  * ``frlake diagnose`` alone on that lake (three runs: their median);
  * the attempt page, the arrivals API and a windowed trace, timed in-process
    on the server's test client (server time, no network);
  * torch's analyzer (``fr_trace``, tests/torch_fr.py) on the same pickles, for
    sizes up to ``--torch-max`` (it needs ~5 GB at 1,024 ranks, growing with
    the square of the ranks: it does not fit this machine beyond that).
``frlake diagnose --fresh`` computes the diagnosis (the one the ingest stored
is current). Then a small job (``--small`` ranks): ``frlake diagnose`` wall
time computing it (``--fresh``) and showing the stored one, and the
in-process ``Frlake.diagnose`` time (five runs of each command, and their
medians). The commands run from cached bytecode, as an installed frlake
does (see ENV). Writes bench/results/scale.json (or
``--results``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from measure import run_tree_measured  # noqa: E402
from synth import write_job  # noqa: E402

FRLAKE = [sys.executable, "-m", "frlake"]  # the `frlake` command (its entry point, frlake.cli.launcher)
# The commands run as an installed frlake does, from its modules' cached bytecode (pip writes it at install).
# Where PYTHONDONTWRITEBYTECODE is set (this project's sandboxes) and frlake is an editable checkout, every
# start would compile frlake's modules again: about 0.1 s more on each command.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
DIAGNOSE_RUNS = 3  # `diagnose --fresh` of the big attempt: the median of these (one run varies by 15% here)


def _server_times(lake: Path, job: str) -> dict:
    from frlake.config import Settings
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    client = create_app(ServerConfig(Settings.resolve(lake))).test_client()
    out = {}
    for name, url in [("page_s", f"/jobs/{job}/attempts/0"), ("arrivals_api_s", f"/api/jobs/{job}/attempts/0/arrivals"),
                      ("trace_api_s", f"/api/jobs/{job}/attempts/0/trace?around=20")]:
        client.get(url)  # warm: the first request opens the catalog and DuckDB
        start = time.perf_counter()
        r = client.get(url)
        body = r.get_data()
        out[name] = round(time.perf_counter() - start, 3)
        assert r.status_code == 200, (url, r.status_code)
        if name == "trace_api_s":
            out["trace_bytes"] = len(body)
            out["trace_events"] = len(json.loads(body)["traceEvents"])
        if name == "page_s":
            out["page_bytes"] = len(body)
    return out


def one_size(work: Path, world: int, entries: int, culprit: int, torch: bool) -> dict:
    dumps, lake = work / f"dumps-{world}", work / f"lake-{world}"
    start = time.perf_counter()
    truth = write_job(dumps, world, entries, job="big", fault="missing_last", culprit=culprit)
    out: dict = {"world": world, "entries_per_rank": entries, "culprit": culprit, "culprit_host": truth["culprit_host"],
                 "generate_s": round(time.perf_counter() - start, 1),
                 "pickle_bytes": sum(p.stat().st_size for p in dumps.rglob("rank_*"))}
    run = run_tree_measured(FRLAKE + ["--lake", str(lake), "ingest", str(dumps), "--workers", "2", "-q", "-f", "json"],
                            env=ENV, cwd=str(ROOT))
    assert run.code == 0, run.text[-2000:]
    summary = json.loads(run.text[run.text.index("{"):])
    root = summary["diagnosed"][0]["culprits"][0]
    out.update(ingest_s=round(run.seconds, 1), ingest_cpu_s=round(run.cpu_s, 1), ingest_peak_rss_mb=round(run.peak_rss_mb),
               ingest_peak_pss_mb=round(run.peak_pss_mb), ingest_root=root["rank"], ingest_root_host=root["host"])
    # computed, not the diagnosis the ingest stored
    runs = []
    for _ in range(DIAGNOSE_RUNS):
        run = run_tree_measured(FRLAKE + ["--lake", str(lake), "diagnose", "big", "-f", "json", "--fresh"], env=ENV,
                                cwd=str(ROOT))
        assert run.code == 0, run.text[-2000:]
        runs.append((run, json.loads(run.text[run.text.index("{"):])))
    run, diag = sorted(runs, key=lambda r: r[0].seconds)[len(runs) // 2]  # the median run
    roots = {d["culprits"][0]["rank"] for _, d in runs}
    out.update(diagnose_s=round(run.seconds, 2), diagnose_runs_s=[round(r.seconds, 2) for r, _ in runs],
               diagnose_cpu_s=round(run.cpu_s, 1), diagnose_peak_rss_mb=round(max(r.peak_rss_mb for r, _ in runs)),
               diagnose_analysis_s=diag["seconds"], diagnose_root=diag["culprits"][0]["rank"],
               right_culprit=roots == {culprit})
    out.update(_server_times(lake, "big"))
    out["lake_bytes"] = sum(p.stat().st_size for p in lake.rglob("*") if p.is_file())
    if torch:
        from tests.torch_fr import run_torch_on_attempt

        v = run_torch_on_attempt(dumps / "big" / "attempt-0", timeout=3600)
        out.update(torch_s=v.seconds, torch_peak_mb=v.peak_rss_mb, torch_named=v.named_rank, torch_gave_up=v.gave_up)
    shutil.rmtree(dumps, ignore_errors=True)
    shutil.rmtree(lake, ignore_errors=True)
    return out


def small_job(work: Path, world: int) -> dict:
    from frlake.config import Settings
    from frlake.ingest import IngestOptions
    from frlake.session import Frlake

    dumps, lake = work / "small-dumps", work / "small-lake"
    write_job(dumps, world, 2000, job="small", fault="missing_last", culprit=world // 2 + 5)
    with Frlake(Settings.resolve(lake)) as fl:
        fl.ingest([dumps], IngestOptions(workers=2))
    cli, stored = [], []
    subprocess.run(FRLAKE + ["--version"], env=ENV, cwd=str(ROOT), check=True, capture_output=True)  # the bytecode
    for _ in range(5):
        for times, extra in ((cli, ["--fresh"]), (stored, [])):
            run = run_tree_measured(FRLAKE + ["--lake", str(lake), "diagnose", "small", "-f", "json", *extra],
                                    env=ENV, cwd=str(ROOT))
            assert run.code == 0, run.text
            times.append(run.seconds)
    inproc = []
    with Frlake(Settings.resolve(lake)) as fl:
        fl.diagnose("small")
        for _ in range(3):
            start = time.perf_counter()
            fl.diagnose("small")
            inproc.append(time.perf_counter() - start)
    start = time.perf_counter()
    with Frlake(Settings.resolve(lake)) as fl:
        fl.diagnose("small")
    cold = time.perf_counter() - start
    shutil.rmtree(dumps, ignore_errors=True)
    shutil.rmtree(lake, ignore_errors=True)
    return {"world": world, "entries_per_rank": 2000, "cli_diagnose_s": [round(s, 3) for s in cli],
            "cli_diagnose_stored_s": [round(s, 3) for s in stored],
            "cli_diagnose_median_s": round(statistics.median(cli), 3),
            "cli_diagnose_stored_median_s": round(statistics.median(stored), 3),
            "session_diagnose_s": [round(s, 3) for s in inproc], "new_session_diagnose_s": round(cold, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 4096, 8192, 16384])
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--culprit-frac", type=float, default=12000 / 16384)
    ap.add_argument("--torch-max", type=int, default=1024)
    ap.add_argument("--small", type=int, default=128)
    ap.add_argument("--workdir", default="/tmp/frlake-bench-scale")
    ap.add_argument("--results", default="scale.json", help="file name under bench/results")
    args = ap.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    results: dict = {"small": small_job(work, args.small), "runs": []}
    print(json.dumps(results["small"]), flush=True)
    for world in args.sizes:
        culprit = int(world * args.culprit_frac) // 8 * 8
        r = one_size(work, world, args.entries, culprit, world <= args.torch_max)
        results["runs"].append(r)
        print(json.dumps(r), flush=True)
        (out / args.results).write_text(json.dumps(results, indent=2) + "\n")
    runs = results["runs"]
    if len(runs) > 1:
        a, b = runs[0], runs[-1]
        results["growth"] = {"ranks": b["world"] / a["world"], "ingest_s": round(b["ingest_s"] / a["ingest_s"], 2),
                             "ingest_cpu_s": round(b["ingest_cpu_s"] / a["ingest_cpu_s"], 2),
                             "diagnose_s": round(b["diagnose_s"] / a["diagnose_s"], 2),
                             "diagnose_cpu_s": round(b["diagnose_cpu_s"] / a["diagnose_cpu_s"], 2)}
    (out / args.results).write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results.get("growth")))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
