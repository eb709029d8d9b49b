"""A real browser (Debian's chromium, driven by Playwright) against a real
server (`frlake serve`, waitress) over a lake ingested from the corpus."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from frlake.config import Settings
from frlake.session import Frlake
from tests.helpers import serve

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


def unknown_host_job(root: Path, corpus: Path) -> Path:
    """A real hang whose root cause has no known host: job-f2518d (rank 1 never
    joined) where rank 1 left no dump, and the others ran one per host, so no
    block of ranks tells its host."""
    tree = root / "nohost"
    for rank, host in ((0, "gpu-x01"), (2, "gpu-x02"), (3, "gpu-x03")):
        src = next((corpus / "job-f2518d" / "attempt-0").glob(f"*/rank_{rank}"))
        dst = tree / "job-nohost" / "attempt-0" / host / f"rank_{rank}"
        dst.parent.mkdir(parents=True)
        shutil.copy(src, dst)
    return tree


@pytest.fixture(scope="module")
def server(tmp_path_factory, corpus):
    lake = tmp_path_factory.mktemp("browser") / "lake"
    settings = Settings.resolve(lake)
    with Frlake(settings) as fl:
        fl.ingest([corpus / j for j in ("job-223715", "job-65a07f", "job-5f5228", "job-f70c5d")])
        fl.ingest([unknown_host_job(lake.parent, corpus)])
    url, proc = serve(lake, "--token", TOKEN)
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
    assert page.locator("#sql-result tbody td").first.inner_text() == "5"  # the four corpus jobs and job-nohost
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
    url, proc = serve(tmp_path / "lake")
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


def _shot(page, name):
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _column(page, table, index):
    return page.eval_on_selector_all(f"#{table} tbody tr", f"rows => rows.map(r => r.cells[{index}].innerText)")


def test_every_table_sorts_by_its_header(server, page):
    page.goto(server + "/")
    page.click("#jobs thead th:has-text('dumps')")
    dumps = [int(v) for v in _column(page, "jobs", 5)]
    assert dumps == sorted(dumps) and dumps[0] < dumps[-1]
    assert page.get_attribute("#jobs thead th:has-text('dumps')", "aria-sort") == "ascending"
    page.click("#jobs thead th:has-text('dumps')")
    assert [int(v) for v in _column(page, "jobs", 5)] == sorted(dumps, reverse=True)
    page.click("#jobs thead th:has-text('job')")
    jobs = _column(page, "jobs", 0)
    assert jobs == sorted(jobs)
    for url, table in (("/hosts", "hosts"), ("/reports/hangs", "hangs"), ("/reports/slow-ranks", "slow-ranks"),
                       ("/jobs/job-f70c5d", "attempts"), ("/hosts/gpu-b03", "history")):
        page.goto(server + url)
        assert page.locator(f"#{table}.sortable thead th").count() > 2, url
        page.locator(f"#{table} thead th").first.click()
        assert page.get_attribute(f"#{table} thead th >> nth=0", "aria-sort") == "ascending", url


def test_facets_filters_and_export_links(server, page):
    page.goto(server + "/")
    facet = page.locator(".facet[data-facet=verdict]")
    counts = dict(zip(facet.locator("li a").all_inner_texts(), map(int, facet.locator(".count").all_inner_texts())))
    assert counts["hang"] == 3  # job-223715, job-f70c5d and job-nohost, attempt 0 each
    _shot(page, "jobs-facets")
    facet.locator("a", has_text="hang").click()
    page.wait_for_url("**verdict=hang**")
    assert len(_column(page, "jobs", 2)) == counts["hang"]
    assert set(_column(page, "jobs", 2)) == {"hang"}
    csv_href = page.get_attribute("a.export-csv", "href")
    csv_text = page.evaluate("href => fetch(href).then(r => r.text())", csv_href)
    assert csv_text.splitlines()[0].startswith("job,attempt,verdict") and len(csv_text.splitlines()) == 1 + counts["hang"]
    as_json = page.evaluate("href => fetch(href).then(r => r.json())", page.get_attribute("a.export-json", "href"))
    assert [r["verdict"] for r in as_json["rows"]] == ["hang"] * counts["hang"]
    page.goto(server + "/?host=B03")  # a part of the name, any case
    hosts = " ".join(_column(page, "jobs", 4))
    assert "gpu-b03" in hosts and len(_column(page, "jobs", 4)) >= 3
    page.goto(server + "/reports/hangs")
    assert page.locator(".facet[data-facet=reason] li").count() >= 1
    page.locator(".facet[data-facet=reason] a", has_text="missing").click()  # the report lists hangs only
    page.wait_for_url("**reason=missing**")
    assert set(_column(page, "hangs", 2)) == {"missing"}
    _shot(page, "hangs-facets")


def test_sql_in_the_url_ctrl_enter_schema_and_errors(server, page):
    page.goto(server + "/sql")
    page.fill("#token", TOKEN)  # kept for the page's later queries
    page.goto(server + "/sql?sql=" + urllib.parse.quote("SELECT count(DISTINCT job) AS jobs FROM dumps WHERE job LIKE 'job-%'"))
    page.wait_for_selector("#sql-result tbody tr")  # it runs on load
    assert page.locator("#sql-result tbody td").first.inner_text() == "5"
    from frlake.server.schema_browser import view_names

    assert page.locator("#schema details.view").count() == len(view_names())
    page.locator("#schema details[data-view=culprits] summary").click()
    assert "0 is the root cause" in page.locator("#schema details[data-view=culprits]").inner_text()
    page.fill("#sql", "SELECT job, attempt FROM incidents WHERE verdict = 'hang' AND job LIKE 'job-%' ORDER BY job")
    page.focus("#sql")
    page.keyboard.press("Control+Enter")
    page.wait_for_function("() => document.querySelectorAll('#sql-result tbody tr').length === 3")
    assert "verdict" in urllib.parse.unquote_plus(page.url)  # the query lives in the address
    shared = page.url
    assert page.locator("#sql-exports a.export-csv").count() == 1
    _shot(page, "sql-result")
    page.fill("#sql", "SELECT * FROM dump")
    page.keyboard.press("Control+Enter")
    page.wait_for_function("() => document.getElementById('sql-status').textContent.startsWith('error')")
    assert 'Did you mean "dumps"' in page.locator("#sql-status").inner_text()
    assert page.locator("#sql-result tr").count() == 0  # the previous result is gone
    _shot(page, "sql-error")
    page.goto(shared)
    page.wait_for_function("() => document.querySelectorAll('#sql-result tbody tr').length === 3")


def test_the_job_page(server, page):
    page.goto(server + "/")
    page.locator("a.job-link", has_text="job-f70c5d").first.click()
    page.wait_for_url("**/jobs/job-f70c5d")
    page.wait_for_function("() => Chart.getChart(document.getElementById('job-chart')) !== undefined")
    assert _column(page, "attempts", 0) == ["attempt 0", "attempt 1", "attempt 2"]
    recurring = page.locator("#recurring").inner_text()
    assert "gpu-b03" in recurring  # the root cause of attempts 0 and 2
    assert page.locator("nav.crumbs").inner_text().startswith("Jobs")
    _shot(page, "job")
    page.goto(server + "/jobs/job-223715")
    assert page.locator("#no-recurring").count() == 1


def test_pages_work_with_an_unknown_host(server, page):
    for url in ("/", "/reports/hangs", "/hosts", "/reports/slow-ranks", "/jobs/job-nohost",
                "/jobs/job-nohost/attempts/0"):
        response = page.goto(server + url)
        assert response.status == 200, url
    assert page.locator("#root-cause .culprit-host").inner_text() == "unknown"
    assert "rank 1" in page.locator("#root-cause").inner_text()
    assert "left no dump" in page.locator("#root-cause").inner_text()
    assert "rank 0 on gpu-x01" in page.locator("#waiting-for-root").inner_text()
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    _shot(page, "attempt-unknown-host")
    page.goto(server + "/reports/hangs")
    assert "unknown host" in page.locator("#hangs").inner_text()


def test_the_attempt_page_explains_the_incident(server, page):
    page.goto(server + "/jobs/job-f70c5d/attempts/0")
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    root = page.locator("#root-cause").inner_text()
    assert "rank 5" in root and "Waiting for it: rank" in root
    roles = _column(page, "culprits", 2)
    assert any(r.startswith("victim: waits for rank 5 on gpu-b03") for r in roles)
    chart = page.evaluate("""() => { const c = Chart.getChart(document.getElementById('arrivals'));
        return {labels: c.data.datasets.map(d => d.label), colours: c.data.datasets.map(d => d.backgroundColor),
                ranks: c.options.scales.y.labels}; }""")
    assert len(set(chart["colours"])) == len(chart["colours"])  # distinct legend colours
    assert chart["ranks"] == ["5", "7"] or len(chart["ranks"]) == 2  # only the tp group's members
    options = page.locator("#arrivals-group option")
    assert options.count() >= 3
    _shot(page, "attempt")
    assert "culprit" in options.nth(0).inner_text()  # the culprits' groups are offered first
    assert options.nth(0).get_attribute("value") == page.locator("#arrivals-group").input_value()
    sizes = [int(re.search(r"\((\d+) ranks\)", options.nth(i).inner_text()).group(1)) for i in range(options.count())]
    other = options.nth(sizes.index(max(sizes))).get_attribute("value")  # the largest group
    page.select_option("#arrivals-group", other)
    page.wait_for_function(f"() => document.getElementById('arrivals').dataset.loaded === {other!r}")
    assert len(page.evaluate("() => Chart.getChart(document.getElementById('arrivals')).options.scales.y.labels")) == 8
    page.goto(server + "/jobs/job-65a07f/attempts/0")  # a straggler: values on an absolute scale
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    _shot(page, "attempt-straggler")


def test_the_attempt_page_says_host_or_code_beside_the_root_cause(server, page):
    """gpu-b03 was the root cause in 4 of the 5 attempts it ran before job-f70c5d's hang, in 3 jobs: host,
    labelled a judgement from history, the same call as the API's."""
    page.goto(server + "/jobs/job-f70c5d/attempts/0")
    panel = page.locator("#root-cause #cause")
    assert panel.is_visible()
    assert page.locator("#cause-call").inner_text() == "host"
    assert page.locator("#cause-label").inner_text() == "judgement from history"
    assert "root cause in 4 of 5 earlier attempts it ran, in 3 job(s)" in page.locator("#cause-host").inner_text()
    api = page.request.get(server + "/api/jobs/job-f70c5d/attempts/0").json()["cause"]
    assert (api["call"], api["confidence"], api["label"]) == ("host", "high", "judgement from history")
    page.locator("#root-cause").screenshot(path=str(SHOTS / "attempt-cause.png"))
    page.goto(server + "/jobs/job-5f5228/attempts/1")  # its first incident: nothing before it
    assert page.locator("#cause-call").inner_text() == "unclear"
    why = page.locator("#cause-why").inner_text()  # not "no history ... Evidence: 0 of the 6 earlier attempt(s)"
    assert why.startswith("unclear: no earlier incident to judge from: gpu-b03 was the root cause in none of the ")
    assert "no history" not in why
    page.goto(server + "/reports/causes")
    calls = {r.split("\t")[0]: r for r in page.locator("#causes tbody tr").all_inner_texts()}
    assert "host" in calls["job-f70c5d#0"] and "unclear" in calls["job-5f5228#1"]
    _shot(page, "report-causes")


@pytest.fixture(scope="module")
def big_server(tmp_path_factory):
    """A synthetic NCCL job of 1,024 ranks whose culprit is rank 1,000: its dp group of 128 ranks is a dense
    arrivals chart."""
    from frlake.ingest import IngestOptions
    from tests.helpers import ROOT

    sys.path.insert(0, str(ROOT / "bench"))
    from synth import write_job

    work = tmp_path_factory.mktemp("browser-big")
    write_job(work / "nfs", 1024, 20, job="big", fault="missing_last", culprit=1000)
    with Frlake(Settings.resolve(work / "lake")) as fl:
        assert fl.ingest([work / "nfs"], IngestOptions(workers=2)).ingested == 1024
    url, proc = serve(work / "lake", "--token", TOKEN)
    yield url
    proc.terminate()
    proc.wait(10)


def test_a_dense_arrivals_chart_shrinks_its_points_and_names_the_culprits_row(big_server, page):
    page.goto(big_server + "/jobs/big/attempts/0")
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    chart = page.evaluate("""() => {
        const c = Chart.getChart(document.getElementById('arrivals')), labels = c.scales.y.getLabels();
        const at = labels.indexOf('1000'), ratio = c.currentDevicePixelRatio;
        const ctx = c.canvas.getContext('2d');
        const shade = (row, x0, x1) => {  // the reddest pixel beside a row, between x0 and x1
            const y = c.scales.y.getPixelForValue(row);
            const img = ctx.getImageData(x0 * ratio, (y - 10) * ratio, (x1 - x0) * ratio, 20 * ratio).data;
            let best = 0;
            for (let i = 0; i < img.length; i += 4) best = Math.max(best, img[i] - (img[i + 1] + img[i + 2]) / 2);
            return best;
        };
        const area = c.chartArea;
        return {rows: labels.length, at: at, culprits: c.options.plugins.culpritRows.culprits.map(x => x.rank),
                radius: c.getDatasetMeta(0).data.length ? c.getDatasetMeta(0).data[0].options.radius
                                                        : c.getDatasetMeta(1).data[0].options.radius,
                margin: c.width - area.right, name: shade(at, area.right + 4, c.width - 2),
                elsewhere: shade(at < 40 ? at + 30 : at - 30, area.right + 4, c.width - 2)};
    }""")
    assert chart["rows"] == 128 and chart["at"] >= 0 and 1000 in chart["culprits"]
    assert chart["radius"] < 6  # points shrink to their cells: 6 px points on 7 px rows would hide each other
    assert chart["margin"] > 80 and chart["name"] > 100  # "rank 1000, root cause" in red, beside its row
    assert chart["elsewhere"] < 30  # and nothing red beside a row thirty ranks away
    _shot(page, "attempt-1024-ranks")


def test_the_attempt_page_picks_a_window_of_sequence_ids(server, page):
    page.goto(server + "/jobs/job-f70c5d/attempts/0")
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    shown = page.evaluate("() => JSON.parse(document.getElementById('arrivals-data').textContent)")
    assert shown["focus"]["rank"] == 5 and 5 in shown["ranks"] and len(shown["seqs"]) >= 2
    assert f"centred on rank 5 at sequence id {shown['focus']['seq']}" in page.locator("#arrivals-shown").inner_text()
    lo, hi = shown["seqs"][0], shown["seqs"][1]
    page.fill("#arrivals-seq", f"{lo}:{hi}")
    page.click("#arrivals-window button[type=submit]")
    page.wait_for_url(f"**seq={lo}%3A{hi}**")
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    labels = page.evaluate("() => Chart.getChart(document.getElementById('arrivals')).options.scales.x.labels")
    assert labels == [str(lo), str(hi)]
    assert f"sequence ids {lo}-{hi}, 2 of" in page.locator("#arrivals-shown").inner_text()
    assert page.locator("#arrivals-seq").input_value() == f"{lo}:{hi}"
    _shot(page, "attempt-seq-window")


def test_host_page_and_no_data_states(server, page):
    page.goto(server + "/hosts/gpu-b03")
    page.wait_for_function("() => Chart.getChart(document.getElementById('host-chart')) !== undefined")
    assert "Diagnoses that name this host" in page.locator("#named-title").inner_text()
    assert "root cause" in page.locator("#culprit-of").inner_text()
    _shot(page, "host")
    page.goto(server + "/hosts?since=2100-01-01")
    assert page.locator(".chart-box .no-data").inner_text().startswith("no host")
    page.goto(server + "/reports/slow-ranks?since=2100-01-01")
    assert page.locator(".no-data").count() == 1
    page.goto(server + "/jobs/nope")
    assert "no job 'nope'" in page.locator("#error-message").inner_text()
    assert page.locator("#error-see a", has_text="job-").count() >= 1
    _shot(page, "error")


def test_upload_one_dump_of_four_then_mark_it_complete(server, page, corpus, tmp_path):
    dump = tmp_path / "rank_0"
    shutil.copy(corpus / "job-e211c0/attempt-0/gpu-a01/rank_0", dump)
    page.goto(server + "/upload")
    page.set_input_files("#files", str(dump))
    for name, value in (("job", "one-of-four"), ("attempt", "0"), ("host", "gpu-q01"), ("rank", "0")):
        page.fill(f"input[name={name}]", value)
    page.fill("#token", TOKEN)
    page.click("#send")
    page.wait_for_selector("#upload-result[data-done]")
    assert "waiting for more dumps" in page.locator("#upload-result").inner_text()
    _shot(page, "upload-one-of-four")
    page.locator("#upload-result a.attempt-link").click()
    page.wait_for_url("**/jobs/one-of-four/attempts/0")
    assert "incomplete" in page.locator("h1 .verdict").inner_text()
    assert page.locator("#root-cause").count() == 0  # no invented roots
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    _shot(page, "attempt-waiting")
    page.click("#mark-complete")
    page.wait_for_selector("#marked-complete")
    assert page.locator("#root-cause").count() == 1 and "hang" in page.locator("h1 .verdict").inner_text()
    page.goto(server + "/upload")
    page.set_input_files("#files", str(dump))
    page.fill("input[name=attempt]", "zero")
    page.click("#send")
    page.wait_for_selector("#upload-result[data-done=error]")
    assert "the attempt field must be a whole number" in page.locator("#upload-result").inner_text()


# -- every page at a desktop's and a phone's width (390 px), looked at: tests/screenshots/<name>-<width>.png --------

SHARED_SQL = "SELECT job, attempt, verdict, summary FROM incidents WHERE job LIKE 'job-%' ORDER BY job, attempt"
LOOKED_AT = [  # (screenshot name, page)
    ("search", "/?q=b03"),
    ("job", "/jobs/job-f70c5d"),
    ("attempt", "/jobs/job-f70c5d/attempts/0"),
    ("entries", "/jobs/job-f70c5d/attempts/0/entries"),
    ("host", "/hosts/gpu-b03"),
    ("report-flaky-hosts", "/hosts"),
    ("report-slow-ranks", "/reports/slow-ranks"),
    ("report-hangs", "/reports/hangs"),
    ("report-causes", "/reports/causes"),
    ("report-drain", "/reports/drain?explain=gpu-b03"),
    ("report-slow-links", "/reports/slow-links"),
    ("sql-shared", "/sql?sql=" + urllib.parse.quote(SHARED_SQL)),
]


def _drawn(page) -> None:
    """Every chart of the page drawn, or its "no data" said; a SQL page's result shown."""
    page.wait_for_function("""() => [...document.querySelectorAll('.chart-box canvas')].every(
        c => Chart.getChart(c) !== undefined || c.closest('.chart-box').classList.contains('empty'))""")
    if page.locator("#sql-status[data-autorun]").count():
        page.wait_for_function("() => /row|error/.test(document.getElementById('sql-status').textContent)")


@pytest.mark.parametrize("width", [1400, 390])
def test_every_page_at_a_desktop_and_a_phone_width(server, page, width):
    """At 390 px nothing scrolls the whole page sideways (a wide table scrolls in its own box), the
    navigation and the facets stay in view; at both widths each page is photographed to be looked at."""
    page.goto(server + "/sql")
    page.fill("#token", TOKEN)  # kept for the shared SQL's run on load
    page.set_viewport_size({"width": width, "height": 900})
    try:
        for name, url in LOOKED_AT:
            page.goto(server + url)
            _drawn(page)
            _shot(page, f"{name}-{width}")
            overflow = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
            assert overflow[0] <= overflow[1] + 1, (url, overflow)
            nav = page.locator("nav.top").bounding_box()
            assert page.locator("nav.top a", has_text="Upload").is_visible() and nav["width"] <= width, url
            if page.locator("details.facets").count():
                summary = page.locator("details.facets > summary")
                assert summary.is_visible(), url
                if not page.locator("details.facets").evaluate("d => d.open"):  # folded above the table
                    summary.click()
                assert page.locator(".facet").first.is_visible(), url
                box = page.locator("details.facets").bounding_box()
                table = page.locator("table.data").first.bounding_box()
                assert (box["y"] + box["height"] <= table["y"]) == (width < 760), url  # above it, or beside it
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})


def test_a_narrow_table_scrolls_in_its_box_with_its_first_column_kept(server, page):
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.goto(server + "/jobs/job-f70c5d/attempts/0/entries")
        box = page.locator("#entries").locator("xpath=..")
        assert box.evaluate("b => b.scrollWidth > b.clientWidth")  # wider than the phone: it scrolls
        first = page.locator("#entries tbody tr").first.locator("td").first
        before = first.bounding_box()["x"]
        box.evaluate("b => { b.scrollLeft = 200; }")
        assert abs(first.bounding_box()["x"] - before) < 1  # sticky
        assert page.locator("#entries tbody tr").first.locator("td").nth(1).bounding_box()["x"] < before + 150
        page.goto(server + "/?q=b03")
        heights = page.eval_on_selector_all("#jobs tbody td:first-child a, #jobs time",
                                            "els => els.map(e => e.getClientRects().length)")
        assert heights and set(heights) == {1}  # job-20d6d4 and 2026-11-29 07:50:15 UTC on one line each
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})


def test_the_search_box_finds_a_job(server, page):
    page.goto(server + "/")
    page.fill("#q", "F70C5D")
    page.press("#q", "Enter")
    page.wait_for_url("**q=F70C5D**")
    assert _column(page, "jobs", 0) == ["job-f70c5d"] * 3
    assert "3 attempt(s) matching" in page.locator("#jobs-total").inner_text()
    assert "search “F70C5D”" in page.locator("nav.crumbs").inner_text()
    page.locator(".facet[data-facet=verdict] a", has_text="hang").click()  # the facets follow the search
    page.wait_for_url("**verdict=hang**")
    assert _column(page, "jobs", 1) == ["attempt 0"] and page.locator("#q").input_value() == "F70C5D"


def test_the_shared_sql_link_and_its_csv_and_pages(server, page, tmp_path):
    page.goto(server + "/sql")
    page.fill("#token", TOKEN)
    page.goto(server + "/sql?sql=" + urllib.parse.quote(SHARED_SQL))
    page.wait_for_selector("#sql-result tbody tr")
    assert page.locator("#sql-highlight .sql-kw").first.inner_text() == "SELECT"  # the editor highlights SQL
    assert page.locator("#sql-highlight .sql-str").first.inner_text() == "'job-%'"
    csv_href = page.get_attribute("#sql-exports a.export-csv", "href")
    assert urllib.parse.parse_qs(urllib.parse.urlsplit(csv_href).query) == {"sql": [SHARED_SQL], "_format": ["csv"]}
    with page.expect_download() as got:
        page.click("#sql-exports a.export-csv")  # a token server: the page sends it, a link could not
    lines = (tmp_path / "shared.csv")
    got.value.save_as(lines)
    rows = lines.read_text().splitlines()
    assert rows[0] == "job,attempt,verdict,summary" and len(rows) == 1 + len(_column(page, "sql-result", 0))
    _shot(page, "sql-shared-csv")
    page.fill("#sql", "SELECT range AS n FROM range(6000) ORDER BY n")  # past the server's 5,000-row cap
    page.focus("#sql")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#sql-next")
    page.click("#sql-next")
    page.wait_for_url("**_next=5000**")
    page.wait_for_function("() => document.querySelectorAll('#sql-result tbody tr').length === 1000")
    assert page.locator("#sql-result tbody td").first.inner_text() == "5000"
    assert page.locator("#sql-next").count() == 0 and page.locator("#sql-first").count() == 1
    assert "_next=5000" in page.get_attribute("#sql-exports a.export-csv", "href")


def test_a_shared_csv_link_opens_on_a_server_without_a_token(page, tmp_path, corpus):
    from playwright.sync_api import Error

    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([corpus / "job-223715"])
    url, proc = serve(tmp_path / "lake")
    try:
        with page.expect_download() as got:
            try:
                page.goto(url + "/sql?" + urllib.parse.urlencode({"sql": "SELECT job, rank FROM dumps ORDER BY rank",
                                                                  "_format": "csv"}))
            except Error:
                pass  # a CSV is saved, not shown: the navigation ends in a download
        got.value.save_as(tmp_path / "dumps.csv")
        assert (tmp_path / "dumps.csv").read_text().splitlines() == ["job,rank"] + [f"job-223715,{r}" for r in range(4)]
    finally:
        proc.terminate()
        proc.wait(10)


def test_open_in_perfetto_hands_the_trace_over_after_pong(server, page):
    """ui.perfetto.dev is not reachable here: window.open gives a stand-in window that records what is
    posted to it, and the PONG comes from that window."""
    page.goto(server + "/jobs/job-f70c5d/attempts/0")
    assert page.locator("#trace-download").is_visible() and page.locator("#open-perfetto").is_visible()
    page.evaluate("""() => {
        const frame = document.createElement('iframe');
        document.body.appendChild(frame);
        window.posted = [];
        frame.contentWindow.postMessage = (message, origin, transfer) => window.posted.push({message, origin, transfer});
        window.open = url => { window.opened = url; return frame.contentWindow; };
        window.standIn = frame.contentWindow;
    }""")
    page.click("#open-perfetto")
    page.wait_for_function("() => window.posted.some(p => p.message === 'PING')")  # it waits for an answer
    assert page.evaluate("() => window.opened") == "https://ui.perfetto.dev"
    assert not page.evaluate("() => window.posted.some(p => p.message.perfetto)")
    page.evaluate("""() => window.dispatchEvent(new MessageEvent('message',
        {data: 'PONG', origin: 'https://ui.perfetto.dev', source: window.standIn}))""")
    page.wait_for_function("() => window.posted.some(p => p.message.perfetto)")
    sent = page.evaluate("""() => { const p = window.posted.find(p => p.message.perfetto);
        const m = p.message.perfetto;
        return {origin: p.origin, title: m.title, url: m.url, transferred: p.transfer[0] === m.buffer,
                trace: JSON.parse(new TextDecoder().decode(m.buffer))}; }""")
    assert sent["origin"] == "https://ui.perfetto.dev" and sent["title"] == "job-f70c5d attempt 0"
    assert sent["url"].endswith("/jobs/job-f70c5d/attempts/0") and sent["transferred"]
    assert sent["trace"]["traceEvents"] and "frlake" in sent["trace"]["otherData"]
    pings = page.evaluate("() => window.posted.filter(p => p.message === 'PING').length")
    page.wait_for_timeout(200)
    assert page.evaluate("() => window.posted.filter(p => p.message === 'PING').length") == pings  # it stopped


def test_the_job_chart_has_even_ticks_and_a_legend_of_verdicts(server, page):
    page.goto(server + "/jobs/job-f70c5d")
    page.wait_for_function("() => Chart.getChart(document.getElementById('job-chart')) !== undefined")
    chart = page.evaluate("""() => { const c = Chart.getChart(document.getElementById('job-chart'));
        return {ticks: c.scales.x.ticks.map(t => t.value), labels: c.scales.x.ticks.map(t => t.label),
                legend: c.legend.legendItems.map(i => [i.text, i.fillStyle])}; }""")
    (step,) = {b - a for a, b in zip(chart["ticks"], chart["ticks"][1:])}  # one step
    assert all(t % step == 0 for t in chart["ticks"])  # on round times: 07:44:30, 07:45:00, ...
    assert len(set(chart["labels"])) == len(chart["labels"]) >= 3
    assert [text for text, _ in chart["legend"]] == ["mismatch", "hang", "straggler"]  # the job's three verdicts
    assert len({colour for _, colour in chart["legend"]}) == 3
    _shot(page, "job-chart")


@pytest.fixture(params=[1366, 390], ids=["desktop", "phone"])
def width(request, page):
    """The test at a desktop's width and at a phone's (390 x 844)."""
    page.set_viewport_size({"width": request.param, "height": 768 if request.param > 800 else 844})
    yield request.param
    page.set_viewport_size({"width": 1400, "height": 1000})


def _api_query(server, sql):
    req = urllib.request.Request(server + "/api/query", data=json.dumps({"sql": sql}).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=60) as response:
        return json.loads(response.read())  # Python reads a JSON integer exactly


def _run_sql(page, sql):
    page.fill("#sql", sql)
    page.focus("#sql")
    page.keyboard.press("Control+Enter")
    page.wait_for_function("() => !document.getElementById('sql-status').textContent.startsWith('running')")


def test_the_sql_page_shows_64_bit_integers_as_the_lake_holds_them(server, page, width):
    """stack_id and the nanosecond times are past 2**53: parsed as doubles, 5775541967842821955 showed as
    5775541967842822000, and pasted back into a WHERE found no row."""
    page.goto(server + "/sql")
    page.fill("#token", TOKEN)
    sql = "SELECT stack_id, rank, time_created_ns FROM entries WHERE stack_id IS NOT NULL ORDER BY ALL"
    exact = _api_query(server, sql)["rows"]
    assert any(abs(r[0]) > 2**53 for r in exact)
    _run_sql(page, sql)
    shown = page.eval_on_selector_all("#sql-result tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.innerText))")
    assert shown == [[str(v) for v in r] for r in exact]
    stack_id = shown[-1][0]  # pasted back, it finds its rows
    _run_sql(page, f"SELECT count(*) AS n FROM entries WHERE stack_id = {stack_id}")
    assert int(page.locator("#sql-result tbody td").first.inner_text()) > 0
    # neighbours a double cannot tell apart sort exactly, both ways, among ordinary numbers
    _run_sql(page, "SELECT * FROM (VALUES (9007199254740993::BIGINT), (-9223372036854775808), (9007199254740992),"
                   " (18446744073709551615::UBIGINT), (7), (9007199254740994)) t(x)")
    page.click("#sql-result thead th")
    assert _column(page, "sql-result", 0) == ["-9223372036854775808", "7", "9007199254740992", "9007199254740993",
                                              "9007199254740994", "18446744073709551615"]
    page.click("#sql-result thead th")
    assert _column(page, "sql-result", 0)[0] == "18446744073709551615"
    _shot(page, f"sql-exact-{width}")


def test_the_sql_page_clears_the_last_result_while_a_query_runs_and_when_it_fails(server, page, width):
    page.goto(server + "/sql")
    page.fill("#token", TOKEN)
    _run_sql(page, "SELECT range AS i FROM range(30)")
    assert page.locator("#sql-count").inner_text().startswith("30 row(s)")
    assert page.locator("#sql-exports").is_visible()
    _run_sql(page, "SELECT i FROM no_such_table")
    assert page.locator("#sql-status").inner_text().startswith("error")
    assert page.locator("#sql-result tr").count() == 0
    assert page.locator("#sql-count").inner_text() == ""  # not the previous "30 row(s)"
    assert not page.locator("#sql-exports").is_visible()  # nor its links to the previous query
    # a slow query: while it runs, nothing of the one before is on screen
    _run_sql(page, "SELECT 1 AS one")
    page.fill("#sql", "SELECT count(*) AS n FROM range(3000000000)")
    page.focus("#sql")
    page.keyboard.press("Control+Enter")
    page.wait_for_function("() => document.getElementById('sql-status').textContent.startsWith('running')")
    assert page.locator("#sql-result tr").count() == 0 and page.locator("#sql-count").inner_text() == ""
    page.wait_for_function("() => !document.getElementById('sql-status').textContent.startsWith('running')",
                           timeout=120_000)


def test_the_entries_legend_says_what_a_gloo_dump_records(server, page, width):
    """gloo's recorder leaves every entry "scheduled": a legend of "C completed, S started, Q scheduled"
    over a table of Qs read as if nothing ever ran."""
    page.goto(server + "/jobs/job-223715/attempts/0/entries")
    cells = page.eval_on_selector_all("#entries tbody td span[title]", "s => s.map(x => x.innerText[0])")
    assert cells and set(cells) == {"Q"}
    legend = page.locator("#entries-legend").inner_text()
    assert "do not record whether it started or completed" in legend and "not a collective that never ran" in legend
    assert "C completed" not in legend
    rows = page.eval_on_selector_all("#entries tbody tr", "rows => rows.map(r => [...r.cells].slice(0, 4).map(c => c.innerText))")
    assert ["tp 1", "4", "all_gather", "NO"] in rows  # rank 1 never joined it: not "yes", as the CLI says too
    _shot(page, f"entries-gloo-{width}")


@pytest.mark.parametrize("window, says", [("9:1", "is reversed"), ("abc", "whole numbers")])
def test_a_chart_window_that_is_not_one_is_said_beside_the_form(server, page, window, says, width):
    """9:1 drew an empty chart saying no collective was recorded; abc replaced the incident page with a 400."""
    attempt = server + "/jobs/job-223715/attempts/0"
    answer = page.goto(f"{attempt}?seq={urllib.parse.quote(window)}")
    assert answer.status == 200
    assert page.locator("#root-cause .culprit-host").inner_text() == "gpu-b03"  # the incident page is there
    error = page.locator("#arrivals-window + #arrivals-error")
    assert says in error.inner_text() and "default window" in error.inner_text()
    page.wait_for_function("() => Chart.getChart(document.getElementById('arrivals')) !== undefined")
    assert page.input_value("#arrivals-seq") == window  # what was typed stays, to be corrected
    _shot(page, f"arrivals-window-{'reversed' if ':' in window else 'text'}-{width}")


def test_hosts_and_drain_show_numbers_one_way_and_say_how_their_scores_relate(server, page, width):
    """Scores of -0.0 (page and JSON export), decimals varying by row, a rate as 0.6471 where attempt pages
    show percentages; and two pages answering "which host do I drain?" with no word about each other."""
    page.goto(server + "/hosts")
    scores, rates = _column(page, "hosts", 1), _column(page, "hosts", 4)
    assert scores and all(re.fullmatch(r"\d+\.\d{3}", s) for s in scores), scores
    assert all(re.fullmatch(r"\d+\.\d%", r) for r in rates), rates
    assert "0.000" in scores  # hosts never blamed: not -0.000, not -0.0
    exported = page.evaluate("async () => await (await fetch(document.querySelector('#hosts').closest('.table-box')"
                             ".querySelector('a.export-json').href)).text()")
    assert "-0.0" not in exported
    page.click("#to-drain")
    page.wait_for_url("**/reports/drain**")
    assert "long-run share" in page.locator("#to-hosts").locator("..").inner_text()
    assert all(re.fullmatch(r"\d+\.\d{3}", s) for s in _column(page, "drain", 2))
    page.click("#to-hosts")
    page.wait_for_url("**/hosts")
    _shot(page, f"hosts-scores-{width}")


def test_quick_ranges_and_a_time_back_from_now_filter_the_reports(server, page, width):
    page.goto(server + "/reports/hangs")
    page.click(".quick-ranges a:has-text('7d')")
    page.wait_for_url("**since=7d**")
    assert page.input_value("input[name=since]") == "7d"
    assert page.get_attribute(".quick-ranges a:has-text('7d')", "aria-current") == "true"
    page.fill("input[name=since]", "36500d")
    page.click("form.filters button")
    page.wait_for_url("**since=36500d**")
    assert "gpu-b03" in page.locator("#hangs").inner_text()


PHONE_KEYS = [  # (page, table): what a cut cell would hide on a phone: a root cause, a stack, who is behind
    ("/", "jobs"), ("/reports/hangs", "hangs"), ("/reports/causes", "causes"),
    ("/jobs/job-223715/attempts/0", "groups"),
    ("/jobs/job-223715/attempts/0/entries", "stack-diff"), ("/hosts", "hosts"), ("/reports/drain", "drain"),
]


def test_on_a_phone_every_cell_of_the_key_tables_lies_within_the_screen(server, page):
    """At 390 px the jobs list's root cause ended at "rank 0 on" (the rest beyond the screen, in a box that
    scrolled with no cue), as did the hangs report's stack, hosts and cause and the attempt page's "behind".
    Rows are cards now; a table that must still scroll (ranks side by side) says so."""
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        for url, table in PHONE_KEYS:
            page.goto(server + url)
            cells = page.eval_on_selector_all(f"#{table} tbody tr:not(.empty) td", """tds => tds.map(td => {
                const r = td.getBoundingClientRect();
                return [td.dataset.label || "", td.innerText, r.left, r.right, td.scrollWidth - td.clientWidth]; })""")
            assert cells, (url, table)
            for label, text, left, right, hidden in cells:
                assert left >= 0 and right <= 390 and hidden <= 1, (url, table, label, text, left, right)
            assert all(label for label, *_ in cells), (url, table)  # each line says which column it is
        page.goto(server + "/")
        causes = page.eval_on_selector_all("#jobs td[data-label='root cause']", "tds => tds.map(td => td.innerText)")
        assert any(re.fullmatch(r"rank \d+ on \S+ \(\w+\)", c) for c in causes), causes  # whole, not "rank 0 on"
        _shot(page, "jobs-phone")
        page.goto(server + "/jobs/job-f70c5d/attempts/0/entries")
        assert page.locator("#entries").locator("xpath=../..").locator(".scroll-hint").is_visible()
        page.locator("#entries").locator("xpath=..").evaluate("b => { b.scrollLeft = b.scrollWidth; }")
        page.wait_for_function("() => document.getElementById('entries').closest('.table-box').classList.contains('at-end')")
        _shot(page, "entries-phone")
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})


def test_keyboard_icon_summary_severity_and_a_404_that_offers_the_nearest_jobs(server, page, width):
    """No skip link (11 Tabs to the search box), the browser's thin focus ring on the dark bar, a 404 for
    /favicon.ico (the only console error), a jobs list with no summary and verdicts sorted alphabetically,
    and a mistyped job's 404 listing 8 names alphabetically."""
    errors = []
    page.on("console", lambda m: errors.append((page.url, m.text)) if m.type == "error" else None)
    for _, url in LOOKED_AT:
        page.goto(server + url)
        _drawn(page)
    assert errors == []
    icon = page.request.get(server + "/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    page.goto(server + "/")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    assert page.locator("a.skip").is_visible()
    ring = page.evaluate("getComputedStyle(document.activeElement).outlineWidth")
    assert float(ring.rstrip("px")) >= 3
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"
    page.keyboard.press("Tab")  # then the breadcrumb and the search box, not the 11 links of the bar first
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "q", page.evaluate("document.activeElement.outerHTML")
    summary = page.locator("#jobs-summary").inner_text()
    order = ["mismatch", "hang", "incomplete", "straggler", "healthy"]
    attempts = page.request.get(server + "/api/jobs?per_page=500").json()["attempts"]
    counts = {v: sum(a["verdict"] == v for a in attempts) for v in order}
    assert summary == f"{len(attempts)} attempt(s): " + ", ".join(f"{n} {v}" for v, n in counts.items() if n), summary
    page.click("#jobs thead th:has-text('verdict')")
    verdicts = _column(page, "jobs", 2)
    assert verdicts == sorted(verdicts, key=["mismatch", "hang", "incomplete", "straggler", "healthy"].index)
    facet = page.eval_on_selector_all(".facet[data-facet=verdict] li a", "as => as.map(a => a.textContent)")
    assert facet == [v for v in order if counts[v]]
    answer = page.goto(server + "/jobs/job-22371")
    assert answer.status == 404
    offered = page.eval_on_selector_all("#error-see a", "as => as.map(a => a.innerText)")
    assert offered[0] == "job-223715"
    jobs = len({a["job"] for a in attempts})
    assert f"the {min(8, jobs)} nearest of its {jobs} job(s)" in page.locator("main").inner_text()
