"""The drain list: a repeat-offender policy with decay, clearing by clean
runtime, repeats and caps, on a synthetic history faithful to the FR format."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.config import Settings
from frlake.query.drain import DrainPolicy, drain, explain, slurm_exclude
from frlake.query.window import Window
from frlake.session import Frlake
from tests.fleet import Attempt, write

# The history is dated back from the moment the tests run: the API and the page apply the policy now (a fixed
# date made host-a decay below "exclude" three days after it, a test that failed by the calendar).
NOW = datetime.now(UTC).replace(second=0, microsecond=0)
runner = CliRunner()

pytestmark = pytest.mark.slow  # every test reads one history whose building took 16 s (pytest --durations)


def _history() -> list[Attempt]:
    out = []
    # host-a: the root cause in 3 of 40 recent attempts (its GPU 1)
    for i in range(40):
        out.append(Attempt("job-a", i, NOW - timedelta(days=14) + timedelta(hours=8 * i),
                           ["host-a", "host-a", f"fill-{i % 5}", f"fill-{i % 5}"], [1] if i in (5, 20, 35) else []))
    # host-b: the root cause in 3 of 4 attempts a month ago, then 20 clean attempts since
    for i in range(4):
        out.append(Attempt("job-b", i, NOW - timedelta(days=35) + timedelta(hours=i),
                           ["host-b", "host-b", "fill-b", "fill-b"], [0] if i < 3 else []))
    for i in range(20):
        out.append(Attempt("job-b2", i, NOW - timedelta(days=20, minutes=-7) + timedelta(hours=12 * i),
                           ["host-b", "host-b", "fill-c", "fill-c"]))
    # host-c: a rank that left no dump in 3 of 40 recent attempts, as host-a's did; only the placement of the
    # ranks beside it names its host
    for i in range(40):
        out.append(Attempt("job-c", i, NOW - timedelta(days=14) + timedelta(hours=8 * i),
                           ["host-c", "host-c", f"fill-c{i % 5}", f"fill-c{i % 5}"],
                           [1] if i in (5, 20, 35) else [], [1] if i in (5, 20, 35) else []))
    # a cascade: one attempt on 60 hosts where 30 ranks never join
    out.append(Attempt("job-cascade", 0, NOW - timedelta(days=2), [f"node-{i:02d}" for i in range(60)],
                       list(range(30, 60))))
    return out


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Settings:
    root = tmp_path_factory.mktemp("fleet")
    settings = Settings.resolve(root / "lake")
    with Frlake(settings) as fl:
        summary = fl.ingest([write(root / "nfs", _history())])
    assert summary.rejected == 0 and summary.ingested == 40 * 4 + 4 * 4 + 20 * 4 + 40 * 4 - 3 + 60
    return settings


def _rows(settings: Settings, policy: DrainPolicy | None = None) -> dict[str, dict]:
    policy = policy or DrainPolicy(now=NOW)
    with Frlake(settings) as fl:
        con = fl.connect()
        return {r["host"]: r for r in drain(con, Window(), None, policy)}


def test_a_recent_repeat_offender_ranks_first_and_is_excluded(fleet):
    rows = _rows(fleet)
    ranked = sorted(rows.values(), key=lambda r: -r["score"])
    assert ranked[0]["host"] == "host-a" and ranked[0]["action"] == "exclude"
    assert ranked[0]["incidents"] == 3 and [g["gpu"] for g in ranked[0]["gpus"]] == [1]


def test_an_old_offender_with_clean_runtime_since_decays_below_the_threshold(fleet):
    rows = _rows(fleet)
    b = rows["host-b"]
    assert b["incidents"] == 3 and b["action"] == "ok" and b["score"] < DrainPolicy().suspect
    assert rows["host-a"]["score"] > 3 * b["score"]
    assert all(e["clean_attempts_since"] >= 20 for e in b["evidence"])


def test_a_cascade_that_blames_30_hosts_excludes_nobody(fleet):
    rows = _rows(fleet)
    cascade = [r for h, r in rows.items() if h.startswith("node-")]
    assert len(cascade) == 30
    assert all(r["action"] == "ok" and r["evidence"][0]["hosts_blamed"] == 30 for r in cascade)
    assert slurm_exclude(list(rows.values())) == "host-a"


def test_the_policy_is_the_arithmetic_it_explains(fleet):
    a = _rows(fleet)["host-a"]
    for e in a["evidence"]:
        assert e["weight"] == pytest.approx(e["decay"] * e["cleared"] * e["repeat_factor"] * e["inferred_factor"]
                                            / e["hosts_blamed"], rel=1e-3)
    text = explain(a, DrainPolicy(now=NOW))
    assert "host-a: score" in text and "exclude" in text and text.count("weight") == 3


def test_a_host_inferred_from_placement_counts_half_and_says_so(fleet):
    rows = _rows(fleet)
    a, c = rows["host-a"], rows["host-c"]
    assert c["incidents"] == 3 and all(e["reason"] == "no_dump" and e["host_inferred"] for e in c["evidence"])
    assert not any(e["host_inferred"] for e in a["evidence"])
    # the same history as host-a's, each incident at half its weight: avoided, not excluded
    assert c["score"] == pytest.approx(a["score"] / 2, rel=1e-3) and c["action"] == "suspect"
    assert "x inferred host 0.5" in explain(c, DrainPolicy(now=NOW))
    full = _rows(fleet, DrainPolicy(now=NOW, inferred_host=1.0))["host-c"]
    assert full["score"] == pytest.approx(a["score"], rel=1e-3) and full["action"] == "exclude"


def test_the_cli_gives_json_a_slurm_list_and_the_explanation(fleet):
    base = ["--lake", str(fleet.lake), "report", "drain", "--now", NOW.isoformat()]
    slurm = runner.invoke(app, [*base, "--format", "slurm"])
    assert slurm.exit_code == 0 and slurm.output.strip() == "host-a", slurm.output
    rows = json.loads(runner.invoke(app, [*base, "--format", "json"]).output)
    assert rows[0]["host"] == "host-a" and rows[0]["action"] == "exclude"
    why = runner.invoke(app, [*base, "--explain", "host-b"])
    assert why.exit_code == 0 and "host-b: score" in why.output and "clean" in why.output


def test_the_page_and_the_api_show_the_list(fleet):
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    client = create_app(ServerConfig(fleet)).test_client()
    rows = client.get("/api/reports/drain").get_json()["rows"]
    assert rows[0]["host"] == "host-a" and rows[0]["action"] == "exclude"
    page = client.get("/reports/drain")
    assert page.status_code == 200 and b"host-a" in page.data and b"exclude" in page.data
