"""A real browser (Debian's chromium, driven by Playwright) against a real
server (`frlake serve`, waitress) over a lake ingested from the corpus."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from frlake.config import Settings
from tests.helpers import ingest

pytestmark = pytest.mark.slow  # the whole module: see README, "Tests"


CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parent / "screenshots"
TOKEN = "browser-token"

if os.environ.get("FRLAKE_REQUIRE_BROWSER"):
    from playwright.sync_api import sync_playwright
else:
    playwright_api = pytest.importorskip("playwright.sync_api")
    sync_playwright = playwright_api.sync_playwright
    if not Path(CHROMIUM).exists():
        pytest.skip("no /usr/bin/chromium (apt-get install chromium)", allow_module_level=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(lake: Path, *args: str):
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "frlake.cli.main", "--lake", str(lake), "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parent.parent,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/api/health", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("frlake serve did not start: " + proc.stdout.read().decode())
    return url, proc


@pytest.fixture(scope="module")
def server(tmp_path_factory, corpus):
    lake = tmp_path_factory.mktemp("browser") / "lake"
    settings = Settings.resolve(lake)
    ingest([corpus / j for j in ("job-223715", "job-65a07f", "job-5f5228", "job-f70c5d")], settings)
    url, proc = _serve(lake, "--token", TOKEN)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def page(server):
    SHOTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        yield page
        browser.close()


def test_follow_a_hung_attempt_to_its_diagnosis(server, page):
    page.goto(server + "/")
    page.screenshot(path=str(SHOTS / "jobs.png"), full_page=True)
    row = page.locator("#jobs tbody tr", has_text="job-223715").first
    assert "hang" in row.inner_text()
    row.locator("a.attempt-link").click()
    page.wait_for_url("**/jobs/job-223715/attempts/0")
    assert page.locator("#root-cause .culprit-host").inner_text() == "gpu-b03"
    assert "rank 1" in page.locator("#summary").inner_text()
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    page.screenshot(path=str(SHOTS / "attempt.png"), full_page=True)


def test_hosts_chart_and_reports(server, page):
    page.goto(server + "/hosts")
    page.wait_for_function("() => Chart.getChart(document.getElementById('hosts-chart')) !== undefined")
    assert page.locator("#hosts tbody tr").first.locator("td").first.inner_text() == "gpu-b03"
    page.screenshot(path=str(SHOTS / "hosts.png"), full_page=True)
    page.goto(server + "/reports/hangs")
    assert "gpu-b03" in page.locator("#hangs").inner_text()


def test_sql_console_runs_a_query(server, page):
    page.goto(server + "/sql")
    page.fill("#token", TOKEN)
    page.fill("#sql", "SELECT count(DISTINCT job) AS jobs FROM dumps")
    page.click("#run")
    page.wait_for_selector("#sql-result tbody tr")
    assert page.locator("#sql-result thead th").inner_text() == "jobs"
    assert page.locator("#sql-result tbody td").first.inner_text() == "4"
    page.fill("#sql", "COPY dumps TO '/tmp/x.csv'")
    page.click("#run")
    page.wait_for_function("() => document.getElementById('sql-status').textContent.startsWith('error')")
    assert "only SELECT" in page.locator("#sql-status").inner_text()
    page.screenshot(path=str(SHOTS / "sql.png"), full_page=True)


def test_upload_a_dump(server, page, corpus, tmp_path):
    dump = tmp_path / "rank_1"
    shutil.copy(corpus / "job-e211c0/attempt-1/gpu-a01/rank_1", dump)
    page.goto(server + "/upload")
    page.set_input_files("#files", str(dump))
    page.fill("input[name=job]", "uploaded-job")
    page.fill("input[name=attempt]", "0")
    page.fill("input[name=host]", "gpu-z99")
    page.fill("input[name=rank]", "1")
    page.fill("#token", TOKEN)
    page.click("#send")
    page.wait_for_selector("#upload-result[data-done]")
    text = page.locator("#upload-result").inner_text()
    assert "ingested 1" in text and "gpu-z99" in text
    page.screenshot(path=str(SHOTS / "upload.png"), full_page=True)
    page.goto(server + "/?host=gpu-z99")
    assert "uploaded-job" in page.locator("#jobs").inner_text()


def test_forms_work_on_a_server_without_a_token(page, corpus, tmp_path):
    """Without a token the server wants same-origin requests: the pages' own fetches send their Origin."""
    url, proc = _serve(tmp_path / "lake")
    try:
        dump = tmp_path / "rank_1"
        shutil.copy(corpus / "job-e211c0/attempt-1/gpu-a01/rank_1", dump)
        page.goto(url + "/upload")
        page.set_input_files("#files", str(dump))
        for name, value in (("job", "no-token-job"), ("attempt", "0"), ("host", "gpu-y01"), ("rank", "1")):
            page.fill(f"input[name={name}]", value)
        page.click("#send")
        page.wait_for_selector("#upload-result[data-done]")
        assert "ingested 1" in page.locator("#upload-result").inner_text()
        page.goto(url + "/sql")
        page.fill("#sql", "SELECT count(*) AS dumps FROM dumps")
        page.click("#run")
        page.wait_for_selector("#sql-result tbody tr")
        assert page.locator("#sql-result tbody td").first.inner_text() == "1"
    finally:
        proc.terminate()
        proc.wait(10)
