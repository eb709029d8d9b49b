"""Load check of the web service: N parallel clients on loopback against the
pages and the API of a real `frlake serve` (waitress), for a bounded time.

    python bench/bench_server.py [--clients 8] [--seconds 20]

Ingests the shared corpus into a fresh lake, starts the server, then each
client loops over the pages and API calls (GETs, and POST /api/query) until
the time is up. Prints requests per second, p50/p95/p99 latency per kind and
the error count (which must be zero); writes bench/results/server.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from frlake.config import Settings  # noqa: E402
from frlake.session import Frlake  # noqa: E402

CORPUS = ROOT / "tests" / "corpus" / "visible"
TOKEN = "bench-token"
REQUESTS = [
    ("page jobs", "GET", "/", None),
    ("page attempt", "GET", "/jobs/job-223715/attempts/0", None),
    ("page hosts", "GET", "/hosts", None),
    ("page hangs", "GET", "/reports/hangs", None),
    ("api jobs", "GET", "/api/jobs", None),
    ("api diagnosis", "GET", "/api/jobs/job-f70c5d/attempts/0/diagnosis", None),
    ("api arrivals", "GET", "/api/jobs/job-65a07f/attempts/0/arrivals", None),
    ("api flaky-hosts", "GET", "/api/reports/flaky-hosts", None),
    ("api slow-ranks", "GET", "/api/reports/slow-ranks", None),
    ("api query", "POST", "/api/query", {"sql": "SELECT op, count(*) AS n FROM entries GROUP BY op ORDER BY n DESC"}),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base: str, method: str, path: str, body) -> int:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()
        return resp.status


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--threads", type=int, default=8, help="server request threads")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="frlake-bench-server-"))
    lake = work / "lake"
    with Frlake(Settings.resolve(lake)) as fl:  # closed before the server opens the lake
        fl.ingest([CORPUS])
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "frlake.cli.main", "--lake", str(lake), "serve", "--port", str(port),
                               "--token", TOKEN, "--threads", str(args.threads)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                call(base, "GET", "/api/health", None)
                break
            except OSError:
                time.sleep(0.1)
        latencies: dict[str, list[float]] = {name: [] for name, *_ in REQUESTS}
        errors: list[str] = []
        lock = threading.Lock()
        deadline = time.perf_counter() + args.seconds

        def client(offset: int) -> None:
            i = offset
            while time.perf_counter() < deadline:
                name, method, path, body = REQUESTS[i % len(REQUESTS)]
                i += 1
                start = time.perf_counter()
                try:
                    status = call(base, method, path, body)
                    ok = status == 200
                except Exception as exc:  # noqa: BLE001 - every failure counts as an error
                    ok, status = False, repr(exc)
                elapsed = time.perf_counter() - start
                with lock:
                    if ok:
                        latencies[name].append(elapsed)
                    else:
                        errors.append(f"{name}: {status}")

        started = time.perf_counter()
        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(work, ignore_errors=True)

    total = sum(len(v) for v in latencies.values())
    every = sorted(x for v in latencies.values() for x in v)

    def pct(values, q):
        return round(statistics.quantiles(values, n=100)[q - 1] * 1000, 1) if len(values) > 1 else None

    results = {"clients": args.clients, "seconds": round(wall, 1), "requests": total, "errors": len(errors),
               "throughput_rps": round(total / wall, 1), "p50_ms": pct(every, 50), "p95_ms": pct(every, 95),
               "p99_ms": pct(every, 99),
               "per_kind": {k: {"n": len(v), "p50_ms": pct(v, 50), "p95_ms": pct(v, 95)} for k, v in latencies.items()},
               "first_errors": errors[:5]}
    print(f"{args.clients} clients for {wall:.1f} s: {total} requests, {results['throughput_rps']} req/s, "
          f"p50 {results['p50_ms']} ms, p95 {results['p95_ms']} ms, p99 {results['p99_ms']} ms, errors {len(errors)}")
    for k, v in results["per_kind"].items():
        print(f"  {k:18s} n={v['n']:5d}  p50 {v['p50_ms']} ms  p95 {v['p95_ms']} ms")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "server.json").write_text(json.dumps(results, indent=2) + "\n")
    if errors:
        sys.exit(f"{len(errors)} errors, e.g. {errors[:3]}")


if __name__ == "__main__":
    main()
