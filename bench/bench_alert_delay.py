#!/usr/bin/env python3
"""Seconds to the channel: from an attempt's last dump landing to its alert at the receiver.

    python bench/bench_alert_delay.py [--files 100000] [--worlds 8,128,1024] [--entries 2000]
                                      [--rounds 3] [--spread 60] [--poll 2s] [--workdir DIR] [--out FILE]

1. A tree of ``--files`` existing dump files (8-rank attempts of many jobs, bench/history.py), ingested
   into the lake first, as a server that has watched it for a while holds it.
2. ``frlake serve --watch TREE --notify URL`` in its own process, a real receiver on loopback (this
   process) recording when each alert arrives. The watch's looks at the unchanged tree are read from
   ``GET /api/watch`` (their CPU: the floor is 0.5 s).
3. A writer drops new attempts into the tree, each round one of each ``--worlds`` size at once, a hang
   (bench/synth.py ``missing_last``: its last rank never joins its last collective). Each rank's file lands
   at a random moment within ``--spread`` seconds, as torch writes it: half to a temporary hidden name then
   renamed, half written in place.
4. The delay of an attempt: from its last file landing (closed or renamed) to the receiver taking its first
   alert that is not partial (the settled one; a partial alert may have come before, and is reported too).

Prints a table by world size (median and max delay) and writes bench/results/alert_delay.json.
Floors (issue 45): median under 10 s and every one under 20 s; a look at the unchanged tree under 0.5 s CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))


class Receiver:
    """A webhook receiver on loopback: every alert with the moment it arrived."""

    def __init__(self):
        self.got: list[tuple[float, dict]] = []
        self._lock = threading.Lock()
        me = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                at = time.time()
                with me._lock:
                    me.got.append((at, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def alerts(self, job: str) -> list[tuple[float, dict]]:
        with self._lock:
            return [(t, b) for t, b in self.got if b["job"] == job]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def build_tree(work: Path, files: int) -> tuple[Path, Path, float]:
    """The tree of existing dumps and a lake that holds them (kept in ``work`` for the next run)."""
    from history import plan_history, write_attempts

    from frlake.config import Settings
    from frlake.ingest.pipeline import IngestOptions
    from frlake.session import Frlake

    tree, lake = work / "tree", work / "lake"
    written, done = work / "tree.written", work / "tree.done"
    started = time.perf_counter()
    if not written.exists():
        shutil.rmtree(tree, ignore_errors=True)
        shutil.rmtree(lake, ignore_errors=True)
        done.unlink(missing_ok=True)
        hist = plan_history(jobs=files // 8, seed=45, entries=20, worlds=((8, 1),), attempts=((1, 1),))
        write_attempts(tree, hist)
        old = time.time() - 3600  # a tree that has stood for an hour: its folders are cold (changes.WARM_S)
        for path in tree.rglob("rank_*"):
            os.utime(path, (old, old))
        written.write_text(str(sum(1 for _ in tree.rglob("rank_*"))))
    if lake.exists():  # a lake kept from a run of an older frlake
        subprocess.run([sys.executable, "-m", "frlake", "--lake", str(lake), "db", "upgrade"], check=True,
                       capture_output=True)
    if not done.exists():  # ingested (again: an interrupted ingest completes)
        with Frlake(Settings.resolve(lake)) as fl:
            fl.ingest([tree], IngestOptions(workers=2, chunk_files=512))
        done.write_text(written.read_text())
    return tree, lake, round(time.perf_counter() - started, 1)


def land(attempt: Path, staged: Path, tree: Path, spread: float, rng: random.Random) -> tuple[float, int]:
    """Copy an attempt's files (``attempt``, a folder under ``staged``) into the tree over ``spread`` seconds,
    as torch writes them; returns when the last one landed (time.time()) and how many files."""
    files = sorted(attempt.rglob("rank_*"))
    plan = sorted((rng.uniform(0, spread), f) for f in files)
    start = time.monotonic()
    last = 0.0
    for i, (at, f) in enumerate(plan):
        time.sleep(max(0.0, at - (time.monotonic() - start)))
        target = tree / f.relative_to(staged)
        target.parent.mkdir(parents=True, exist_ok=True)
        data = f.read_bytes()
        if i % 2:  # to a hidden temporary name, then renamed (atomic)
            tmp = target.with_name(f".{target.name}.tmp")
            tmp.write_bytes(data)
            os.rename(tmp, target)
        else:  # in place, as torch's DebugInfoWriter writes
            with open(target, "wb") as out:
                out.write(data)
        last = time.time()
    return last, len(files)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--worlds", default="8,128,1024")
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spread", type=float, default=60.0)
    ap.add_argument("--poll", default="2s")
    ap.add_argument("--settle", default="60s")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for an attempt's alert")
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "alert_delay.json")
    args = ap.parse_args(argv)
    from synth import write_job

    work = args.workdir or Path(tempfile.mkdtemp(prefix="frlake-bench-alerts-"))
    work.mkdir(parents=True, exist_ok=True)
    worlds = [int(w) for w in args.worlds.split(",")]
    tree, lake, built_s = build_tree(work, args.files)
    existing = int((work / "tree.done").read_text())
    print(f"tree: {existing} existing dump files ({built_s} s to write and ingest, or reused)", flush=True)
    # the attempts to drop, written once outside the tree
    staged = work / "staged"
    shutil.rmtree(staged, ignore_errors=True)
    plans = []
    for r in range(args.rounds):
        for w in worlds:
            job = f"incoming-{w}-{r}-{int(time.time())}"
            write_job(str(staged), w, args.entries, job=job, fault="missing_last", culprit=w - 1, seed=r)
            plans.append((r, w, job))
    receiver = Receiver()
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "frlake", "--lake", str(lake), "serve", "--port", str(port), "--watch", str(tree),
         "--every", "10m", "--poll", args.poll, "--settle", args.settle, "--notify", receiver.url],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    results: dict = {"files": existing, "worlds": worlds, "entries": args.entries, "rounds": args.rounds,
                     "spread_s": args.spread, "poll": args.poll, "settle": args.settle, "attempts": []}
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            if server.poll() is not None:
                raise SystemExit(f"frlake serve exited: {server.stderr.read().decode()[-2000:]}")
            try:
                status = _get(f"{base}/api/watch")
                if status.get("full_scans", 0) >= 1 and status.get("looks", 0) >= 3:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            raise SystemExit("the server's first full scan did not finish in 10 minutes")
        results["first_full_scan_s"] = status["last_summary"]["seconds"]
        looks = []
        for _ in range(10):  # the unchanged tree: each look's CPU
            n = status["looks"]
            while (status := _get(f"{base}/api/watch"))["looks"] == n:
                time.sleep(0.2)
            looks.append(status["last_look"])
        results["unchanged_looks"] = looks
        cpu = [lk["cpu_seconds"] for lk in looks]
        print(f"looks at the unchanged tree: {looks[-1]['folders_statted']} folders stat'ed, "
              f"{looks[-1]['folders_listed']} listed; CPU median {statistics.median(cpu):.3f} s, max {max(cpu):.3f} s "
              f"(floor 0.5 s); the first full scan took {results['first_full_scan_s']} s", flush=True)
        for r in range(args.rounds):
            batch = [(w, job) for rr, w, job in plans if rr == r]
            landed: dict[str, tuple[float, int]] = {}
            threads = []
            for w, job in batch:
                rng = random.Random(f"{r}-{w}")
                t = threading.Thread(target=lambda job=job, rng=rng: landed.__setitem__(
                    job, land(staged / job / "attempt-0", staged, tree, args.spread, rng)))
                t.start()
                threads.append(t)
            for t in threads:
                t.join()
            for w, job in batch:
                last, n = landed[job]
                until = time.monotonic() + args.timeout
                final = None
                while time.monotonic() < until and final is None:
                    final = next(((t, b) for t, b in receiver.alerts(job) if not b.get("partial")), None)
                    time.sleep(0.05)
                got = receiver.alerts(job)
                partial = next(((t, b) for t, b in got if b.get("partial")), None)
                row = {"round": r, "world": w, "job": job, "files": n,
                       "delay_s": None if final is None else round(final[0] - last, 3),
                       "verdict": None if final is None else final[1]["verdict"],
                       "root_rank": None if final is None or not final[1]["root_cause"] else final[1]["root_cause"]["rank"],
                       "partial_before_s": None if partial is None else round(partial[0] - last, 3),
                       "alerts": len(got)}
                results["attempts"].append(row)
                print(f"  round {r} world {w:5}: {row['delay_s']} s after its last dump "
                      f"({row['verdict']}, root rank {row['root_rank']}; partial alert at "
                      f"{row['partial_before_s']} s)", flush=True)
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=30).read().decode()
        results["alert_delay_metric"] = [line for line in metrics.splitlines()
                                         if line.startswith("frlake_alert_delay_seconds_")]
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    print("\n| world | attempts | median delay | max delay | root cause right |")
    print("|---|---|---|---|---|")
    summary = {}
    for w in worlds:
        rows = [a for a in results["attempts"] if a["world"] == w]
        delays = [a["delay_s"] for a in rows if a["delay_s"] is not None]
        right = sum(1 for a in rows if a["root_rank"] == w - 1)
        summary[w] = {"median_s": statistics.median(delays) if delays else None,
                      "max_s": max(delays) if delays else None, "missing": len(rows) - len(delays), "right": right}
        print(f"| {w} | {len(rows)} | {summary[w]['median_s']} s | {summary[w]['max_s']} s | {right} of {len(rows)} |")
    results["summary"] = summary
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
