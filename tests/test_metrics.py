"""``GET /metrics``, parsed by prometheus_client's own parser: the lake's numbers, the requests by route from
several server threads and from several processes, the token rule; and the alerts of ``frlake serve
--notify`` seen at /api/notify and on the jobs page."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from frlake.config import Settings
from frlake.ingest.pipeline import IngestOptions
from frlake.notify.config import NotifyConfig
from frlake.server import create_app
from frlake.server.config import ServerConfig
from frlake.session import Frlake
from tests.receiver import Receiver

CORPUS = Path(__file__).resolve().parent / "corpus" / "visible"
REPO = Path(__file__).resolve().parent.parent


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    """Every sample of the exposition, by name and labels (the library's parser: a format error raises)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _value(samples, name: str, **labels) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def _copy(dst: Path, *jobs: str) -> Path:
    for job in jobs:
        shutil.copytree(CORPUS / job, dst / job)
    return dst


@pytest.fixture
def lake_with_incidents(tmp_path) -> Settings:
    settings = Settings.resolve(tmp_path / "lake")
    nfs = _copy(tmp_path / "nfs", "job-223715", "job-5f5228", "job-e79e4a")
    (nfs / "job-e79e4a/attempt-0/junk").mkdir(parents=True)
    (nfs / "job-e79e4a/attempt-0/junk/rank_9").write_bytes(b"not a dump")
    with Frlake(settings) as fl:
        fl.ingest([nfs], IngestOptions(workers=1))
    return settings


def test_metrics_parse_and_say_what_the_lake_holds(lake_with_incidents):
    client = create_app(ServerConfig(lake_with_incidents)).test_client()
    assert client.get("/api/jobs").status_code == 200
    answer = client.get("/metrics")
    assert answer.status_code == 200 and answer.content_type.startswith("text/plain; version=")
    s = _samples(answer.get_data(as_text=True))
    with Frlake(lake_with_incidents) as fl:
        [(n_attempts,)] = fl.catalog.rows(__import__("sqlalchemy").text("SELECT count(*) FROM attempts"))
        diagnoses = [fl.catalog.diagnoses.get(j, a) for j, a in fl.attempt_keys()]
    assert _value(s, "frlake_attempts") == n_attempts == 5
    verdicts = [d.verdict.value for d in diagnoses]
    for verdict in ("hang", "mismatch", "healthy", "straggler", "incomplete"):
        assert _value(s, "frlake_incidents", verdict=verdict) == verdicts.count(verdict)
    assert _value(s, "frlake_incidents", verdict="hang") >= 1
    assert _value(s, "frlake_dumps") == 4 + 3 * 4 + 8
    assert sum(v for (name, _), v in s.items() if name == "frlake_files_rejected") == 1
    assert _value(s, "frlake_runs", kind="ingest", status="finished") == 1
    assert _value(s, "frlake_last_run_duration_seconds", kind="ingest") > 0
    raw = sum(p.stat().st_size for p in (lake_with_incidents.lake / "raw").rglob("*") if p.is_file())
    assert _value(s, "frlake_lake_bytes", kind="raw") == raw
    parquet = sum(p.stat().st_size for p in (lake_with_incidents.lake / "tables").rglob("*.parquet"))
    assert _value(s, "frlake_lake_bytes", kind="parquet") == parquet
    assert _value(s, "frlake_dumps_bytes") > raw  # the copies are compressed
    assert _value(s, "frlake_http_requests_total", route="/api/jobs", method="GET", status="200") == 1
    assert _value(s, "frlake_http_request_duration_seconds_count", route="/api/jobs", method="GET") == 1


def test_requests_from_several_threads_are_all_counted(lake_with_incidents):
    import waitress

    app = create_app(ServerConfig(lake_with_incidents))
    server = waitress.create_server(app, host="127.0.0.1", port=0, threads=4)
    port = server.socket.getsockname()[1]

    def run():
        try:
            server.run()
        except OSError:  # its sockets closed under it at the end of the test
            pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{port}"
        routes = ["/api/health", "/api/jobs", "/api/jobs/job-223715/attempts/0", "/api/nothing-here"]

        def get(path):
            try:
                with urllib.request.urlopen(base + path, timeout=30) as r:
                    return r.status
            except urllib.error.HTTPError as exc:
                return exc.code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(get, routes * 10))
        assert statuses.count(404) == 10
        with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
            s = _samples(r.read().decode())
    finally:
        server.close()
        thread.join(5)
    assert _value(s, "frlake_http_requests_total", route="/api/health", method="GET", status="200") == 10
    assert _value(s, "frlake_http_requests_total", route="/api/jobs/<path:job>/attempts/<int:attempt>",
                  method="GET", status="200") == 10
    assert _value(s, "frlake_http_requests_total", route="(no route)", method="GET", status="404") == 10
    assert sum(v for (name, labels), v in s.items() if name == "frlake_http_requests_total") == 40


def test_metrics_need_the_token_when_the_server_has_one(lake_with_incidents):
    client = create_app(ServerConfig(lake_with_incidents, token="t0ken")).test_client()
    refused = client.get("/metrics")
    assert refused.status_code == 401 and "Authorization: Bearer" in refused.get_data(as_text=True)
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = client.get("/metrics", headers={"Authorization": "Bearer t0ken"})
    assert ok.status_code == 200 and _value(_samples(ok.get_data(as_text=True)), "frlake_attempts") == 5


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_several_server_processes_add_up_their_requests(lake_with_incidents, tmp_path):
    """PROMETHEUS_MULTIPROC_DIR: two `frlake serve` processes keep their counters in one folder, and a scrape
    of either gives the sum."""
    shared = tmp_path / "prom"
    shared.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(shared), "PYTHONPATH": str(REPO)}
    ports = [_free_port(), _free_port()]
    procs = [subprocess.Popen([sys.executable, "-m", "frlake.cli.main", "serve", "--lake",
                               str(lake_with_incidents.lake), "--port", str(p)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for p in ports]
    try:
        for port, proc in zip(ports, procs, strict=True):
            deadline = time.monotonic() + 60
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=5).read()
                    break
                except OSError:
                    assert proc.poll() is None, proc.stderr.read().decode()
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
        for _ in range(4):
            urllib.request.urlopen(f"http://127.0.0.1:{ports[1]}/api/health", timeout=5).read()
        scraped = [_samples(urllib.request.urlopen(f"http://127.0.0.1:{p}/metrics", timeout=30).read().decode())
                   for p in ports]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)
    for s in scraped:  # 1 + 5 health checks, whichever process is asked
        assert _value(s, "frlake_http_requests_total", route="/api/health", method="GET", status="200") == 6
        assert _value(s, "frlake_attempts") == 5


def test_serve_watch_notify_posts_what_a_scan_found_and_shows_failures(tmp_path):
    settings = Settings.resolve(tmp_path / "lake")
    tree = tmp_path / "nfs"
    tree.mkdir()
    from frlake.server.watch import watch_config

    with Receiver() as receiver:
        receiver.answers = [(500, 0.0)]
        # the retry waits long enough for the page to show the failure first
        config = NotifyConfig(urls=(receiver.url,), public_url="http://frlake.test:8750", backoff_s=3.0, poll_s=0.2)
        app = create_app(ServerConfig(settings, watch=watch_config([str(tree)], 0.2), notify=config))
        client = app.test_client()
        try:
            # the watch finds a hang: the attempt appears whole (a scan of half of it would see another verdict)
            staged = _copy(tmp_path / "staging", "job-223715") / "job-223715"
            for f in staged.rglob("rank_*"):
                os.utime(f)  # written now (the copy keeps the corpus' times)
            shutil.move(staged, tree / "job-223715")
            deadline = time.monotonic() + 60
            while not client.get("/api/notify").get_json()["destinations"][0]["failed"]:
                assert time.monotonic() < deadline
                time.sleep(0.1)
            page = client.get("/").get_data(as_text=True)
            assert "Alerts on" in page and "HTTP 500 Internal Server Error (try 1)" in page
            assert "secret-path" not in page
            # the receiver has the message before the outbox counts it sent (after the answer, in its own
            # transaction): wait for both
            while not (receiver.accepted and client.get("/api/notify").get_json()["destinations"][0]["sent"]):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            state = client.get("/api/notify").get_json()
            metrics = _samples(client.get("/metrics").get_data(as_text=True))
        finally:
            app.extensions["frlake_watch"].stop(10)
            app.extensions["frlake_alerts"].stop(10)
    [m] = [g.json for g in receiver.accepted]
    assert (m["job"], m["verdict"], m["url"]) == ("job-223715", "hang", "http://frlake.test:8750/jobs/job-223715/attempts/0")
    assert state["notifying"] and state["on"] == ["mismatch", "hang", "incomplete", "straggler"]
    [d] = state["destinations"]
    assert (d["sent"], d["failed"], d["queued"]) == (1, 1, 0)
    [sent] = [v for (name, _), v in metrics.items() if name == "frlake_notify_sent_total"]
    assert sent == 1
    assert metrics[("frlake_watch_scans_total", ())] >= 1
    # the alert's delay: from its newest dump file's mtime (copied just now) to the receiver's 2xx
    assert metrics[("frlake_alert_delay_seconds_count", ())] == 1
    assert 0 < metrics[("frlake_alert_delay_seconds_sum", ())] < 60
    assert metrics[("frlake_watch_looks_total", ())] >= 1 and metrics[("frlake_watch_full_scans_total", ())] >= 1


def test_api_notify_without_alerts(tmp_path):
    client = create_app(ServerConfig(Settings.resolve(tmp_path / "lake"))).test_client()
    assert client.get("/api/notify").get_json() == {"notifying": False, "destinations": []}
