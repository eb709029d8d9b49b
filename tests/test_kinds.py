"""The kind of each failure (CPU-side, stuck in a collective, misconfigured, slow), a hang where every member
is inside the collective (no rank missing), what a straggler cost, and the fleet's share of each kind."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.ingest import IngestOptions
from tests.helpers import CORPUS, FIXTURES, ROOT, TRUTH

sys.path.insert(0, str(ROOT / "bench"))
from synth import write_job  # noqa: E402

ONE = IngestOptions(workers=1)
MIN = 60 * 1_000_000_000


def _stuck_job(root: Path, *, dumped_after_ns: int, world: int = 8, job: str = "stuck") -> Path:
    """A job of ``world`` ranks (NCCL-style JSON dumps) whose every rank holds its last collective, an
    all_reduce of the world group, "started" and never completed, each dump written ``dumped_after_ns``
    after it was enqueued (its timeout is 10 minutes): every member entered it, none left."""
    write_job(root, world, 60, job=job, fault=None, seed=1, fmt="json", ranks_per_host=4, procs=1)
    for path in sorted(root.rglob("rank_*.json")):
        dump = json.loads(path.read_text())
        last = dump["entries"][-1]
        last.update(state="started", time_discovered_completed_ns=None, duration_ms=None)
        path.write_text(json.dumps(dump))
        written = last["time_created_ns"] + dumped_after_ns
        os.utime(path, ns=(written, written))
    return root


def test_a_collective_every_member_holds_past_its_timeout_is_a_hang_stuck_inside_it(fl, tmp_path):
    """Every rank entered the all_reduce and none completed it, 15 minutes on (timeout 10): the job hung, and
    no rank is missing from it, so no rank is named. It was called healthy before."""
    fl.ingest([_stuck_job(tmp_path / "nfs", dumped_after_ns=15 * MIN)], ONE)
    d = fl.diagnose("stuck", 0)
    assert d.verdict == "hang" and d.culprits == []
    assert d.kind == "stuck_in_collective"
    s = d.stuck
    assert (s["pg_desc"], s["op"], s["members"], s["timeout_s"]) == ("default_pg", "all_reduce", 8, 600.0)
    assert 899 < s["pending_s"] < 901
    assert "all 8 members enqueued it and none completed it (pending 15 min when dumped, its timeout 10 min)" in d.summary
    assert "the dumps name none" in d.summary
    assert d.kind_why.startswith("every one of the 8 members of default_pg 0 enqueued seq")
    # the catalog and the page say the same
    assert fl.catalog.diagnoses.get("stuck", 0).kind == "stuck_in_collective"
    page = _page(fl, "/jobs/stuck/attempts/0")
    assert 'id="stuck"' in page and 'id="kind-label">stuck in a collective<' in page
    assert 'id="root-cause"' not in page  # no rank is named: no root cause section


def test_the_same_collective_young_at_the_dumps_is_a_job_at_work(fl, tmp_path):
    """Dumped 2 s after the collective began, well inside its timeout: a periodic snapshot of a job at work,
    not a hang, and nothing is stuck."""
    fl.ingest([_stuck_job(tmp_path / "nfs", dumped_after_ns=2_000_000_000)], ONE)
    d = fl.diagnose("stuck", 0, store=False)
    assert d.verdict == "healthy" and d.stuck is None and d.kind is None


def test_one_rank_missing_from_the_collective_is_cpu_side_not_stuck(fl, tmp_path):
    """The same hang with one rank that never enqueued the all_reduce: the others wait for it, it is the root
    cause, and the kind is CPU-side (its host side stopped before the collective)."""
    root = _stuck_job(tmp_path / "nfs", dumped_after_ns=15 * MIN)
    path = next(root.rglob("rank_5.json"))
    dump = json.loads(path.read_text())
    dump["entries"] = dump["entries"][:-1]  # rank 5 never enqueued it
    dump["entries"][-1]["state"] = "completed"
    stat = path.stat()
    path.write_text(json.dumps(dump))
    os.utime(path, ns=(stat.st_mtime_ns, stat.st_mtime_ns))
    fl.ingest([root], ONE)
    d = fl.diagnose("stuck", 0, store=False)
    assert (d.verdict, d.root.rank, d.root.reason, d.stuck) == ("hang", 5, "missing", None)
    assert d.kind == "cpu_side" and d.kind_why.startswith("rank 5 never enqueued seq")


def _page(fl, url: str) -> str:
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    answer = create_app(ServerConfig(fl.settings)).test_client().get(url)
    assert answer.status_code == 200, url
    return answer.get_data(as_text=True)


def _genuine_straggler(tmp_path: Path) -> Path:
    """The genuine 8-rank straggler (torch 2.13 gloo): rank 5 sleeps 0.3 s before each of its three
    collectives a step, 20 steps."""
    dst = tmp_path / "nfs" / "straggler"
    shutil.copytree(FIXTURES / "genuine" / "straggler", dst)
    return dst


def test_what_a_straggler_cost_the_others(fl, tmp_path):
    """Rank 5 sleeps 0.3 s before each of its three collectives a step: the others wait 0.9 s a step for it,
    and without it the step would take what the ranks' own work takes (a few ms of a 0.9 s step)."""
    fl.ingest([_genuine_straggler(tmp_path)], ONE)
    d = fl.diagnose("straggler", 0)
    assert (d.verdict, d.root.rank, d.kind) == ("straggler", 5, "slow")
    cost = d.root.cost
    assert cost["steps"] == 20 and cost["collectives"] >= 3 * 19
    assert 850 < cost["wait_per_step_ms"] < 1000, cost
    assert 0 < cost["step_without_ms"] < 50 < d.root.step_ms, cost
    assert 0.7 * cost["window_ms"] < cost["wait_ms"] < cost["window_ms"], cost
    assert cost["rank_wait_ms"] > cost["wait_ms"]  # several members waited at each
    assert f"the others waited for it {cost['wait_per_step_ms']:.1f} ms a step" in d.summary
    assert f"would take about {cost['step_without_ms']:.1f} ms" in d.summary
    page = _page(fl, "/jobs/straggler/attempts/0")
    assert 'id="straggler-cost"' in page and f"{cost['step_without_ms']:.1f} ms" in page
    # and slow-ranks adds it up over the rank's straggler attempts
    [row] = [r for r in fl.report("slow-ranks") if (r["job"], r["rank"]) == ("straggler", 5)]
    assert (row["wait_ms"], row["step_without_ms"]) == (round(cost["wait_ms"], 3), round(cost["step_without_ms"], 3))


def test_a_straggler_late_to_one_collective_a_step_costs_its_lateness(fl, tmp_path):
    """The corpus' synthetic stragglers: late to one collective a step, by about their lateness."""
    stragglers = [t for t in json.loads(TRUTH.read_text()) if t["scenario"] == "straggler"]
    fl.ingest([CORPUS], ONE)
    for t in stragglers:
        d = fl.diagnose(t["job"], t["attempt"], store=False)
        cost = d.root.cost
        assert abs(cost["wait_per_step_ms"] - d.root.lateness_ms) < 0.15 * d.root.lateness_ms, (t["job"], cost)
        assert 0 <= cost["step_without_ms"] < d.root.step_ms, (t["job"], cost)


def test_the_fleet_share_of_each_kind(fl, tmp_path):
    """Over the corpus: every incident has one kind, the shares add up to 100%, and each kind's incidents are
    the ones whose diagnoses say it."""
    fl.ingest([CORPUS], ONE)
    rows = fl.report("kinds")
    diagnoses = {(t["job"], t["attempt"]): fl.catalog.diagnoses.get(t["job"], t["attempt"])
                 for t in json.loads(TRUTH.read_text())}
    incidents = {k: d for k, d in diagnoses.items() if d.verdict != "healthy"}
    assert sum(r["incidents"] for r in rows) == len(incidents) > 0
    assert abs(sum(r["percent"] for r in rows) - 100) < 0.5
    for r in rows:
        listed = {(e["job"], e["attempt"]) for e in r["evidence"]}
        assert listed == {k for k, d in incidents.items() if d.kind == r["kind"]}, r["kind"]
        stops = [k for k in listed if incidents[k].verdict in ("hang", "mismatch")]
        assert r["stops"] == len(stops)
    by_kind = {r["kind"]: r for r in rows}
    truth = json.loads(TRUTH.read_text())
    scenarios = [t["scenario"] for t in truth]
    assert by_kind["slow"]["incidents"] == scenarios.count("straggler")
    assert by_kind["slow"]["stops"] == 0 and by_kind["slow"]["percent_of_stops"] == 0
    # the command and the page
    result = CliRunner().invoke(app, ["--lake", str(fl.settings.lake), "report", "kinds", "-f", "json"])
    assert result.exit_code == 0
    assert [(r["kind"], r["incidents"], r["percent"]) for r in json.loads(result.output)] == [
        (r["kind"], r["incidents"], r["percent"]) for r in rows]
    page = _page(fl, "/reports/kinds")
    assert "CPU-side" in page and "misconfigured" in page


def test_kinds_are_the_same_on_every_run(fl, tmp_path):
    """The same dumps give the same kind and the same cost, diagnosed twice."""
    fl.ingest([_genuine_straggler(tmp_path)], ONE)
    a, b = fl.diagnose("straggler", 0, store=False), fl.diagnose("straggler", 0, store=False)
    assert (a.kind, a.kind_why, a.root.cost) == (b.kind, b.kind_why, b.root.cost)
