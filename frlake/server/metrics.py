"""``GET /metrics``: the server and the lake in Prometheus' text format, written by ``prometheus_client``.

Two kinds of numbers:

- the lake's (incidents by verdict, attempts, dumps, rejected files, runs, bytes, alerts delivered) are read
  from the catalog at each scrape by a collector (:class:`LakeCollector`), so every process of a server
  gives the same numbers;
- the process's own (requests by route and their latency, the watch's scans) are counted where they happen.
  With several server processes, set ``PROMETHEUS_MULTIPROC_DIR`` to an empty folder shared by them: the
  counters are kept there and every scrape adds them up (prometheus_client's multiprocess mode;
  docs/operations.md).

The route is behind the same token rule as users' SQL: a server with a token (any server off loopback) asks
for ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from flask import Flask, Response, current_app, g, request
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from frlake.server.errors import ApiError
from frlake.server.security import has_token

# latency buckets of a page or an API answer: most under 100 ms, a report over a year of history in seconds
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# an alert's delay: seconds to a minute (a watch's floor is 10 s), minutes where it waits for an attempt to settle
ALERT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


def alert_delivered(app: Flask, body: dict) -> None:
    """Count one alert the receiver took: its delay from the attempt's newest dump file (body["timeline"])."""
    last = (body.get("timeline") or {}).get("last_dump_at")
    if last is None or "frlake_metrics" not in app.extensions:
        return
    delay = datetime.now(UTC).timestamp() - datetime.fromisoformat(last).timestamp()
    app.extensions["frlake_metrics"]["alert_delay"].observe(max(0.0, delay))


def watch_looked(app: Flask, look) -> None:
    if "frlake_metrics" in app.extensions:
        app.extensions["frlake_metrics"]["watch_look_cpu"].observe(look.cpu_seconds)


def _multiprocess() -> bool:
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir"))


class LakeCollector:
    """The lake's numbers, read from the catalog through the session at each scrape."""

    def __init__(self, app: Flask):
        self.app = app

    def describe(self):
        return []  # read at scrape time only: registering it reads nothing

    def collect(self):
        session = self.app.extensions["frlake"]
        stats = session.lake_stats()
        yield _gauge("frlake_attempts", "Attempts in the lake.", stats.attempts)
        yield _gauge("frlake_dumps", "Dumps in the lake.", stats.dumps)
        incidents = GaugeMetricFamily("frlake_incidents", "Attempts by the verdict of their stored diagnosis.",
                                      labels=["verdict"])
        from frlake.entities import VERDICTS

        for verdict in VERDICTS:
            incidents.add_metric([verdict], stats.incidents_by_verdict.get(verdict, 0))
        yield incidents
        rejected = GaugeMetricFamily("frlake_files_rejected", "Files whose latest record is a rejection, by reason.",
                                     labels=["reason"])
        for reason, n in sorted(stats.rejected_by_reason.items()):
            rejected.add_metric([reason], n)
        yield rejected
        # a gauge: a run counted running is counted finished (or failed) later
        runs = GaugeMetricFamily("frlake_runs", "Runs that write the lake (ingest, forget, compact, diagnose), by "
                                                "kind and state (running, finished, failed).", labels=["kind", "status"])
        for (kind, status), n in sorted(stats.runs.items()):
            runs.add_metric([kind, status], n)
        yield runs
        last = GaugeMetricFamily("frlake_last_run_duration_seconds", "How long the newest finished run of each kind "
                                                                     "took.", labels=["kind"])
        last_at = GaugeMetricFamily("frlake_last_run_finished_timestamp_seconds", "When the newest run of each kind "
                                                                                  "finished.", labels=["kind"])
        for kind, (finished, seconds) in sorted(stats.last_run.items()):
            last.add_metric([kind], seconds)
            last_at.add_metric([kind], _epoch(finished))
        yield last
        yield last_at
        size = GaugeMetricFamily("frlake_lake_bytes", "Bytes the lake takes on disk: its committed Parquet files and "
                                                      "its compressed copies of the dumps.", labels=["kind"])
        size.add_metric(["parquet"], stats.parquet_bytes)
        size.add_metric(["raw"], stats.raw_bytes or 0)
        yield size
        yield _gauge("frlake_dumps_bytes", "The dumps' own bytes, as they were read (each distinct content once).",
                     stats.dumps_bytes)
        yield from self._alerts(session.notify_status())
        yield from self._watch(self.app.extensions.get("frlake_watch"))

    @staticmethod
    def _alerts(destinations):
        families = {
            "sent": CounterMetricFamily("frlake_notify_sent", "Alerts the receiver took.", labels=["receiver"]),
            "failed": CounterMetricFamily("frlake_notify_failed", "Tries to deliver an alert that failed (each retry "
                                                                  "counts).", labels=["receiver"]),
            "dropped": CounterMetricFamily("frlake_notify_dropped", "Alerts given up after their tries, or pushed out "
                                                                    "of a full queue.", labels=["receiver"]),
            "queued": GaugeMetricFamily("frlake_notify_queued", "Alerts waiting to be delivered.", labels=["receiver"]),
        }
        for d in destinations:
            name = f"{d.label} {d.key[:8]}"  # two webhooks on one host differ by the hash of their URL
            for field, family in families.items():
                family.add_metric([name], getattr(d, field))
        yield from families.values()

    @staticmethod
    def _watch(watcher):
        if watcher is None:
            return
        s = watcher.status()
        yield CounterMetricFamily("frlake_watch_scans", "Scans of the watched folders by this server.", value=s.scans)
        yield CounterMetricFamily("frlake_watch_scan_errors", "Scans that failed.", value=s.errors)
        if s.last_finished_at is not None:
            yield _gauge("frlake_watch_last_scan_timestamp_seconds", "When the last scan finished.",
                         _epoch(s.last_finished_at))
            yield _gauge("frlake_watch_lag_seconds", "Seconds since the last scan finished (a scan every --every "
                                                     "keeps it below that).",
                         max(0.0, (datetime.now(UTC) - s.last_finished_at).total_seconds()))
        if s.last_summary:
            yield _gauge("frlake_watch_last_scan_duration_seconds", "How long the last scan that went well took.",
                         s.last_summary["seconds"])
        yield CounterMetricFamily("frlake_watch_looks", "Looks at the watched folders' times.", value=s.looks)
        yield CounterMetricFamily("frlake_watch_full_scans", "Full scans of the watched tree.", value=s.full_scans)
        if s.last_look:
            yield _gauge("frlake_watch_last_look_folders", "Folders the last look stat'ed.",
                         s.last_look["folders_statted"])
            yield _gauge("frlake_watch_last_look_seconds", "How long the last look took.", s.last_look["seconds"])
        yield _gauge("frlake_watch_waiting_attempts", "Attempts with ranks not dumped, in their quiet period.",
                     s.waiting)
        yield CounterMetricFamily("frlake_watch_settled", "Attempts settled after their quiet period.",
                                  value=s.settled)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


def _epoch(value: datetime) -> float:
    return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()


def register(app: Flask) -> None:
    """Count every request by route, and serve ``GET /metrics``."""
    mine = CollectorRegistry()  # this app's own: two apps in one process (tests) keep their numbers apart
    where = None if _multiprocess() else mine  # multiprocess: the values go to the shared folder's files
    requests_total = Counter("frlake_http_requests", "Requests answered, by route, method and status.",
                             ["route", "method", "status"], registry=where)
    latency = Histogram("frlake_http_request_duration_seconds", "Time to answer a request, by route.",
                        ["route", "method"], buckets=BUCKETS, registry=where)
    mine.register(LakeCollector(app))
    delay = Histogram("frlake_alert_delay_seconds", "From the newest dump of an attempt landing (its file's mtime) "
                                                    "to the receiver taking its alert (2xx).",
                      buckets=ALERT_BUCKETS, registry=where)
    looks = Histogram("frlake_watch_look_cpu_seconds", "CPU one look at the watched folders' times took.",
                      buckets=BUCKETS, registry=where)
    app.extensions["frlake_metrics"] = {"alert_delay": delay, "watch_look_cpu": looks}

    @app.before_request
    def _started():
        g.metrics_started = time.perf_counter()

    @app.after_request
    def _counted(response):
        started = g.pop("metrics_started", None)
        if started is not None:
            route = request.url_rule.rule if request.url_rule is not None else "(no route)"
            requests_total.labels(route, request.method, str(response.status_code)).inc()
            latency.labels(route, request.method).observe(time.perf_counter() - started)
        return response

    def metrics():
        config = current_app.config["FRLAKE"]
        if config.token and not has_token(config):
            raise ApiError(401, "unauthorized", "/metrics needs 'Authorization: Bearer <token>' with the server's "
                                                "token (Prometheus: authorization: {credentials: ...})")
        registry = mine
        if _multiprocess():
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            registry.register(LakeCollector(app))
        return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

    metrics.query_params = frozenset()  # it takes no parameter (params.takes)
    app.add_url_rule("/metrics", "metrics", metrics, methods=["GET"])
