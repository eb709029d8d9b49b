#!/usr/bin/env python3
"""Many small attempts (issue 32, floor 1): ingest and ``rediagnose`` of
attempts of 4-8 ranks, one at a time and in batches, in one run.

Writes ``--attempts`` attempts (default 450) with bench/synth.py, each of 4-8
ranks (4 per host), ``--entries`` records per rank, healthy or with one fault
(a hang: ``missing_last``; a straggler; a size mismatch: one rank's last
collective given another shape), into ``WORKDIR/dumps`` (kept and reused
when present with the same plan). Then, each step a process of its own
(wall, CPU and peak RSS of its tree, bench/measure.py):

1. ``ingest`` of the folder into a fresh lake (its diagnosis in batches)
   with ``--workers`` workers, with the ingest summary's seconds per phase;
2. ``rediagnose`` in batches on one process and on ``--workers`` (default
   2), one attempt at a time (``batch=1``), and with ``--baseline DIR`` that
   checkout's ``rediagnose`` (the code before batches, e.g. a worktree of
   main), alternated ``--rounds`` times;
3. the stored diagnoses of the two compared (JSON without ``seconds``).

    python bench/bench_bulk.py [--attempts 450] [--entries 300] [--rounds 2] [--workdir DIR]
        [--baseline DIR] [--skip-one-at-a-time] [--workers 2] [--lake DIR] [--out bench/results/bulk.json]

``--lake DIR``: rediagnose that lake (made by an earlier run) instead of
writing the dumps and ingesting them.

The machine's load average is recorded before and after each step.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import pickle
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CODE = Path(os.environ.get("FRLAKE_BENCH_CODE") or HERE.parent)  # whose frlake a step runs (--baseline)
sys.path[:0] = [str(HERE), str(CODE)]

FAULTS = (("none", 5), ("missing_last", 2), ("straggler", 2), ("mismatch", 1))


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"global {module}.{name} in a FR dump")


def _mismatch(folder: Path, rank: int) -> None:
    """Give ``rank``'s last completed collective of its tp group (every rank of a world of 8 or fewer) another
    shape than its peers' (a size mismatch)."""
    path = next(folder.rglob(f"rank_{rank}"))
    dump = _PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    for entry in reversed(dump["entries"]):
        if entry.get("state") == "completed" and entry["process_group"][1] == "tp" and entry.get("input_sizes"):
            entry["input_sizes"] = [[n + 1 for n in s] for s in entry["input_sizes"]]
            entry["output_sizes"] = [[n + 1 for n in s] for s in entry["output_sizes"]]
            break
    path.write_bytes(pickle.dumps(dump, protocol=4))


def write_dumps(out: Path, attempts: int, entries: int, seed: int = 32) -> dict:
    """The attempts' dumps under ``out`` (``job-NNNN/attempt-K/...``, three attempts a job); their plan."""
    import synth

    plan_file = out.parent / f"{out.name}.plan.json"
    rng = random.Random(seed)
    faults, weights = zip(*FAULTS, strict=True)
    plan = [{"job": f"job-{i // 3:05d}", "attempt": i % 3, "world": rng.randint(4, 8),
             "fault": rng.choices(faults, weights)[0]} for i in range(attempts)]
    key = {"attempts": attempts, "entries": entries, "seed": seed, "mismatch": "tp"}
    if plan_file.is_file() and json.loads(plan_file.read_text()).get("key") == key:
        return json.loads(plan_file.read_text())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    plan_file.unlink(missing_ok=True)
    started, files = time.perf_counter(), 0
    for i, a in enumerate(plan):
        fault = "none" if a["fault"] == "mismatch" else a["fault"]
        truth = synth.write_job(str(out), a["world"], entries, job=a["job"], attempt=a["attempt"], ranks_per_host=4,
                                fault=fault, seed=i, procs=1)
        if a["fault"] == "mismatch":
            a["culprit"] = rng.randrange(a["world"])
            _mismatch(out / a["job"] / f"attempt-{a['attempt']}", a["culprit"])
        else:
            a["culprit"] = truth["culprit_rank"]
        files += a["world"]
    result = {"key": key, "files": files, "seconds": round(time.perf_counter() - started, 1), "plan": plan}
    plan_file.write_text(json.dumps(result))
    return result


# -- the steps, each run in a process of its own ----------------------------------------------------------
def step_ingest(lake: str, dumps: str, workers: int = 1) -> dict:
    from frlake.ingest import IngestOptions
    from frlake.session import Frlake

    shutil.rmtree(lake, ignore_errors=True)
    with Frlake.open(lake) as fl:
        summary = fl.ingest([dumps], IngestOptions(workers=workers))
    return {"seconds": summary.seconds, "phases": summary.phases, "ingested": summary.ingested,
            "rejected": summary.rejected, "attempts": len(summary.diagnosed)}


def step_rediagnose(lake: str, batch: int, workers: int = 1) -> dict:
    """``rediagnose`` with ``batch`` (0: as the code does by default, for a --baseline without batches) on
    ``workers`` processes (1: this one, and the only way a --baseline without workers is called)."""
    from frlake.session import Frlake

    started, cpu = time.perf_counter(), time.process_time()
    with Frlake.open(lake) as fl:
        options = {"batch": batch} if batch else {}
        if workers > 1:
            options["workers"] = workers
        diagnoses = fl.rediagnose(**options)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        digest = hashlib.sha256()
        for job, attempt in fl.attempt_keys():
            data = fl.catalog.diagnoses.get(job, attempt).to_dict()
            data.pop("seconds")
            digest.update(json.dumps(data, sort_keys=True).encode())
        verdicts: dict[str, int] = {}
        for d in diagnoses:
            verdicts[d.verdict.value] = verdicts.get(d.verdict.value, 0) + 1
    return {"seconds": round(seconds, 3), "cpu_s": round(cpu, 3), "attempts": len(diagnoses),
            "verdicts": dict(sorted(verdicts.items())), "stored_sha256": digest.hexdigest()}


def _run(args: list[str], code: Path = CODE) -> dict:
    from measure import run_tree_measured

    load = os.getloadavg()[0]
    env = {**os.environ, "PYTHONPATH": str(code), "FRLAKE_BENCH_CODE": str(code)}
    run = run_tree_measured([sys.executable, __file__, *args], env=env)
    if run.code != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{run.text}")
    out = json.loads(run.text.strip().splitlines()[-1])
    out.update(wall_s=round(run.seconds, 3), tree_cpu_s=round(run.cpu_s, 3), peak_rss_mb=round(run.peak_rss_mb, 1),
               loadavg_1min=[round(load, 2), round(os.getloadavg()[0], 2)])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--attempts", type=int, default=450)
    ap.add_argument("--entries", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workdir", default="/tmp/frlake-bench-bulk")
    ap.add_argument("--skip-one-at-a-time", action="store_true", help="only the batches (10,000 attempts)")
    ap.add_argument("--baseline", help="a checkout of frlake before batches (its rediagnose, alternated too)")
    ap.add_argument("--workers", type=int, default=2, help="the processes of the second batches run (1: none)")
    ap.add_argument("--lake", help="an ingested lake to rediagnose (no dumps written, no ingest)")
    ap.add_argument("--out", default=str(HERE / "results" / "bulk.json"))
    ap.add_argument("--step", nargs="+", help=argparse.SUPPRESS)  # internal: one step in this process
    args = ap.parse_args(argv)
    if args.step:
        name, *rest = args.step
        result = (step_ingest(rest[0], rest[1], int(rest[2])) if name == "ingest"
                  else step_rediagnose(rest[0], *map(int, rest[1:])))
        print(json.dumps(result))
        return 0

    work = Path(args.workdir)
    dumps, lake = work / f"dumps-{args.attempts}", Path(args.lake or work / f"lake-{args.attempts}")
    plan = {"files": None, "plan": []} if args.lake else write_dumps(dumps, args.attempts, args.entries)
    faults: dict[str, int] = {}
    for a in plan["plan"]:
        faults[a["fault"]] = faults.get(a["fault"], 0) + 1
    results: dict = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True,
                                 text=True).stdout.strip(),
        "machine": {"cpus": os.cpu_count(), "loadavg_start": [round(x, 2) for x in os.getloadavg()]},
        "attempts": args.attempts, "dumps": plan["files"], "entries_per_rank": args.entries, "faults": faults,
    }
    if not args.lake:
        print(f"{args.attempts} attempts, {plan['files']} dumps: ingest ...", flush=True)
        results["ingest"] = _run(["--step", "ingest", str(lake), str(dumps), str(args.workers)])
        print(json.dumps(results["ingest"]), flush=True)
    runs: dict[str, list] = {"one_at_a_time": [], "batches": [], "workers": [], "baseline": []}
    for _ in range(args.rounds):
        for mode, batch, workers in (("batches", 0, 1), ("workers", 0, args.workers), ("one_at_a_time", 1, 1),
                                     ("baseline", 0, 1)):
            if ((mode == "one_at_a_time" and args.skip_one_at_a_time) or (mode == "baseline" and not args.baseline)
                    or (mode == "workers" and args.workers < 2)):
                continue
            code = Path(args.baseline).resolve() if mode == "baseline" else CODE
            run = _run(["--step", "rediagnose", str(lake), str(batch), str(workers)], code)
            print(mode, json.dumps(run), flush=True)
            runs[mode].append(run)
    results["rediagnose"] = {}
    for mode, rs in runs.items():
        if rs:
            best = min(rs, key=lambda r: r["seconds"])
            results["rediagnose"][mode] = {**best, "attempts_per_s": round(best["attempts"] / best["seconds"], 1),
                                           "seconds_all": [r["seconds"] for r in rs]}
    r = results["rediagnose"]
    if "workers" in r:  # of the same round, each: the machine is shared
        r["workers"]["count"] = args.workers
        r["workers"]["speedup_rounds"] = [round(a["seconds"] / b["seconds"], 2)
                                          for a, b in zip(runs["batches"], runs["workers"], strict=True)]
        r["workers"]["cpu_ratio_rounds"] = [round(b["tree_cpu_s"] / a["tree_cpu_s"], 2)
                                            for a, b in zip(runs["batches"], runs["workers"], strict=True)]
    if "one_at_a_time" in r:
        r["speedup"] = round(r["one_at_a_time"]["seconds"] / r["batches"]["seconds"], 2)
    if "baseline" in r:
        r["baseline_code"] = args.baseline
        r["speedup_over_baseline"] = round(r["baseline"]["seconds"] / r["batches"]["seconds"], 2)
    r["same_diagnoses"] = len({x["stored_sha256"] for rs in runs.values() for x in rs}) == 1
    results["machine"]["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
