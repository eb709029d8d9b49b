"""What alerts and metrics cost on a lake of many attempts: a notify pass that announces every attempt of an
ingest (queue, then deliver each message to a real receiver on loopback), the idle pass a server runs every
``poll_s`` seconds when nothing is new, and a ``GET /metrics`` scrape.

    python bench/bench_notify.py [--attempts 2000] [--repeat 5] [--workdir DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))

from history import plan_history, write_attempts  # noqa: E402

from frlake.config import Settings  # noqa: E402
from frlake.ingest.pipeline import IngestOptions  # noqa: E402
from frlake.notify.config import NotifyConfig  # noqa: E402
from frlake.server import create_app  # noqa: E402
from frlake.server.config import ServerConfig  # noqa: E402
from frlake.session import Frlake  # noqa: E402
from tests.receiver import Receiver  # noqa: E402


def timed(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times), 4), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attempts", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "notify.json")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="frlake-bench-notify-"))
    dumps = work / "dumps"
    hist = plan_history(jobs=args.attempts, seed=13, entries=50, worlds=((8, 1),), attempts=((1, 1),))
    write_attempts(dumps, hist)
    settings = Settings.resolve(work / "lake")
    results: dict = {"attempts": args.attempts}
    with Receiver() as receiver, Frlake(settings) as fl:
        config = NotifyConfig(urls=(receiver.url,), max_queue=args.attempts + 1)
        notifier = fl.notifier(config)
        notifier.start()
        t = time.perf_counter()
        fl.ingest([dumps], IngestOptions(workers=2, chunk_files=256))
        results["ingest_s"] = round(time.perf_counter() - t, 1)
        verdicts = [d.verdict.value for d in (fl.catalog.diagnoses.get(j, a) for j, a in fl.attempt_keys())]
        results["unhealthy"] = sum(v != "healthy" for v in verdicts)
        t = time.perf_counter()
        queued = notifier.enqueue(receiver.url)
        results["first_pass_queue_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        sent = notifier.deliver(receiver.url).sent
        results["first_pass_deliver_s"] = round(time.perf_counter() - t, 3)
        results["messages"] = {"queued": queued, "sent": sent, "received": len(receiver.accepted)}
        results["idle_pass_s"], idle = timed(notifier.run, args.repeat)
        assert idle.queued == 0 and idle.sent == 0, idle
    client = create_app(ServerConfig(settings)).test_client()
    results["metrics_scrape_s"], answer = timed(lambda: client.get("/metrics"), args.repeat)
    assert answer.status_code == 200
    results["metrics_bytes"] = len(answer.get_data())
    print(json.dumps(results, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
