"""docs/api.md against the server, on the corpus lake: every route is in the
endpoints table, every query parameter a route reads is documented for it,
every top-level key of each answer is the documented set, every error has
the one shape, and every time is ISO 8601 with its offset."""

from __future__ import annotations

import html
import io
import json
import re
from datetime import UTC

import pytest
from typer.testing import CliRunner
from werkzeug.datastructures import ImmutableMultiDict

from frlake.cli import main as frlake_cli
from frlake.config import Settings
from frlake.server import create_app
from frlake.server.config import ServerConfig
from frlake.session import Frlake
from tests.helpers import ROOT

API_MD = (ROOT / "docs" / "api.md").read_text()
SAME_ORIGIN = {"Origin": "http://localhost"}


def documented() -> dict[tuple[str, str], dict]:
    """(method, path) -> {"params": {...}, "keys": {...}} from the endpoints table."""
    section = API_MD.split("## Endpoints", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        m = re.match(r"\| `(GET|POST|DELETE) (/api/[^`]*)` \|\s*(.*?)\s*\|\s*(.*?)\s*\|$", line)
        if not m:
            continue
        method, path, params, answer = m.groups()
        first = re.search(r"\{([^{}]*)\}", answer)
        keys = set(re.findall(r'"(\w+)"', first.group(1))) if first else set()
        # a parameter is a backticked name before its explanation; values in parentheses are not names
        names = {n for n in re.findall(r"(?:^|, |; )`(\w+)`", re.sub(r"\([^()]*(\([^()]*\))?[^()]*\)", "", params))}
        out[(method, path)] = {"params": names, "keys": keys}
    return out


DOC = documented()

# One request per endpoint, with every documented parameter given a real value.
CALLS = [
    ("GET", "/api/health", "/api/health", None),
    ("GET", "/api/notify", "/api/notify", None),
    ("GET", "/api/jobs", "/api/jobs?q=job&job=job-223715&host=b03&verdict=hang&reason=missing&since=2026-01-01&until=2100-01-01T00:00:00%2B01:00&page=1&per_page=5", None),
    ("GET", "/api/jobs/<job>", "/api/jobs/job-223715", None),
    ("GET", "/api/jobs/<job>/attempts/<n>", "/api/jobs/job-223715/attempts/0", None),
    ("GET", "/api/jobs/<job>/attempts/<n>/progress", "/api/jobs/job-223715/attempts/0/progress", None),
    ("GET", "/api/jobs/<job>/attempts/<n>/diagnosis", "/api/jobs/job-223715/attempts/0/diagnosis", None),
    ("GET", "/api/jobs/<job>/attempts/<n>/arrivals", "/api/jobs/job-223715/attempts/0/arrivals?pg=1&last=10", None),
    ("GET", "/api/reports/<name>", "/api/reports/hangs?since=2026-01-01&until=2100-01-01&limit=3", None),
    ("GET", "/api/hosts", "/api/hosts?since=2026-01-01&until=2100-01-01", None),
    ("GET", "/api/hosts/<host>", "/api/hosts/gpu-b03", None),
    ("GET", "/api/query/examples", "/api/query/examples", None),
    ("POST", "/api/query", "/api/query", {"json": {"sql": "SELECT job, started FROM attempts LIMIT 2"}}),
]


class _Recording(ImmutableMultiDict):
    """The query parameters a view asks for, whether or not the request had them."""

    asked: set[str] = set()

    def get(self, key, default=None, type=None):
        _Recording.asked.add(key)
        return super().get(key, default, type)

    def __getitem__(self, key):
        _Recording.asked.add(key)
        return super().__getitem__(key)

    def getlist(self, key, type=None):
        _Recording.asked.add(key)
        return super().getlist(key, type)


@pytest.fixture(scope="module")
def app(corpus_lake):
    app = create_app(ServerConfig(corpus_lake))
    app.request_class.parameter_storage_class = _Recording
    yield app
    app.request_class.parameter_storage_class = ImmutableMultiDict


def _offsets_everywhere(value, where="") -> list[str]:
    """Every ISO 8601 date-time in an answer carries its offset."""
    bad = []
    if isinstance(value, dict):
        for k, v in value.items():
            bad += _offsets_everywhere(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value[:50]):
            bad += _offsets_everywhere(v, f"{where}[{i}]")
    elif isinstance(value, str) and re.match(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d", value):
        if not re.search(r"(Z|[+-]\d\d:\d\d)$", value):
            bad.append(f"{where}={value}")
    return bad


def test_every_route_is_in_the_endpoints_table(app):
    routes = set()
    for rule in app.url_map.iter_rules():
        if not rule.endpoint.startswith("api."):
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", rule.rule).replace("<attempt>", "<n>")
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            routes.add((method, path))
    assert routes == set(DOC), f"in the server only: {routes - set(DOC)}; in docs/api.md only: {set(DOC) - routes}"


@pytest.mark.parametrize(("method", "route", "url", "body"), CALLS, ids=[c[1] for c in CALLS])
def test_each_answer_has_the_documented_keys_and_parameters(app, method, route, url, body):
    client = app.test_client()
    _Recording.asked = set()
    r = client.open(url, method=method, headers=SAME_ORIGIN, **(body or {}))
    assert r.status_code == 200, r.get_data(as_text=True)
    data = r.get_json()
    assert set(data) == DOC[(method, route)]["keys"], f"{route}: docs/api.md says {DOC[(method, route)]['keys']}"
    asked = _Recording.asked - {"_format", "_table"}
    assert asked <= DOC[(method, route)]["params"], f"{route} reads undocumented parameters {asked}"
    assert DOC[(method, route)]["params"] - {"name"} <= asked | {"file", "job", "attempt", "host", "rank", "layout",
                                                                 "sql"}, route
    assert not _offsets_everywhere(data), _offsets_everywhere(data)


def test_the_diagnosis_and_job_answers_on_a_hang(app):
    client = app.test_client()
    d = client.get("/api/jobs/job-223715/attempts/0/diagnosis").get_json()
    root = d["culprits"][0]
    assert (root["rank"], root["host"], root["role"]) == (1, "gpu-b03", "root")
    assert root["waited_by"] and all({"rank", "host"} == set(w) for w in root["waited_by"])
    assert root["waiters"] >= len(root["waited_by"])
    detail = client.get("/api/jobs/job-223715/attempts/0").get_json()
    cause = detail["cause"]  # host or code?, a judgement from the history before it (docs/reports.md, "causes")
    assert cause["label"] == "judgement from history" and cause["call"] in ("host", "code", "unclear")
    assert (cause["culprit_rank"], cause["culprit_host"]) == (1, "gpu-b03") and cause["host"]["host"] == "gpu-b03"
    assert client.get("/api/jobs/job-223715/attempts/0").get_json()["cause"] == cause  # the same answer
    job = client.get("/api/jobs/job-f70c5d").get_json()
    assert [a["attempt"] for a in job["attempts"]] == [0, 1, 2]
    again = {(r["kind"], r["value"]) for r in job["recurring"]}
    assert ("host", "gpu-b03") in again  # the root cause of attempts 0 and 2


@pytest.mark.parametrize(("url", "status"), [
    ("/api/jobs?verdict=hanged", 400), ("/api/jobs?reason=bored", 400), ("/api/jobs?since=yesterday", 400),
    ("/api/jobs?per_page=0", 400), ("/api/jobs/job-223715/attempts/0/arrivals?pg=99", 404),
    ("/api/jobs/nope", 404), ("/api/jobs/job-223715/attempts/9", 404), ("/api/hosts/nope", 404),
    ("/api/reports/nope", 404), ("/api/nothing-here", 404),
])
def test_wrong_values_and_names_are_errors_of_one_shape(app, url, status):
    r = app.test_client().get(url)
    assert r.status_code == status, r.get_data(as_text=True)
    assert set(r.get_json()) == {"error"} and set(r.get_json()["error"]) == {"status", "code", "message"}
    assert r.get_json()["error"]["status"] == status


def test_a_wrong_method_is_a_405_with_allow(app):
    r = app.test_client().delete("/api/jobs", headers=SAME_ORIGIN)
    assert r.status_code == 405
    assert set(r.headers["Allow"].replace(" ", "").split(",")) >= {"GET"}
    assert r.get_json()["error"]["code"] == "method_not_allowed"


@pytest.fixture
def small(tmp_path, corpus):
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([corpus / "job-223715"])
    return settings


def test_uploads_and_complete_have_the_documented_keys(small, corpus, tmp_path):
    app = create_app(ServerConfig(small, max_upload_bytes=1 << 20))
    client = app.test_client()
    dump = (corpus / "job-e211c0/attempt-1/gpu-a01/rank_1").read_bytes()
    r = client.post("/api/dumps", headers=SAME_ORIGIN, content_type="multipart/form-data",
                    data={"file": (io.BytesIO(dump), "rank_1"), "job": "one-of-four", "attempt": "0",
                          "host": "gpu-z99", "rank": "1"})
    assert r.status_code == 201, r.get_data(as_text=True)
    up = r.get_json()
    assert set(up) == DOC[("POST", "/api/dumps")]["keys"]
    assert up["attempts"] == [{"job": "one-of-four", "attempt": 0, "url": "/jobs/one-of-four/attempts/0",
                               "verdict": "incomplete", "summary": up["diagnosed"][0]["summary"]}]
    assert "waiting for more dumps" in up["attempts"][0]["summary"]
    done = client.post("/api/jobs/one-of-four/attempts/0/complete", headers=SAME_ORIGIN)
    assert done.status_code == 200, done.get_data(as_text=True)
    body = done.get_json()
    assert set(body) == DOC[("POST", "/api/jobs/<job>/attempts/<n>/complete")]["keys"]
    assert body["complete"] and not body["diagnosis"]["waiting_for_dumps"]
    assert body["verdict"] == "hang" and body["diagnosis"]["culprits"]  # diagnosed with the dump there is
    with Frlake(small) as fl:  # the mark survives a rediagnose (after an upgrade of frlake)
        (again,) = fl.rediagnose("one-of-four")
    assert again.complete and not again.waiting_for_dumps and again.verdict == "hang"


def test_an_upload_over_the_limit_gets_the_json_error(small):
    app = create_app(ServerConfig(small, max_upload_bytes=1 << 20))
    r = app.test_client().post("/api/dumps", headers=SAME_ORIGIN, content_type="multipart/form-data",
                               data={"file": (io.BytesIO(b"x" * (2 << 20)), "big")})
    assert r.status_code == 413
    assert r.get_json()["error"]["code"] == "request_entity_too_large"



def test_every_page_works_with_an_unknown_host(tmp_path, corpus):
    """job-f2518d's rank 1 never joined; here it also left no dump, and the
    others ran one per host, so nothing tells its host: the root's host is None."""
    import shutil

    tree = tmp_path / "nfs"
    for rank, host in ((0, "gpu-x01"), (2, "gpu-x02"), (3, "gpu-x03")):
        dst = tree / "job-nohost" / "attempt-0" / host / f"rank_{rank}"
        dst.parent.mkdir(parents=True)
        shutil.copy(next((corpus / "job-f2518d" / "attempt-0").glob(f"*/rank_{rank}")), dst)
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([tree])
    client = create_app(ServerConfig(settings)).test_client()
    d = client.get("/api/jobs/job-nohost/attempts/0/diagnosis").get_json()
    assert (d["verdict"], d["culprits"][0]["rank"], d["culprits"][0]["reason"]) == ("hang", 1, "no_dump")
    assert "host" not in d["culprits"][0]
    for url in ("/", "/?host=x0", "/jobs/job-nohost", "/jobs/job-nohost/attempts/0", "/hosts", "/hosts/gpu-x01",
                "/reports/hangs", "/reports/slow-ranks", "/reports/hangs?_format=csv", "/api/reports/hangs",
                "/api/jobs/job-nohost", "/api/hosts/gpu-x01"):
        r = client.get(url)
        assert r.status_code == 200, (url, r.get_data(as_text=True)[:500])
    assert b"unknown host" in client.get("/reports/hangs").data


def test_since_and_until_take_date_times_with_offsets(app):
    """Both ends inclusive, to the instant, whatever the offset it is written in."""
    from datetime import datetime, timedelta, timezone
    from urllib.parse import quote

    client = app.test_client()
    attempts = client.get("/api/jobs?per_page=500").get_json()["attempts"]
    a = next(x for x in attempts if (x["job"], x["attempt"]) == ("job-223715", 0))
    start = datetime.fromisoformat(a["started_at"]).astimezone(timezone(timedelta(hours=2)))
    ms = timedelta(milliseconds=1)

    def listed(**bounds) -> bool:
        query = "&".join(f"{k}={quote(v.isoformat())}" for k, v in bounds.items())
        rows = client.get(f"/api/jobs?per_page=500&{query}").get_json()["attempts"]
        return any((x["job"], x["attempt"]) == ("job-223715", 0) for x in rows)

    assert listed(since=start, until=start)
    assert not listed(since=start + ms)
    assert not listed(until=start - ms)
    assert listed(since=start - ms, until=(start + ms).astimezone(UTC))


def test_waitress_lets_flask_answer_an_upload_over_the_limit(small):
    """Through the real server: the body limit of waitress sits above Flask's,
    so an upload over --max-upload-mb gets the API's JSON error, not waitress's text."""
    import json
    import socket
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "frlake.cli.main", "--lake", str(small.lake), "serve",
                             "--port", str(port), "--max-upload-mb", "1"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(url + "/api/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        boundary = "frlakeboundary"
        body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big\"\r\n\r\n".encode()
                + b"x" * (3 << 20) + f"\r\n--{boundary}--\r\n".encode())
        request = urllib.request.Request(url + "/api/dumps", data=body, method="POST", headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}", "Origin": url})
        with pytest.raises(urllib.error.HTTPError) as answer:
            urllib.request.urlopen(request, timeout=30)
        assert answer.value.code == 413
        assert answer.value.headers["Content-Type"].startswith("application/json")
        assert json.loads(answer.value.read())["error"]["code"] == "request_entity_too_large"
    finally:
        proc.terminate()
        proc.wait(10)


def _attempts(client, query: str) -> list[tuple[str, int]]:
    data = client.get(f"/api/jobs?per_page=500&{query}").get_json()
    assert data["total_attempts"] == len(data["attempts"]), query
    return [(a["job"], a["attempt"]) for a in data["attempts"]]


def test_search_finds_a_job_by_a_part_of_its_name_a_host_or_a_verdict(app):
    """?q= is a part of a job's name or of a host's name, any case, or a verdict's whole word; the facets
    count what it found, and it pages like every other filter."""
    client = app.test_client()
    assert _attempts(client, "q=F70C5D") == [("job-f70c5d", 2), ("job-f70c5d", 1), ("job-f70c5d", 0)]
    assert _attempts(client, "q=f70c5d") == _attempts(client, "job=job-f70c5d")
    assert _attempts(client, "job=f70c5d") == []  # job= is one job, exactly
    by_host = set(_attempts(client, "q=b03"))
    assert by_host == set(_attempts(client, "host=b03")) and ("job-223715", 0) in by_host
    hangs = client.get("/api/jobs?q=hang&per_page=500").get_json()
    assert hangs["attempts"] and {a["verdict"] for a in hangs["attempts"]} == {"hang"}
    assert hangs["facets"]["verdict"] == [{"value": "hang", "count": hangs["total_attempts"]}]
    assert _attempts(client, "q=hang&verdict=healthy") == []
    assert _attempts(client, "q=no-such-thing") == []
    assert _attempts(client, "q=%25") == []  # a LIKE wildcard is a character like the others
    first = client.get("/api/jobs?q=b03&per_page=2").get_json()
    second = client.get("/api/jobs?q=b03&per_page=2&page=2").get_json()
    assert first["total_attempts"] == second["total_attempts"] == len(by_host) and len(first["attempts"]) == 2
    assert not {(a["job"], a["attempt"]) for a in first["attempts"]} & {(a["job"], a["attempt"]) for a in second["attempts"]}
    page = client.get("/?q=f70c5d").get_data(as_text=True)
    assert 'id="q"' in page and 'value="f70c5d"' in page and "3 attempt(s) matching" in page


EXAMPLE = {"job": "job-223715", "attempt": "0", "host": "gpu-b03", "name": "hangs", "attach_id": "0123456789abcdef"}  # real values of route variables


def _example_url(rule) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", lambda m: EXAMPLE[m.group(1)], rule.rule)


def test_an_unknown_parameter_is_a_400_that_names_the_ones_taken_on_every_route(app):
    """A mistyped filter (?hots=b03) never shows everything as if it had matched: every page and every API
    route says which parameters it takes, and a request with another is a 400 naming them."""
    client = app.test_client()
    routes = [r for r in app.url_map.iter_rules() if r.endpoint != "static"]
    assert len(routes) > 20
    for rule in routes:
        taken = app.view_functions[rule.endpoint].query_params
        if callable(taken):
            taken = taken(**{k: EXAMPLE[k] for k in rule.arguments})
        method = next(m for m in ("POST", "DELETE", "GET") if m in rule.methods)
        r = client.open(_example_url(rule) + "?hots=b03", method=method, headers=SAME_ORIGIN)
        assert r.status_code == 400, (rule.rule, r.status_code, r.get_data(as_text=True)[:300])
        message = r.get_json()["error"]["message"] if rule.rule.startswith("/api/") else \
            html.unescape(r.get_data(as_text=True))
        assert "'hots'" in message and all(name in message for name in taken), (rule.rule, message)
    assert client.get("/reports/drain?reason=missing").status_code == 400  # hangs' filter, not drain's
    assert client.get("/reports/hangs?reason=missing&op=all_gather").status_code == 200
    for url in ("/?q=b03&page=1&per_page=5&_format=csv", "/jobs/job-223715/attempts/0?_format=json&_table=groups",
                "/reports/drain?explain=gpu-b03", "/sql?sql=SELECT+1&_next=0"):
        assert client.get(url).status_code == 200, url


def test_each_api_route_takes_the_parameters_its_row_documents(app):
    for rule in app.url_map.iter_rules():
        if not rule.endpoint.startswith("api.") or "GET" not in rule.methods:
            continue
        path = re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", rule.rule).replace("<attempt>", "<n>")
        documented = DOC[("GET", path)]["params"] - set(rule.arguments)
        assert app.view_functions[rule.endpoint].query_params == documented, path


def test_query_pages_past_the_row_cap_with_next(corpus_lake):
    from frlake.query import QueryLimits

    client = create_app(ServerConfig(corpus_lake, query_limits=QueryLimits(timeout_s=30, max_rows=4))).test_client()
    sql = "SELECT range AS n FROM range(10) ORDER BY n"
    seen, offset, pages = [], 0, 0
    while offset is not None:
        r = client.post("/api/query", headers=SAME_ORIGIN, json={"sql": sql, "next": offset})
        assert r.status_code == 200, r.get_data(as_text=True)
        body = r.get_json()
        assert set(body) == DOC[("POST", "/api/query")]["keys"]
        assert body["truncated"] == (body["next"] is not None)
        seen += [row[0] for row in body["rows"]]
        offset, pages = body["next"], pages + 1
    assert seen == list(range(10)) and pages == 3
    for bad in (-1, "4", 1.5, True):
        assert client.post("/api/query", headers=SAME_ORIGIN, json={"sql": sql, "next": bad}).status_code == 400
    csv = client.get("/sql", query_string={"sql": sql, "_format": "csv", "_next": 4})
    assert csv.status_code == 200 and csv.mimetype == "text/csv"
    assert csv.get_data(as_text=True).splitlines() == ["n", "4", "5", "6", "7"]
    assert 'rel="next"' in csv.headers["Link"] and "_next=8" in csv.headers["Link"]
    as_json = client.get("/sql", query_string={"sql": sql, "_format": "json", "_next": 8}).get_json()
    assert as_json["rows"] == [{"n": 8}, {"n": 9}] and as_json["next"] is None and not as_json["truncated"]
    assert client.get("/sql", query_string={"sql": "COPY dumps TO 'x.csv'", "_format": "csv"}).status_code == 400
    assert client.get("/sql?_format=csv").status_code == 400


def test_a_bearer_request_is_accepted_from_any_origin(corpus_lake):
    """curl, a script or another site's server with the token needs no Origin: a page of another site cannot
    make a browser send that header (it would need a CORS preflight, which the server never grants)."""
    sql = {"sql": "SELECT 42 AS answer"}
    foreign = {"Origin": "https://elsewhere.example"}
    with_token = create_app(ServerConfig(corpus_lake, token="t0k3n")).test_client()
    r = with_token.post("/api/query", headers={**foreign, "Authorization": "Bearer t0k3n"}, json=sql)
    assert r.status_code == 200 and r.get_json()["rows"] == [[42]]
    assert with_token.post("/api/query", headers={**foreign, "Authorization": "Bearer wrong"}, json=sql).status_code == 401
    assert with_token.post("/api/query", headers=SAME_ORIGIN, json=sql).status_code == 401
    shared = "/sql?sql=SELECT+42+AS+answer&_format=csv"
    assert with_token.get(shared).status_code == 401  # SQL needs the token, by POST or by GET
    r = with_token.get(shared, headers={"Authorization": "Bearer t0k3n"})
    assert r.status_code == 200 and r.get_data(as_text=True) == "answer\n42\n"
    without = create_app(ServerConfig(corpus_lake)).test_client()
    assert without.post("/api/query", headers=foreign, json=sql).status_code == 403
    assert without.post("/api/query", headers={**foreign, "Authorization": "Bearer anything"}, json=sql).status_code == 200
    preflight = without.open("/api/query", method="OPTIONS", headers={
        **foreign, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"})
    assert not [h for h in preflight.headers.keys() if h.lower().startswith("access-control-allow")]
    embedded = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"}
    assert without.get(shared, headers=embedded).status_code == 403  # <img src> on another site's page
    clicked = {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    assert without.get(shared, headers=clicked).status_code == 200  # a shared link, opened
    assert without.get(shared, headers={"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}).status_code == 200


def test_integers_of_every_width_are_exact_in_the_json_the_csv_and_the_cli(app, corpus_lake):
    """DuckDB hands a HUGEINT (a sum of BIGINTs, a UBIGINT beside a BIGINT) to Python as a Decimal of scale 0:
    made a float, 18446744073709551615 was 1.8446744073709552e+19 in the JSON and the CSV."""
    client = app.test_client()
    sql = ("SELECT x, x::VARCHAR AS text, 1.5::DECIMAL(4, 1) AS d FROM (SELECT 18446744073709551615::UBIGINT AS x "
           "UNION ALL SELECT (-9223372036854775808)::BIGINT UNION ALL SELECT 9007199254740993::BIGINT UNION ALL "
           "SELECT sum(v) FROM (VALUES (9223372036854775807::BIGINT), (9223372036854775807)) s(v)) ORDER BY x")
    body = client.post("/api/query", headers=SAME_ORIGIN, json={"sql": sql}).get_json()
    assert body["rows"] == [[int(text), text, 1.5] for _, text, _ in body["rows"]]
    assert [r[0] for r in body["rows"]] == [-(2**63), 2**53 + 1, 2 * (2**63 - 1), 2**64 - 1]
    csv = client.get("/sql", query_string={"sql": sql, "_format": "csv"}).get_data(as_text=True).splitlines()
    assert [line.split(",")[0] for line in csv[1:]] == [str(r[0]) for r in body["rows"]]
    cli = CliRunner().invoke(frlake_cli.app, ["--lake", str(corpus_lake.lake), "query", sql, "-f", "csv"])
    assert cli.exit_code == 0, cli.output
    assert [line.split(",")[0] for line in cli.output.splitlines()[1:]] == [str(r[0]) for r in body["rows"]]


def test_since_and_until_take_a_time_back_from_now_as_the_cli_does(app, corpus_lake):
    """?since=7d was a 400 ("must be an ISO 8601 date") while --since 7d worked on the command line."""
    client = app.test_client()
    every = client.get("/api/jobs?per_page=500").get_json()["attempts"]
    assert client.get("/api/jobs?per_page=500&since=36500d").get_json()["attempts"] == every
    assert client.get("/api/jobs?per_page=500&since=0s").get_json()["attempts"] == []
    assert client.get("/api/jobs?per_page=500&until=36500d").get_json()["attempts"] == []
    web = client.get("/api/reports/hangs?since=36500d").get_json()
    cli = CliRunner().invoke(frlake_cli.app, ["--lake", str(corpus_lake.lake), "report", "hangs", "--since", "36500d",
                                              "-f", "json"])
    assert cli.exit_code == 0, cli.output
    assert web["rows"] and web["rows"] == json.loads(cli.output)
    bad = client.get("/api/jobs?since=7days")
    assert bad.status_code == 400 and "such as 7d or 12h" in bad.get_json()["error"]["message"]
    page = client.get("/hosts?since=24h").get_data(as_text=True)
    assert 'aria-current="true">24h</a>' in page and 'value="24h"' in page
