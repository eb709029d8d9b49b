"""Slow links: a host whose groups' collectives take 3x longer is found
across attempts and jobs; the hosts it shared a group with are not; a late
watchdog is not a slow link. The report reads the per-attempt summary tables
(collective_durations, watchdog_lags) that each diagnosis writes: they give
the answer the entries give, follow every change of the attempt, and go
with it."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

import pytest

from frlake.config import Settings
from frlake.query.reports import REPORTS
from frlake.query.window import Window
from frlake.schema import SUMMARY_TABLES
from frlake.session import Frlake
from frlake.storage.compact import CompactOptions
from frlake.storage.files import LakeFiles
from tests.fleet import slow_link_attempt, slow_link_fleet, write_timed
from tests.helpers import assert_lake_is_clean

START = datetime(2026, 11, 2, tzinfo=UTC)

# The report's definition over the entries themselves (what frlake computed on every report before the
# summary tables): the oracle the summaries must agree with.
FROM_ENTRIES = """
    WITH att AS (SELECT job, attempt FROM attempts), t AS (
      SELECT e.* FROM entries e JOIN att USING (job, attempt)
      WHERE e.duration_ms IS NOT NULL AND e.duration_ms > 0 AND NOT e.is_p2p AND e.state = 'completed'
        AND e.collective_seq_id IS NOT NULL
    ), g AS (
      SELECT job, attempt, pg_desc, collective_seq_id AS seq, op, pg_name, median(duration_ms) AS d,
             list(DISTINCT host ORDER BY host) AS hosts
      FROM t GROUP BY ALL
    ), s AS (
      SELECT *, d / median(d) OVER w AS ratio, count(*) OVER w AS n_groups
      FROM g WINDOW w AS (PARTITION BY job, attempt, pg_desc, seq, op)
    ), h AS (SELECT unnest(hosts) AS host, job, attempt, pg_desc, op, ratio FROM s WHERE n_groups >= 2)
    SELECT host, round(median(ratio), 3) AS slowdown, count(*) AS collectives,
           count(DISTINCT (job, attempt)) AS attempts, count(DISTINCT job) AS jobs,
           count(*) FILTER (WHERE ratio >= 1.5) AS slow_collectives,
           (SELECT round(median((time_discovered_completed_ns - time_discovered_started_ns) / 1e6 - duration_ms), 3)
            FROM t WHERE t.host = h.host) AS watchdog_lag_ms
    FROM h GROUP BY host ORDER BY host
"""
COMPARED = ("host", "slowdown", "collectives", "attempts", "jobs", "slow_collectives", "watchdog_lag_ms")


@pytest.fixture(scope="module")
def timed(tmp_path_factory) -> Settings:
    root = tmp_path_factory.mktemp("timed")
    settings = Settings.resolve(root / "lake")
    with Frlake(settings) as fl:
        summary = fl.ingest([slow_link_fleet(root / "nfs", START)])
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


def test_the_report_reads_the_summaries_and_gives_what_the_entries_give(timed):
    with Frlake(timed) as fl:
        con = fl.connect(catalog_views=("attempts",))
        want = [dict(zip(COMPARED, r)) for r in con.execute(FROM_ENTRIES).fetchall()]
        con.execute("DROP VIEW entries")  # the report does not read them
        got = REPORTS["slow-links"].run(con, Window())
    assert sorted(({k: r[k] for k in COMPARED} for r in got), key=lambda r: r["host"]) == want
    assert len(want) == 8 and sum(r["collectives"] for r in want) > 100


def test_the_page_lists_the_slow_link(timed):
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    client = create_app(ServerConfig(timed)).test_client()
    page = client.get("/reports/slow-links")
    assert page.status_code == 200 and b"h3" in page.data and b"slow_link" in page.data
    assert client.get("/api/reports/slow-links").get_json()["rows"][0]["host"] == "h3"


def _summary_files(settings: Settings, key: tuple[str, int]) -> dict[str, int]:
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        files = LakeFiles(fl.catalog)
        return {t: len(files.committed(t, key)) for t in SUMMARY_TABLES}


def _stored_and_fresh(settings: Settings, job: str, attempt: int) -> tuple[dict, dict]:
    """The attempt's rows of the summary tables as stored, and as a diagnosis of its entries gives them now."""
    with Frlake(settings) as fl:
        con = fl.connect(catalog_views=(), partition=(job, attempt))
        stored = {t: con.execute(f"SELECT * EXCLUDE (job, attempt) FROM {t} ORDER BY ALL").fetchall()
                  for t in SUMMARY_TABLES}
        fresh = {t: sorted(tuple(r.values()) for r in rows.to_pylist())
                 for t, rows in fl._analyse(job, attempt, None, summarise=True)[1].tables.items()}
    return stored, fresh


@pytest.mark.slow
def test_the_summary_is_rewritten_when_the_attempt_changes_and_forgotten_with_it(tmp_path):
    """An attempt's summary is that of its stored diagnosis: half its ranks first (two of its four dp
    groups), then the rest (all four, h3's groups slower), then one rank forgotten, then the attempt."""
    a = slow_link_attempt("job-z", 0, [0, 1, 2, 3, 4, 5, 6, 7], START)
    nfs = write_timed(tmp_path / "nfs", [a])
    folder = nfs / "job-z" / "attempt-0"
    first, rest = tmp_path / "first", tmp_path / "rest"
    for host in sorted(p.name for p in folder.iterdir()):
        shutil.copytree(folder / host, (first if host in ("h0", "h1", "h2", "h3") else rest) / "job-z" / "attempt-0" / host)
    settings = Settings.resolve(tmp_path / "lake")
    key = ("job-z", 0)

    with Frlake(settings) as fl:
        fl.ingest([first])
    stored, fresh = _stored_and_fresh(settings, *key)
    assert stored == fresh and {r[0] for r in stored["collective_durations"]} == {"0", "1", "2"}
    assert {r[0] for r in stored["watchdog_lags"]} == {"h0", "h1", "h2", "h3"}
    assert _summary_files(settings, key) == {"collective_durations": 1, "watchdog_lags": 1, "host_links": 1}

    with Frlake(settings) as fl:
        fl.ingest([rest])
    stored, fresh = _stored_and_fresh(settings, *key)
    assert stored == fresh and {r[0] for r in stored["collective_durations"]} == {"0", "1", "2", "3", "4"}
    assert _summary_files(settings, key) == {"collective_durations": 1, "watchdog_lags": 1, "host_links": 1}  # replaced, not added
    slowdown = {r[0]: r[-1] for r in stored["collective_durations"] if r[1] == "dp" and r[2] == 1}
    assert slowdown["2"] > 2.5 and max(slowdown["1"], slowdown["3"], slowdown["4"]) < 1.2  # h3 is in dp group 2

    with Frlake(settings) as fl:
        fl.forget(path=str(rest / "job-z" / "attempt-0" / "h6"))  # ranks 12 and 13: h6 leaves the attempt
    stored, fresh = _stored_and_fresh(settings, *key)
    assert stored == fresh and "h6" not in {r[0] for r in stored["watchdog_lags"]}
    assert all("h6" not in r[6] for r in stored["collective_durations"])

    with Frlake(settings) as fl:
        fl.forget(job="job-z")
        assert fl.report("slow-links") == []
    assert _summary_files(settings, key) == {"collective_durations": 0, "watchdog_lags": 0, "host_links": 0}
    with Frlake(settings) as fl:
        fl.compact(options=CompactOptions(retire_grace_s=0))  # a writer that sweeps the retired files
    assert_lake_is_clean(settings)


def test_a_diagnosis_older_than_the_stored_one_leaves_the_summary_alone(timed, tmp_path):
    """Two processes diagnosing one attempt: the one that read an older revision stores nothing, and its
    files are withdrawn (no pending record, no stray file)."""
    from frlake.storage.summary_tables import SummaryWriter

    lake = tmp_path / "copy"
    shutil.copytree(timed.lake, lake)
    settings = Settings.resolve(lake)
    with Frlake(settings) as fl:
        before = _summary_files(settings, ("job-x", 0))
        diag, rows = fl._analyse("job-x", 0, None, summarise=True)
        with SummaryWriter(fl.catalog, fl.lake) as writer:
            assert writer.store(diag, -1, rows) is False  # the stored diagnosis saw revision >= 0
            assert writer.store(diag, fl.catalog.attempts.revision("job-x", 0), rows) is True
        assert LakeFiles(fl.catalog).pending() == []
    assert _summary_files(settings, ("job-x", 0)) == before
    with Frlake(settings) as fl:
        fl.compact(options=CompactOptions(retire_grace_s=0))  # a writer that sweeps the retired files
    assert_lake_is_clean(settings)


def test_an_attempt_diagnosed_by_an_older_frlake_gets_its_summary_after_the_upgrade(timed, tmp_path):
    """Catalog 0008 marks every attempt's diagnosis due: the next ingest (diagnose_pending) writes the
    summaries of a lake whose attempts were diagnosed before they existed."""
    from frlake.catalog import db

    lake = tmp_path / "old"
    shutil.copytree(timed.lake, lake)
    settings = Settings.resolve(lake)
    engine = db.make_engine(settings.db_url)
    db.downgrade(engine, "0007")  # as an older frlake left it: no summary files recorded
    db.upgrade(engine)
    engine.dispose()
    with Frlake(settings) as fl:
        assert len(fl.catalog.diagnoses.pending()) == 3
        assert fl.report("slow-links") == []  # not summarised yet
        fl.diagnose_pending()
        assert fl.catalog.diagnoses.pending() == []
        assert fl.report("slow-links")[0]["host"] == "h3"


def test_a_rank_dumped_twice_counts_once_in_the_summary(tmp_path):
    """The summaries are made from the entries the diagnosis read, each rank's newest dump: an earlier
    snapshot of rank 5 (its first 8 steps again, in a second file) adds no entry to any collective."""
    nfs = write_timed(tmp_path / "nfs", [slow_link_attempt("job-s", 0, [0, 1, 2, 3, 4, 5, 6, 7], START)])
    early = slow_link_attempt("job-s", 0, [0, 1, 2, 3, 4, 5, 6, 7], START)
    early.steps = 8
    write_timed(tmp_path / "early", [early])
    folder = nfs / "job-s" / "attempt-0" / "h2"
    shutil.copy(tmp_path / "early" / "job-s" / "attempt-0" / "h2" / "rank_5", folder / "rank_5_early")
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([nfs])
        con = fl.connect(catalog_views=(), partition=("job-s", 0))
        assert con.execute("SELECT count(*) FROM dumps WHERE rank = 5").fetchone()[0] == 2
        world = con.execute("SELECT seq, entries FROM collective_durations WHERE pg_name = '0' ORDER BY seq").fetchall()
        lags = dict(con.execute("SELECT host, entries FROM watchdog_lags").fetchall())
    assert world == [(step, 16) for step in range(1, 13)]  # 16 members, rank 5 once, at every step
    assert lags["h2"] == lags["h1"] == 2 * 12 * 2  # 2 ranks x 12 steps x (world + dp group)


@pytest.mark.slow
def test_a_diagnosis_keeps_the_summaries_of_its_revision_and_rediagnose_writes_them_again(timed, tmp_path):
    """`frlake diagnose` of an attempt whose diagnosis is not due stores the diagnosis and keeps the summary
    files (they are of the revision it is still at); `frlake rediagnose` writes them again, equal."""
    lake = tmp_path / "copy"
    shutil.copytree(timed.lake, lake)
    settings = Settings.resolve(lake)
    key = ("job-x", 0)

    def files() -> list[str]:
        with Frlake(settings) as fl:
            return sorted(f.path for t in SUMMARY_TABLES for f in LakeFiles(fl.catalog).committed(t, key))

    before, (stored, _) = files(), _stored_and_fresh(settings, *key)
    with Frlake(settings) as fl:
        assert fl.catalog.diagnoses.state(*key)[1] is False
        diagnosed_at = fl.catalog.version()
        fl.diagnose(*key)
        assert fl.catalog.version() != diagnosed_at  # the diagnosis was stored again
    assert files() == before
    with Frlake(settings) as fl:
        fl.rediagnose("job-x")
    again, (stored_again, fresh) = files(), _stored_and_fresh(settings, *key)
    assert len(again) == len(SUMMARY_TABLES) and not set(again) & set(before)
    assert stored_again == stored == fresh
