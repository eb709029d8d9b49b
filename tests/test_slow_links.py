"""Slow links: a host whose groups' collectives take 3x longer is found
across attempts and jobs; the hosts it shared a group with are not; a late
watchdog is not a slow link."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from frlake.config import Settings
from frlake.query.reports import Window
from frlake.session import Frlake
from tests.fleet import TimedAttempt, write_timed
from tests.helpers import ingest

START = datetime(2026, 11, 2, tzinfo=UTC)


def _attempt(job: str, n: int, order: list[int]) -> TimedAttempt:
    """16 ranks on 8 hosts (2 each, placed in ``order``); a world group, and
    dp groups of 4 ranks, so each dp group crosses two hosts."""
    hosts = [f"h{order[r // 2]}" for r in range(16)]
    groups = {"0": ("default_pg", list(range(16)))}
    groups.update({str(1 + g): ("dp", list(range(4 * g, 4 * g + 4))) for g in range(4)})
    return TimedAttempt(job, n, START + timedelta(days=n, hours=5 if job.endswith("y") else 1), hosts, groups,
                        slow_links={"h3"}, late_watchdog={"h6"})


@pytest.fixture(scope="module")
def timed(tmp_path_factory) -> Settings:
    root = tmp_path_factory.mktemp("timed")
    attempts = [_attempt("job-x", 0, [0, 1, 2, 3, 4, 5, 6, 7]), _attempt("job-x", 1, [3, 0, 1, 2, 5, 4, 7, 6]),
                _attempt("job-y", 0, [5, 6, 7, 0, 1, 2, 4, 3])]
    settings = Settings.resolve(root / "lake")
    summary = ingest([write_timed(root / "nfs", attempts)], settings)
    assert summary.ingested == 48 and summary.rejected == 0
    return settings


def test_the_slow_link_host_is_on_top_and_its_partners_are_not(timed):
    with Frlake(timed) as fl:
        rows = fl.report("slow-links", Window())
    top = rows[0]
    assert top["host"] == "h3" and top["verdict"] == "slow_link", rows[:3]
    assert top["slowdown"] == pytest.approx(3.0, rel=0.15) and top["attempts"] == 3 and top["jobs"] == 2
    assert [r["host"] for r in rows if r["verdict"] == "slow_link"] == ["h3"]


def test_a_late_watchdog_is_not_a_slow_link(timed):
    with Frlake(timed) as fl:
        rows = {r["host"]: r for r in fl.report("slow-links", Window())}
    assert rows["h6"]["verdict"] == "ok" and rows["h6"]["slowdown"] < 1.5
    assert rows["h6"]["watchdog_lag_ms"] > 40 > rows["h3"]["watchdog_lag_ms"]


def test_the_page_lists_the_slow_link(timed):
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    client = create_app(ServerConfig(timed)).test_client()
    page = client.get("/reports/slow-links")
    assert page.status_code == 200 and b"h3" in page.data and b"slow_link" in page.data
    assert client.get("/api/reports/slow-links").get_json()["rows"][0]["host"] == "h3"
