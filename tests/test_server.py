"""The JSON API and pages, with Flask's test client over the real corpus."""

from __future__ import annotations

import io
import json
import tarfile
import threading

import pytest

import frlake
from frlake.config import Settings
from frlake.errors import FrlakeError
from frlake.ingest import IngestOptions
from frlake.server import create_app
from frlake.server.config import ServerConfig, check_binding

TOKEN = "s3cret-token"


@pytest.fixture(scope="module")
def client(corpus_lake):
    return create_app(ServerConfig(corpus_lake)).test_client()


@pytest.fixture
def fresh(tmp_path, corpus):
    settings = Settings.resolve(tmp_path / "lake")
    with frlake.Frlake(settings) as fl:
        fl.ingest([corpus / "job-223715"])
    app = create_app(ServerConfig(settings, token=TOKEN, max_upload_bytes=2 << 20))
    return settings, app.test_client()


SAME_ORIGIN = {"Origin": "http://localhost"}  # what a browser sends from the server's own pages (a token-less server needs it)


def auth(token=TOKEN):
    return {"Authorization": f"Bearer {token}"}


def test_jobs_lists_every_attempt_with_its_verdict(client, truth):
    data = client.get("/api/jobs?per_page=500").get_json()
    assert data["total_attempts"] == len(truth)
    got = {(a["job"], a["attempt"]): a for a in data["attempts"]}
    for case in truth:
        a = got[(case["job"], case["attempt"])]
        assert a["verdict"] in {"healthy": ["healthy"], "straggler": ["straggler"]}.get(case["scenario"], ["hang", "mismatch"])
        if case["culprit_host"]:
            assert a["root"]["host"] == case["culprit_host"]
    assert sum(len(j["attempts"]) for j in data["jobs"]) == len(truth)
    started = [a["started_ns"] for a in data["attempts"]]
    assert started == sorted(started, reverse=True)  # newest first


def test_jobs_filters_and_paging(client):
    hung = client.get("/api/jobs?verdict=hang").get_json()
    assert hung["attempts"] and all(a["verdict"] == "hang" for a in hung["attempts"])
    on_host = client.get("/api/jobs?host=gpu-a01").get_json()
    assert on_host["attempts"] and all("gpu-a01" in a["hosts"] for a in on_host["attempts"])
    page1 = client.get("/api/jobs?per_page=7&page=1").get_json()
    page2 = client.get("/api/jobs?per_page=7&page=2").get_json()
    assert len(page1["attempts"]) == 7 and page1["attempts"][0] != page2["attempts"][0]
    assert client.get("/api/jobs?since=2100-01-01").get_json()["total_attempts"] == 0


def test_diagnosis_json_is_the_diagnose_json(client):
    d = client.get("/api/jobs/job-223715/attempts/0/diagnosis").get_json()
    assert (d["verdict"], d["culprits"][0]["rank"], d["culprits"][0]["host"]) == ("hang", 1, "gpu-b03")
    assert {"job", "attempt", "verdict", "culprits"} <= d.keys()


def test_progress_per_group_and_rank(client):
    groups = client.get("/api/jobs/job-223715/attempts/0/progress").get_json()["groups"]
    tp = next(g for g in groups if g["pg"] == "1")
    last = {r["rank"]: r["last_enqueued"] for r in tp["ranks"]}
    assert last == {0: 4, 1: 3}  # rank 1 never enqueued the 4th all_gather of its tp group
    assert all(r["last_completed"] is not None for g in groups for r in g["ranks"])  # from pg_status


def test_reports(client):
    hosts = client.get("/api/reports/flaky-hosts").get_json()["rows"]
    assert hosts[0]["host"] == "gpu-b03" and {"host", "score", "attempts", "culprit_attempts"} <= hosts[0].keys()
    slow = client.get("/api/reports/slow-ranks").get_json()["rows"]
    assert {"job", "rank", "host", "lateness_ms"} <= slow[0].keys()
    assert client.get("/api/reports/hangs?since=2020-01-01").get_json()["rows"]
    assert client.get("/api/reports/nope").status_code == 404


def test_query_answers_columns_and_rows(client):
    r = client.post("/api/query", json={"sql": "SELECT job, count(*) AS n FROM dumps GROUP BY job ORDER BY job LIMIT 2"},
                    headers=SAME_ORIGIN)
    assert r.status_code == 200
    body = r.get_json()
    assert body["columns"] == ["job", "n"] and body["rows"] == [["job-20d6d4", 4], ["job-223715", 4]]


@pytest.mark.parametrize(
    "method, url, kwargs, status, code",
    [
        ("get", "/api/jobs/nope/attempts/0/diagnosis", {}, 404, "not_found"),
        ("get", "/api/nothing-here", {}, 404, "not_found"),
        ("get", "/api/jobs?since=yesterday", {}, 400, "bad_request"),
        ("post", "/api/query", {"json": {"sql": "COPY dumps TO '/tmp/x.csv'"}}, 400, "query_refused"),
        ("post", "/api/query", {"json": {"nope": 1}}, 400, "bad_request"),
        ("post", "/api/query", {"data": "not json"}, 400, "bad_request"),
        ("delete", "/api/jobs", {}, 405, "method_not_allowed"),
    ],
)
def test_one_error_shape_for_all_errors(client, method, url, kwargs, status, code):
    r = getattr(client, method)(url, headers=SAME_ORIGIN, **kwargs)
    assert r.status_code == status
    body = r.get_json()
    assert set(body) == {"error"} and set(body["error"]) == {"status", "code", "message"}
    assert body["error"]["status"] == status and body["error"]["code"] == code and body["error"]["message"]


def test_trace_is_a_perfetto_trace(client, views):
    r = client.get("/api/jobs/job-223715/attempts/0/trace")
    assert r.status_code == 200 and "attachment" in r.headers["Content-Disposition"]
    trace = json.loads(r.get_data())
    events = trace["traceEvents"]
    con = views(client.application.config["FRLAKE"].settings.lake)
    n = con.execute("SELECT count(*) FROM entries WHERE job = 'job-223715' AND attempt = 0").fetchone()[0]
    assert sum(e["ph"] == "X" and e["cat"] != "frlake.culprit" for e in events) == n  # a small attempt is whole
    assert {e["pid"] for e in events if e["ph"] == "X"} == {0, 1, 2, 3}
    assert any(e["ph"] == "X" and e["cat"] == "frlake.culprit" and e["pid"] == 1 for e in events)  # rank 1 hung it
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(name.startswith("pg tp:") for name in names)


def test_pages_render(client):
    for url in ["/", "/?verdict=hang&host=gpu-b03", "/jobs/job-223715/attempts/0", "/hosts", "/hosts/gpu-b03",
                "/reports/slow-ranks", "/reports/hangs", "/sql", "/upload"]:
        r = client.get(url)
        assert r.status_code == 200, url
        assert b"<nav class=\"top\">" in r.data
    page = client.get("/jobs/job-223715/attempts/0").get_data(as_text=True)
    assert "gpu-b03" in page and "Root cause" in page and "chart.umd.min.js" in page
    assert client.get("/static/vendor/chart.umd.min.js").status_code == 200
    assert client.get("/no/such/page").status_code == 404


def test_upload_single_dump_and_archive(fresh, corpus):
    settings, c = fresh
    one = (corpus / "job-5f5228/attempt-0/gpu-b01/rank_2").read_bytes()
    r = c.post("/api/dumps", headers=auth(), data={"file": (io.BytesIO(one), "rank_2"), "job": "up-1", "attempt": "3",
                                                   "host": "node-9", "rank": "2"})
    assert r.status_code == 201, r.get_json()
    body = r.get_json()
    assert body["ingested"] == 1 and body["files"][0]["host"] == "node-9" and body["files"][0]["attempt"] == 3
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(corpus / "job-f2518d", arcname="job-f2518d")
    r = c.post("/api/dumps", headers=auth(), data={"file": (io.BytesIO(buf.getvalue()), "dumps.tar.gz"),
                                                   "layout": "{job}/attempt-{attempt}/{host}/rank_{rank}"})
    body = r.get_json()
    assert body["ingested"] == 4 and {f["job"] for f in body["files"]} == {"job-f2518d"}
    assert body["diagnosed"][0]["culprits"][0]["rank"] == 1
    garbage = c.post("/api/dumps", headers=auth(), data={"file": (io.BytesIO(b"\x80\x04junk"), "rank_0"), "job": "g",
                                                         "attempt": "0", "host": "h"}).get_json()
    assert garbage["rejected"] == 1 and garbage["rejected_files"][0]["reason"] == "truncated"


def _tar_with(member: tarfile.TarInfo, data: bytes = b"") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.addfile(member, io.BytesIO(data) if data else None)
    return buf.getvalue()


def _symlink():
    m = tarfile.TarInfo("job/attempt-0/h/rank_0")
    m.type, m.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return _tar_with(m)


def _escape():
    m = tarfile.TarInfo("../../etc/rank_0")
    m.size = 3
    return _tar_with(m, b"abc")


def _device():
    m = tarfile.TarInfo("job/attempt-0/h/rank_0")
    m.type = tarfile.CHRTYPE
    return _tar_with(m)


@pytest.mark.parametrize("archive", [_symlink, _escape, _device], ids=["symlink", "escape", "device"])
def test_unsafe_archives_are_refused_and_write_nothing(fresh, archive):
    settings, c = fresh
    before = sorted(p.relative_to(settings.lake) for p in settings.lake.rglob("*") if p.is_file() and "catalog" not in p.name)
    r = c.post("/api/dumps", headers=auth(), data={"file": (io.BytesIO(archive()), "x.tar.gz")})
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "upload_refused"
    after = sorted(p.relative_to(settings.lake) for p in settings.lake.rglob("*") if p.is_file() and "catalog" not in p.name)
    assert after == before


class _Zeros(io.RawIOBase):
    def __init__(self, n: int):
        self.left = n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n


def test_decompression_bomb_is_stopped(tmp_path):
    from frlake.ingest.upload import UploadLimits

    settings = Settings.resolve(tmp_path / "lake")
    limits = UploadLimits(max_unpacked_bytes=64 << 20, max_member_bytes=64 << 20)
    c = create_app(ServerConfig(settings, upload_limits=limits)).test_client()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        member = tarfile.TarInfo("job/attempt-0/h/rank_0")
        member.size = 200 << 20  # 200 MB of zeros, a fraction of a MB compressed
        tar.addfile(member, io.BufferedReader(_Zeros(member.size), 1 << 20))
    assert len(buf.getvalue()) < 1 << 20
    r = c.post("/api/dumps", headers=SAME_ORIGIN, data={"file": (io.BytesIO(buf.getvalue()), "bomb.tar.gz")})
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "upload_refused"
    assert "over the limit" in r.get_json()["error"]["message"]
    assert not (settings.lake / "tables").exists() or not any((settings.lake / "tables").rglob("*.parquet"))


def test_upload_size_cap_is_413(fresh):
    _, c = fresh
    r = c.post("/api/dumps", headers=auth(), data={"file": (io.BytesIO(b"x" * (3 << 20)), "big")})
    assert r.status_code == 413 and r.get_json()["error"]["code"] == "request_entity_too_large"


def test_token_guards_uploads_and_sql(fresh):
    _, c = fresh
    assert c.post("/api/query", json={"sql": "SELECT 1"}).status_code == 401
    assert c.post("/api/query", json={"sql": "SELECT 1"}, headers=auth("wrong")).status_code == 401
    assert c.post("/api/query", json={"sql": "SELECT 1"}, headers=auth()).status_code == 200
    r = c.post("/api/dumps", data={"file": (io.BytesIO(b"x"), "f")})
    assert r.status_code == 401 and r.get_json()["error"]["code"] == "unauthorized"
    assert c.get("/api/jobs").status_code == 200  # reading needs no token


def test_non_loopback_without_token_is_refused():
    with pytest.raises(FrlakeError, match="without a token"):
        check_binding("0.0.0.0", None)
    check_binding("0.0.0.0", "t")
    check_binding("127.0.0.1", None)
    check_binding("::1", None)


@pytest.mark.slow
def test_concurrent_uploads_and_reads_do_not_corrupt(fresh, corpus, views):
    settings, c = fresh
    app = c.application
    errors = []

    def upload(job):
        with app.test_client() as tc:
            data = (corpus / "job-5f5228/attempt-0/gpu-b01/rank_2").read_bytes()
            r = tc.post("/api/dumps", headers=auth(), data={"file": (io.BytesIO(data), "rank_2"), "job": job,
                                                            "attempt": "0", "host": "h"})
            if r.status_code not in (200, 201):
                errors.append(r.get_json())

    def read():
        with app.test_client() as tc:
            for _ in range(5):
                for url in ("/api/jobs", "/", "/api/reports/flaky-hosts"):
                    if tc.get(url).status_code != 200:
                        errors.append(url)

    threads = [threading.Thread(target=upload, args=(f"cc-{i}",)) for i in range(3)] + \
              [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    con = views(settings.lake)
    # the same bytes under three job names: a dump in each (the raw bytes are kept once, by sha256)
    assert con.execute("SELECT count(*), count(DISTINCT sha256), count(DISTINCT dump_id) FROM dumps "
                       "WHERE job LIKE 'cc-%'").fetchone() == (3, 1, 3)



def test_attempt_views_are_kept_per_catalog_version_and_follow_every_change(fresh, corpus):
    """The server keeps an attempt's diagnosis, progress and arrivals per catalog version: the same answer
    while nothing changed, the new one as soon as a dump is forgotten or ingested."""
    settings, c = fresh
    urls = ["/api/jobs/job-223715/attempts/0", "/api/jobs/job-223715/attempts/0/arrivals",
            "/api/jobs/job-223715/attempts/0/progress"]
    before = [c.get(u).get_json() for u in urls]
    assert [c.get(u).get_json() for u in urls] == before
    page = c.get("/jobs/job-223715/attempts/0").get_data(as_text=True)
    ranks = {r["rank"] for g in before[2]["groups"] for r in g["ranks"]}
    assert len(ranks) > 1
    gone = sorted(ranks)[-1]
    dump = next(p for p in (corpus / "job-223715").rglob("rank_*") if p.name.split(".")[0] == f"rank_{gone}")
    with frlake.Frlake(settings) as fl:
        assert fl.forget(job="job-223715", path=str(dump)).dumps == 1
    after = [c.get(u).get_json() for u in urls]
    assert gone not in {r["rank"] for g in after[2]["groups"] for r in g["ranks"]}
    assert after[0]["diagnosis"] != before[0]["diagnosis"] and after[1] != before[1]
    assert c.get("/jobs/job-223715/attempts/0").get_data(as_text=True) != page
    with frlake.Frlake(settings) as fl:
        fl.ingest([dump], IngestOptions(force=True))  # the undo: the dump again
    again = [c.get(u).get_json() for u in urls]
    assert again[2] == before[2] and again[1] == before[1]


def test_a_diagnosis_stored_again_changes_the_catalog_version(fresh):
    """What the server's cached views are keyed by: on SQLite the replacing incident may reuse the id of the
    one it deletes, so the version also reads the newest diagnosis time."""
    settings, c = fresh
    before = c.get("/api/jobs/job-223715/attempts/0/diagnosis").get_json()
    with frlake.Frlake(settings) as fl:
        version = fl.catalog.version()
        fl.mark_complete("job-223715", 0)
        assert fl.catalog.version() != version
    assert c.get("/api/jobs/job-223715/attempts/0/diagnosis").get_json()["complete"] != before["complete"]


PAGES = ["/", "/?q=b03", "/jobs/job-f70c5d", "/jobs/job-f70c5d/attempts/0", "/jobs/job-f70c5d/attempts/0/entries",
         "/hosts", "/hosts/gpu-b03", "/reports/slow-ranks", "/reports/hangs", "/reports/drain", "/reports/slow-links"]


def test_every_table_has_the_one_tables_chrome(client):
    """Each table of every page is _macros.html's data_table: its row count, sortable headers and CSV and JSON
    links that keep the page's query string and export that table; and breadcrumbs on every page."""
    import re

    for url in PAGES:
        page = client.get(url).get_data(as_text=True)
        assert '<nav class="crumbs"' in page, url
        tables = re.findall(r"<table[^>]*>", page)
        assert tables, url
        for tag in tables:
            assert re.search(r'class="data sortable( cards)?"', tag), (url, tag)
        boxes = page.split('<div class="table-box">')[1:]
        assert len(boxes) == len(tables), url
        for box in boxes:
            assert re.search(r"\d+ rows? · click a header to sort", box), url
            for fmt in ("csv", "json"):
                href = re.search(rf'class="export-{fmt}" href="([^"]*)"', box).group(1).replace("&amp;", "&")
                assert f"_format={fmt}" in href and ("q=b03" in href) == ("q=b03" in url), (url, href)
                assert client.get(url.split("?")[0] + href).status_code == 200, (url, href)


def test_names_and_times_never_break_inside(client):
    page = client.get("/jobs/job-f70c5d/attempts/0").get_data(as_text=True)
    assert '<span class="name">gpu-b04</span>' in page  # in "waited for by": rank 2 on gpu-b04, ...
    assert '<time data-sort=' in client.get("/").get_data(as_text=True)


def test_the_drain_list_explains_a_host_and_the_host_page_shows_its_state(client):
    drain = client.get("/reports/drain?explain=gpu-b03").get_data(as_text=True)
    assert 'id="drain-explain"' in drain and "gpu-b03: score" in drain and "frlake report drain --explain gpu-b03" in drain
    assert "no evidence against it" in client.get("/reports/drain?explain=gpu-zz9").get_data(as_text=True)
    host = client.get("/hosts/gpu-b03").get_data(as_text=True)
    state = host.split('id="drain-state"', 1)[1].split("</p>", 1)[0]
    assert "exclude" in state and "/reports/drain?explain=gpu-b03" in state and "--explain gpu-b03" in state
    assert 'class="drain-action">ok<' in client.get("/hosts/gpu-c04").get_data(as_text=True)


def test_an_empty_slow_links_page_says_why_as_the_command_does(client, corpus_lake):
    from typer.testing import CliRunner

    from frlake.cli.main import app
    from frlake.query.reports import REPORTS

    why = REPORTS["slow-links"].empty
    assert "no dump with timing (duration_ms)" in why
    assert why.replace("'", "&#39;") in client.get("/reports/slow-links").get_data(as_text=True)
    result = CliRunner().invoke(app, ["--lake", str(corpus_lake.lake), "report", "slow-links"])
    assert result.exit_code == 0 and why in " ".join(result.stderr.split())


def test_the_attempt_page_opens_its_trace_in_perfetto_and_the_sql_page_links_its_result(client):
    page = client.get("/jobs/job-f70c5d/attempts/0").get_data(as_text=True)
    assert 'id="open-perfetto" data-trace="/api/jobs/job-f70c5d/attempts/0/trace"' in page
    sql = client.get("/sql?sql=SELECT+1+AS+one").get_data(as_text=True)
    assert 'href="/sql?sql=SELECT+1+AS+one&amp;_format=csv"' in sql and 'id="sql-highlight"' in sql
