"""Attacks on the web service, each test named after what it attacks: memory
and disk bombs, regex-backtracking layouts, cross-site requests, DNS
rebinding, a bad file among good ones. Flask's test client for headers; a real
``frlake serve`` (waitress) subprocess for memory figures."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from frlake.config import Settings
from frlake.errors import FrlakeError
from frlake.ingest.identity import Layout
from frlake.ingest.upload import UPLOADS_DIR, UploadLimits
from frlake.server import create_app
from frlake.server.config import ServerConfig, allowed_hosts
from frlake.storage.lake import Lake
from tests.helpers import serve

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "attack-token"
GOOD = "job-5f5228/attempt-0/gpu-b01/rank_2"
JSON_DUMP = ROOT / "tests/fixtures/formats/json_2_10/fmt-json_2_10/attempt-0/host-a/rank_0.json"
EVIL_LAYOUT = "{*}" * 12 + "x{rank}"
# 480 MiB of zeros per upload (2 MiB gzip-compressed); FRLAKE_BOMB_MEMBER_MB=1900 makes the bomb
BOMB_MEMBERS, BOMB_MEMBER_BYTES = 3, int(os.environ.get("FRLAKE_BOMB_MEMBER_MB", "160")) << 20
BUDGET_MB = (5 * BOMB_MEMBERS * BOMB_MEMBER_BYTES // 2) >> 20  # two bombs fit, a third does not


def _dump_fields(**extra):
    return {"job": "atk", "attempt": "0", "host": "h", **extra}


def _uploads_left(settings: Settings) -> list[Path]:
    return sorted((settings.lake / UPLOADS_DIR).iterdir())


def _lake_files(settings: Settings) -> list[Path]:
    return sorted(p.relative_to(settings.lake) for p in settings.lake.rglob("*")
                  if p.is_file() and "catalog" not in p.name and p.name != ".lock")


# -- the Flask app, for headers ---------------------------------------------

@pytest.fixture
def open_app(tmp_path):
    """A server with no token on loopback: the default of ``frlake serve``."""
    settings = Settings.resolve(tmp_path / "lake")
    return settings, create_app(ServerConfig(settings, port=8750)).test_client()


def test_cross_origin_post_without_token_is_refused(open_app, corpus):
    settings, c = open_app
    dump = (corpus / GOOD).read_bytes()

    def post(headers, name="rank_2"):
        return c.post("/api/dumps", headers={"Host": "127.0.0.1:8750", **headers},
                      data={"file": (io.BytesIO(dump), name), **_dump_fields(rank="2")})

    # what fetch("http://127.0.0.1:8750/api/dumps", {mode: "no-cors", method: "POST", body: formData}) sends from another site
    for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"}, {"Origin": "http://127.0.0.1:9999"},
                    {"Referer": "https://evil.example/page.html"}, {}):
        r = post(headers)
        assert r.status_code == 403, headers
        assert r.get_json()["error"]["code"] == "cross_origin" and "Origin" in r.get_json()["error"]["message"]
    assert _lake_files(settings) == [] and _uploads_left(settings) == []
    r = c.post("/api/query", headers={"Host": "127.0.0.1:8750", "Origin": "https://evil.example"}, json={"sql": "SELECT 1"})
    assert r.status_code == 403

    # the server's own pages (fetch from http://127.0.0.1:8750/upload sends this Origin)
    r = post({"Origin": "http://127.0.0.1:8750"})
    assert r.status_code == 201 and r.get_json()["ingested"] == 1
    r = post({"Referer": "http://127.0.0.1:8750/upload"}, name="rank_2.copy")
    assert r.status_code == 200 and r.get_json()["already_present"] == 1
    r = c.post("/api/query", headers={"Host": "127.0.0.1:8750", "Origin": "http://127.0.0.1:8750"},
               json={"sql": "SELECT count(*) FROM dumps"})
    assert r.status_code == 200 and r.get_json()["rows"] == [[1]]


def test_cross_origin_post_to_a_token_server_is_refused_and_bearer_needs_no_origin(tmp_path, corpus):
    settings = Settings.resolve(tmp_path / "lake")
    c = create_app(ServerConfig(settings, token=TOKEN)).test_client()
    dump = (corpus / GOOD).read_bytes()
    data = lambda: {"file": (io.BytesIO(dump), "rank_2"), **_dump_fields(rank="2")}  # noqa: E731
    r = c.post("/api/dumps", headers={"Origin": "https://evil.example"}, data=data())
    assert r.status_code == 401
    r = c.post("/api/dumps", headers={"Origin": "http://localhost", "Authorization": "Bearer wrong"}, data=data())
    assert r.status_code == 401
    assert _lake_files(settings) == []
    r = c.post("/api/dumps", headers={"Authorization": f"Bearer {TOKEN}"}, data=data())  # curl: no Origin
    assert r.status_code == 201 and r.get_json()["ingested"] == 1


def test_dns_rebinding_host_header_is_refused(open_app):
    settings, c = open_app
    # a page on evil.example, its name rebound to 127.0.0.1: same-origin to the browser, but its Host names evil.example
    for method, url, kwargs in (("get", "/api/jobs", {}), ("get", "/", {}),
                                ("post", "/api/query", {"json": {"sql": "SELECT 1"}})):
        r = getattr(c, method)(url, headers={"Host": "evil.example:8750", "Origin": "http://evil.example:8750"}, **kwargs)
        assert r.status_code == 421, url
        if url.startswith("/api/"):
            assert r.get_json()["error"]["code"] == "misdirected_request"
    for bad in ("127.0.0.1:9999", "127.0.0.2:8750", "localhost.evil.example:8750", "[::1", "127.0.0.1:80x"):
        assert c.get("/api/health", headers={"Host": bad}).status_code == 421, bad
    for good in ("127.0.0.1:8750", "localhost:8750", "[::1]:8750", "LOCALHOST:8750", "127.0.0.1"):
        assert c.get("/api/health", headers={"Host": good}).status_code == 200, good


def test_dns_rebinding_public_host_names_come_from_the_command_line():
    assert allowed_hosts("127.0.0.1") == ("127.0.0.1", "localhost", "[::1]")
    assert "10.1.2.3" in allowed_hosts("10.1.2.3") and "[fe80::1]" in allowed_hosts("fe80::1")
    assert allowed_hosts("10.1.2.3", ["Lake.Example"])[-1] == "lake.example"
    assert allowed_hosts("0.0.0.0") is None  # bound to every address (and it must have a token): any name
    assert allowed_hosts("0.0.0.0", ["lake.example"]) == ("127.0.0.1", "localhost", "[::1]", "lake.example")


def test_evil_layout_is_refused_quickly(open_app, corpus):
    settings, c = open_app
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(corpus / GOOD, arcname="a" * 28)
    started = time.perf_counter()
    r = c.post("/api/dumps", headers={"Origin": "http://localhost"},
               data={"file": (io.BytesIO(buf.getvalue()), "x.tar.gz"), "layout": EVIL_LAYOUT})
    assert time.perf_counter() - started < 5
    assert r.status_code == 400 and r.get_json()["error"]["code"] == "bad_request"
    assert "side by side" in r.get_json()["error"]["message"]
    assert _lake_files(settings) == [] and _uploads_left(settings) == []


@pytest.mark.parametrize("layout, why", [
    ("{job}{rank}", "side by side"),
    ("{*}-{*}-{*}-{rank}", "at most 3"),
    ("{*}-a/{*}-b/{*}-c/{*}-d/{*}-e/r{rank}", "at most 4"),
    ("x" * 300, "at most 256"),
    ("/".join(["a"] * 17), "at most 16"),
])
def test_evil_layout_bounds(layout, why):
    with pytest.raises(FrlakeError, match=why):
        Layout(layout)


def test_evil_layout_that_is_allowed_matches_quickly():
    """The worst layouts the bounds allow, on paths made to make them backtrack."""
    worst = 0.0
    for template in ("{*}-{*}-{*}x", "{*}-{job}-{host}.q", "{*}_{*}/{*}-{*}x/{host}-{job}x/r{rank}_{attempt}"):
        layout = Layout(template)
        for path in ("-" * 255, "/".join(["-" * 255] * 4), "/".join(["-" * 255] * 3) + "/" + ".".join(["-" * 50] * 5),
                     "/".join(["_-" * 127] * 4), "-" * 100_000):
            started = time.perf_counter()
            layout.match(path)
            worst = max(worst, time.perf_counter() - started)
    assert worst < 0.5, f"{worst:.3f} s"  # about 0.04 s here; the unbounded layout took over a minute


def test_layouts_still_match_what_they_did():
    layout = Layout("{job}/attempt-{attempt}/{host}/rank_{rank}")
    assert layout.match("/d/job-1/attempt-3/gpu-a/rank_7.json.gz") == {"job": "job-1", "attempt": "3", "host": "gpu-a",
                                                                        "rank": "7"}
    assert layout.match("upload:ab/x.tar.gz::job/attempt-0/h/rank_2") == {"job": "job", "attempt": "0", "host": "h",
                                                                            "rank": "2"}
    assert layout.match("attempt-0/h/rank_2") == {}
    assert Layout("{job}-{attempt}").match("a/my-job-3") == {"job": "my-job", "attempt": "3"}
    assert Layout("{host}").match("d/node1.example.com.json") == {"host": "node1"}
    assert Layout("rank_{rank}.pkl").match("a/rank_3.pkl") == {"rank": "3"}


def _infinite_json() -> bytes:
    doc = json.loads(JSON_DUMP.read_text())
    for entry in doc["entries"]:  # the bare "time_created_us" of old dumps, one of them Infinity
        entry["time_created_us"] = entry.pop("time_created_ns") / 1000
    doc["entries"][0]["time_created_us"] = float("inf")
    text = json.dumps(doc)
    assert "Infinity" in text
    return text.encode()


def test_bad_file_beside_good_ones_is_rejected_alone(open_app, corpus):
    settings, c = open_app
    files = [(io.BytesIO((corpus / GOOD).read_bytes()), "rank_2"),
             (io.BytesIO((corpus / "job-5f5228/attempt-0/gpu-b01/rank_3").read_bytes()), "rank_3"),
             (io.BytesIO(_infinite_json()), "rank_1.json")]
    r = c.post("/api/dumps", headers={"Origin": "http://localhost"}, data={"file": files, **_dump_fields()})
    assert r.status_code == 201, r.get_json()
    body = r.get_json()
    assert body["ingested"] == 2 and body["rejected"] == 1
    assert body["rejected_files"][0]["path"].endswith("/rank_1.json")
    assert {f["rank"] for f in body["files"]} == {2, 3}
    assert _uploads_left(settings) == []


def test_pax_header_bomb_is_refused(open_app):
    """tarfile reads a pax header whole; 64 MiB of header compresses to 64 KiB."""
    settings, c = open_app
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        member = tarfile.TarInfo("job/attempt-0/h/rank_0")
        member.pax_headers = {"comment": "x" * (64 << 20)}
        tar.addfile(member, io.BytesIO(b""))
    assert len(buf.getvalue()) < 1 << 20
    r = c.post("/api/dumps", headers={"Origin": "http://localhost"}, data={"file": (io.BytesIO(buf.getvalue()), "p.tgz")})
    assert r.status_code == 400 and "extended header" in r.get_json()["error"]["message"]
    assert _uploads_left(settings) == []


def test_many_members_over_the_total_cap_refuse_the_whole_upload(tmp_path):
    settings = Settings.resolve(tmp_path / "lake")
    limits = UploadLimits(max_unpacked_bytes=3 << 20, max_member_bytes=2 << 20)
    c = create_app(ServerConfig(settings, upload_limits=limits)).test_client()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for rank in range(3):  # each under the member cap, together over the total
            member = tarfile.TarInfo(f"job/attempt-0/h/rank_{rank}")
            member.size = 3 << 19
            tar.addfile(member, io.BytesIO(bytes(member.size)))
    r = c.post("/api/dumps", headers={"Origin": "http://localhost"}, data={"file": (io.BytesIO(buf.getvalue()), "m.tgz")})
    assert r.status_code == 400 and "unpacks to more than" in r.get_json()["error"]["message"]
    assert _lake_files(settings) == [] and _uploads_left(settings) == []


# -- a real server, for memory and the disk budget --------------------------

def _bomb(dump: bytes | None = None) -> bytes:
    buf = io.BytesIO()
    zeros = bytes(1 << 20)
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for rank in range(BOMB_MEMBERS):
            member = tarfile.TarInfo(f"job/attempt-0/h/rank_{rank}")
            member.size = BOMB_MEMBER_BYTES
            tar.addfile(member, io.BufferedReader(_Repeat(zeros, member.size), 1 << 20))
        if dump is not None:
            member = tarfile.TarInfo("job/attempt-0/h2/rank_1")  # a rank of the dump's own 4-rank world
            member.size = len(dump)
            tar.addfile(member, io.BytesIO(dump))
    return buf.getvalue()


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return _bomb()


class _Repeat(io.RawIOBase):
    def __init__(self, block: bytes, n: int):
        self.block, self.left = block, n

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.left, len(self.block))
        b[:n] = self.block[:n]
        self.left -= n
        return n


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    settings = Settings.resolve(tmp_path_factory.mktemp("attacks") / "lake")
    url, proc = serve(settings.lake, "--upload-budget-mb", str(BUDGET_MB), "--public-host", "lake.example")
    yield url, proc, settings
    proc.terminate()
    proc.wait(10)


def _post(url: str, files: list[tuple[str, bytes]], fields: dict[str, str] | None = None,
          headers: dict[str, str] | None = None) -> tuple[int, dict]:
    boundary = uuid.uuid4().hex
    body = io.BytesIO()
    for name, value in (fields or {}).items():
        body.write(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, data in files:
        body.write(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                   "Content-Type: application/octet-stream\r\n\r\n".encode())
        body.write(data + b"\r\n")
    body.write(f"--{boundary}--\r\n".encode())
    request = urllib.request.Request(url + "/api/dumps", data=body.getvalue(), method="POST", headers={
        "Content-Type": f"multipart/form-data; boundary={boundary}", "Origin": url, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _tree(pid: int) -> list[int]:
    pids = [pid]
    for p in pids:
        for task in Path(f"/proc/{p}/task").iterdir():
            try:
                pids += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return pids


class _RssSampler(threading.Thread):
    """Peak RSS of the server's process tree (the server and its worker processes)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.peak_tree_kib, self.stop = pid, 0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total = 0
            for p in _tree(self.pid):
                try:
                    total += _kib(p, "VmRSS")
                except (OSError, AssertionError):
                    pass
            self.peak_tree_kib = max(self.peak_tree_kib, total)
            time.sleep(0.02)


def _upload_bytes_on_disk(settings: Settings) -> int:
    return sum(f.stat().st_size for f in (settings.lake / UPLOADS_DIR).rglob("*") if f.is_file())


@pytest.mark.slow
def test_concurrent_bomb_uploads_keep_server_memory_bounded(served, bomb, corpus):
    url, proc, settings = served
    status, body = _post(url, [("rank_2", (corpus / GOOD).read_bytes())], _dump_fields(rank="2"))
    assert status == 201, body  # warm: imports, the catalog, a worker pool
    before_kib = _kib(proc.pid, "VmHWM")
    sampler = _RssSampler(proc.pid)
    sampler.start()
    results: list[tuple[int, dict]] = []
    threads = [threading.Thread(target=lambda: results.append(_post(url, [("bomb.tar.gz", bomb)])))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sampler.stop.set()
    sampler.join()
    after_kib = _kib(proc.pid, "VmHWM")
    unpacked = 2 * BOMB_MEMBERS * BOMB_MEMBER_BYTES
    print(f"\n{len(bomb):,}-byte bombs, {unpacked >> 20} MiB unpacked in all; server peak RSS (VmHWM) "
          f"{before_kib >> 10} MiB before, {after_kib >> 10} MiB after; server + workers peak {sampler.peak_tree_kib >> 10} MiB")
    assert [s for s, _ in results] == [200, 200], results
    assert all(b["rejected"] == BOMB_MEMBERS and b["ingested"] == 0 for _, b in results)
    assert (after_kib - before_kib) << 10 < 128 << 20  # the server itself holds none of the unpacked bytes
    assert _uploads_left(settings) == []


@pytest.mark.slow
def test_upload_over_the_disk_budget_is_refused_503(served, corpus):
    url, proc, settings = served
    bomb = _bomb((corpus / "job-223715/attempt-0/gpu-b03/rank_1").read_bytes())  # a real dump to publish, too
    results: list[tuple[int, dict]] = []
    with Lake(settings.lake).write_lock():  # as another writer would: the uploads unpack, then wait to publish
        threads = [threading.Thread(target=lambda: results.append(_post(url, [("bomb.tar.gz", bomb)])))
                   for _ in range(2)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 300
        while _upload_bytes_on_disk(settings) < 2 * BOMB_MEMBERS * BOMB_MEMBER_BYTES:
            assert time.monotonic() < deadline, "the uploads did not unpack"
            time.sleep(0.2)
        status, body = _post(url, [("bomb.tar.gz", bomb)])
        assert status == 503 and body["error"]["code"] == "upload_budget_exceeded", body
        assert "budget" in body["error"]["message"]
        assert len(_uploads_left(settings)) == 2  # the refused one removed what it had unpacked
    for t in threads:
        t.join()
    assert sorted(s for s, _ in results) == [200, 201], results  # the dump is new once, then already present
    assert all(b["rejected"] == BOMB_MEMBERS for _, b in results)
    assert _uploads_left(settings) == []
    status, body = _post(url, [("bomb.tar.gz", bomb)])  # the budget was given back
    assert status == 200 and body["rejected"] == BOMB_MEMBERS and body["already_present"] == 1


def test_dns_rebinding_is_refused_by_a_real_server(served):
    url, _, _ = served
    port = url.rsplit(":", 1)[1]

    def get(host: str) -> int:
        try:
            with urllib.request.urlopen(urllib.request.Request(url + "/api/jobs", headers={"Host": host}), timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    assert get(f"evil.example:{port}") == 421
    assert get(f"lake.example:{port}") == 200  # --public-host
    assert get(f"localhost:{port}") == 200


# -- round 4: results too big to return, memory bounded in the process, formulas in CSV -------------------------

HUGE_RESULT = "SELECT repeat('x', 50000000) AS s FROM range(200)"  # 10 GB of text to return
HUGE_VALUES = "SELECT count(DISTINCT s) FROM (SELECT repeat('x', 1000000000) || i::VARCHAR AS s FROM range(12) t(i))"
QUERY_BUDGET = 1 << 30  # the CLI's and the server's default memory limit of a query
MARGIN = 256 << 20


def _cli_with_peak(*args: str) -> tuple[int, str, int]:
    """``frlake *args`` in a child process: its exit status, its output, and its peak RSS in bytes."""
    proc = subprocess.Popen([sys.executable, "-m", "frlake.cli.main", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out, usage.ru_maxrss << 10


@pytest.mark.slow
@pytest.mark.parametrize("sql, named", [(HUGE_RESULT, "result_too_large"), (HUGE_VALUES, "memory limit")])
def test_a_query_too_big_for_the_process_is_a_named_error_within_its_budget(corpus_lake, sql, named):
    """DuckDB's memory_limit bounds its pool, not the values a query makes (3.1 GB resident under 1 GiB) nor
    the Arrow batches of its result (a traceback): the process is held to the budget plus a margin."""
    status, out, peak = _cli_with_peak("--lake", str(corpus_lake.lake), "query", sql)
    print(f"\n{sql[:40]}...: exit {status}, peak RSS {peak >> 20} MiB")
    assert status == 1, out
    assert named in out and "Traceback" not in out, out
    assert peak < QUERY_BUDGET + MARGIN, f"peak RSS {peak >> 20} MiB"


@pytest.fixture(scope="module")
def four_queries(corpus_lake):
    url, proc = serve(corpus_lake.lake, "--max-queries", "4")
    yield url, proc
    proc.terminate()
    proc.wait(10)


def _query(url: str, sql: str) -> tuple[int, dict]:
    request = urllib.request.Request(url + "/api/query", data=json.dumps({"sql": sql}).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Origin": url})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.slow
def test_four_huge_queries_at_once_get_4xx_and_keep_the_server_within_four_budgets(four_queries):
    url, proc = four_queries
    assert _query(url, "SELECT 1 AS one")[0] == 200  # warm: the sandbox, its views
    sampler = _RssSampler(proc.pid)
    sampler.start()
    results: list[tuple[int, dict]] = []
    threads = [threading.Thread(target=lambda sql=sql: results.append(_query(url, sql)))
               for sql in (HUGE_RESULT, HUGE_RESULT, HUGE_VALUES, HUGE_RESULT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sampler.stop.set()
    sampler.join()
    peak = sampler.peak_tree_kib << 10
    print(f"\n4 queries at once: {sorted(s for s, _ in results)}, server peak RSS {peak >> 20} MiB")
    assert sorted(s for s, _ in results) == [400, 413, 413, 413], results
    codes = sorted(b["error"]["code"] for _, b in results)
    assert codes == ["query_refused", "result_too_large", "result_too_large", "result_too_large"], results
    assert all("Traceback" not in b["error"]["message"] for _, b in results)
    assert peak < 4 * (QUERY_BUDGET + MARGIN), f"peak RSS {peak >> 20} MiB"
    status, body = _query(url, "SELECT 42 AS answer")  # still answering, with the memory bound let go
    assert (status, body["rows"]) == (200, [[42]]), body


def test_the_sql_exports_answer_413_for_a_result_too_large(corpus_lake):
    client = create_app(ServerConfig(corpus_lake)).test_client()
    r = client.get("/sql", query_string={"sql": HUGE_RESULT, "_format": "json"})
    assert r.status_code == 413 and r.json["error"]["code"] == "result_too_large", r.get_data(as_text=True)
    assert "aggregate" in r.json["error"]["message"]


def test_a_query_beyond_the_servers_max_queries_waits_then_gets_429(corpus_lake, monkeypatch):
    from frlake.server import api

    monkeypatch.setattr(api, "QUERY_WAIT_S", 0.2)
    app = create_app(ServerConfig(corpus_lake, max_queries=1))
    client = app.test_client()
    slots = app.extensions["frlake_query_slots"]
    assert slots.acquire(timeout=1)  # the one slot, taken as a running query takes it
    try:
        r = client.post("/api/query", json={"sql": "SELECT 1 AS one"}, headers={"Origin": "http://localhost"})
        assert r.status_code == 429 and r.json["error"]["code"] == "too_many_queries", r.json
        assert r.headers["Retry-After"] == "1" and "--max-queries" in r.json["error"]["message"]
    finally:
        slots.release()
    assert client.post("/api/query", json={"sql": "SELECT 1 AS one"},
                       headers={"Origin": "http://localhost"}).status_code == 200


FORMULAS = ('=HYPERLINK("evil.example","x")', "+cmd|x", "-2+3", "@SUM(A1)")  # folder names: no "/"


def test_web_csv_downloads_run_no_formula_and_the_cli_csv_stays_exact(tmp_path, corpus):
    """Job and host names come from folder names on a shared tree: a spreadsheet that opens a download must
    not run them. CSV for programs (frlake query -f csv) keeps every value as the lake holds it."""
    import csv as csvmod

    from frlake.ingest import IngestOptions
    from frlake.session import Frlake
    from tests.helpers import copy_attempt

    staged = copy_attempt(tmp_path / "staged", "job-223715", 0)
    tree = tmp_path / "nfs"
    for i, name in enumerate(FORMULAS):
        hosts = sorted((staged / "job-223715/attempt-0").iterdir())
        for h, host in enumerate(hosts):
            target = tree / name / "attempt-0" / (FORMULAS[(i + h) % len(FORMULAS)] + f"{h}")
            target.mkdir(parents=True)
            for f in host.iterdir():
                (target / f.name).write_bytes(f.read_bytes())
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        s = fl.ingest([tree], IngestOptions(workers=1))
        assert s.rejected == 0 and s.ingested > 0, s.rejected_files
    client = create_app(ServerConfig(settings)).test_client()

    def cells(text: str) -> list[str]:
        return [c for row in csvmod.reader(io.StringIO(text)) for c in row]

    downloads = [client.get("/?_format=csv"), client.get("/hosts?_format=csv"),
                 client.get("/sql", query_string={"sql": "SELECT job, host, -1 AS minus FROM dumps",
                                                  "_format": "csv"})]
    for r in downloads:
        assert r.status_code == 200, r.get_data(as_text=True)
        text = r.get_data(as_text=True)
        assert all(not c.startswith(("=", "+", "-", "@", "\t", "\r")) or c == "-1" for c in cells(text)), text
    sql_cells = cells(downloads[2].get_data(as_text=True))
    assert "'" + FORMULAS[0] in sql_cells and "-1" in sql_cells  # made text, shown whole; numbers stay
    status, out, _ = _cli_with_peak("--lake", str(settings.lake), "query", "-f", "csv",
                                    "SELECT DISTINCT job FROM dumps ORDER BY job")
    assert status == 0 and sorted(cells(out)[1:]) == sorted(FORMULAS), out
