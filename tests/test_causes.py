"""Host or code? The call for every incident, judged from the history before it
(frlake.query.causes), on lakes of dumps in the FR 2.10 format (tests/fleet.py)
with the culprits, hosts and stacks chosen."""

from __future__ import annotations

import json
import pickle
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.config import Settings
from frlake.query.causes import LABEL, Cause
from frlake.query.window import Window
from frlake.session import Frlake
from tests.fleet import Attempt, write
from tests.helpers import load_trusted

T0 = datetime(2026, 10, 1, tzinfo=UTC)


def _history(root: Path, attempts: list[Attempt], stacks: dict[tuple[str, int], str]) -> Path:
    """The dumps of ``attempts``; those in ``stacks`` run (and hang in) the user function it names."""
    write(root, attempts)
    for (job, attempt), name in stacks.items():
        for path in sorted((root / job / f"attempt-{attempt}").rglob("rank_*")):
            dump = load_trusted(path)
            for entry in dump["entries"]:
                entry["frames"] = [{"name": name, "filename": "model.py", "line": 7},
                                   {"name": "train_step", "filename": "train.py", "line": 42}]
            path.write_bytes(pickle.dumps(dump, protocol=4))
    return root


def _at(hours: int) -> datetime:
    return T0 + timedelta(hours=hours)


def _calls(fl: Frlake) -> dict[tuple[str, int], dict]:
    return {(r["job"], r["attempt"]): r for r in fl.report("causes")}


@pytest.fixture(scope="module")
def host_history(tmp_path_factory):
    """host-bad is the root cause in three jobs, each at a different stack; healthy attempts beside them."""
    root = tmp_path_factory.mktemp("host-history")
    fill = [["fill-1", "fill-2", "fill-3"], ["fill-4", "fill-5", "fill-6"], ["fill-2", "fill-4", "fill-6"]]
    attempts = [Attempt("ok-job", 0, _at(0), ["host-bad", *fill[0]]),
                Attempt("ok-job", 1, _at(1), fill[1] + ["fill-7"])]
    stacks = {}
    for i, job in enumerate(("job-one", "job-two", "job-three")):
        attempts.append(Attempt(job, 0, _at(10 * (i + 1)), [*fill[i], "host-bad"], missing=[3]))
        stacks[(job, 0)] = f"forward_{i}"
    settings = Settings.resolve(root / "lake")
    with Frlake(settings) as fl:
        fl.ingest([_history(root / "dumps", attempts, stacks)])
    return settings


@pytest.fixture(scope="module")
def code_history(tmp_path_factory):
    """One job whose three attempts hang at the same stack, each time with the culprit on another host."""
    root = tmp_path_factory.mktemp("code-history")
    hosts = ["node-a", "node-b", "node-c", "node-d"]
    attempts = [Attempt("job-code", n, _at(5 * n), hosts[n:] + hosts[:n], missing=[0]) for n in range(3)]
    settings = Settings.resolve(root / "lake")
    with Frlake(settings) as fl:
        fl.ingest([_history(root / "dumps", attempts, {("job-code", n): "all_to_all_experts" for n in range(3)})])
    return settings


def test_one_host_root_cause_across_jobs_with_different_stacks_is_host(host_history):
    with Frlake(host_history) as fl:
        calls = _calls(fl)
        third = calls[("job-three", 0)]
        assert third["culprit_host"] == "host-bad" and third["call"] == "host", third
        assert (third["host_incidents"], third["host_jobs"], third["host_stalls"]) == (2, 2, 2)
        assert third["host_attempts"] == 3  # it also ran ok-job's attempt 0, cleanly
        assert third["stall_incidents"] == 0  # forward_2 never hung before
        assert third["host_rate_low"] > third["fleet_rate"]
        assert third["confidence"] == "low" and third["basis"] == LABEL
        assert "host-bad was the root cause in 2 of the 3 earlier attempt(s)" in third["why"]
        # the same call, with the host's drain record just before it, for the page, the API and the alert
        cause = fl.cause("job-three", 0)
        assert isinstance(cause, Cause) and cause.call == "host" and cause.label == LABEL
        assert cause.host.incidents == 2 and cause.host.drain_action in ("suspect", "avoid", "exclude")
        assert cause.to_dict()["host"]["jobs"] == 2


def test_a_host_that_was_root_cause_only_once_before_is_not_host(host_history):
    with Frlake(host_history) as fl:
        calls = _calls(fl)
    second = calls[("job-two", 0)]
    assert second["host_incidents"] == 1 and second["call"] == "unclear", second
    # the reason that decided it comes first
    assert second["why"].startswith("unclear: host-bad's record is too short to blame it (root cause in 1 of the 2 "
                                    "earlier attempt(s) it ran"), second["why"]


def test_a_first_incident_with_no_history_is_unclear(host_history):
    with Frlake(host_history) as fl:
        first = _calls(fl)[("job-one", 0)]
    assert (first["call"], first["confidence"]) == ("unclear", None)
    assert first["host_incidents"] == 0 and first["stall_incidents"] == 0
    assert first["why"].startswith("unclear: no earlier incident to judge from: ")


def test_one_stack_hanging_on_many_hosts_across_attempts_of_a_job_is_code(code_history):
    with Frlake(code_history) as fl:
        calls = _calls(fl)
        assert [calls[("job-code", n)]["culprit_host"] for n in range(3)] == ["node-a", "node-b", "node-c"]
        assert calls[("job-code", 0)]["call"] == "unclear"  # nothing before it
        second, third = calls[("job-code", 1)], calls[("job-code", 2)]
        assert second["call"] == "code" and second["job_stall_elsewhere"] == 1 and second["stall_hosts"] == 1
        assert third["call"] == "code" and third["stall_hosts"] == 2 and third["stall_incidents"] == 2
        assert third["stall_ran"] == 2  # the job's two earlier attempts ran the code that hung
        assert third["host_incidents"] == 0
        assert "2 earlier attempt(s) of this job stopped at it on another host" in third["why"]
        # the hangs report: one stall, its cause the call of its latest attempt
        (hang,) = fl.report("hangs")
        assert hang["cause"] == "code" and [e["cause"] for e in hang["evidence"]] == ["unclear", "code", "code"]


def test_the_window_lists_incidents_but_never_cuts_their_history(code_history):
    with Frlake(code_history) as fl:
        rows = fl.report("causes", Window(since=_at(10)))
        assert [(r["job"], r["attempt"], r["call"]) for r in rows] == [("job-code", 2, "code")]
        assert rows[0]["stall_hosts"] == 2
        assert fl.report("causes") == fl.report("causes")  # the same lake, the same answer


def test_a_host_only_inferred_from_placement_is_never_called_host(tmp_path):
    """The same history as host-bad's, but its culprit rank leaves no dump each time: only the rank beside it
    on the same host names where it ran. A guess of placement drains nobody."""
    attempts = [Attempt(job, 0, _at(10 * i), ["host-bad", "host-bad", f"fill-{i}", f"fill-{i}"],
                        missing=[1], crashed=[1]) for i, job in enumerate(("job-one", "job-two", "job-three"))]
    stacks = {(a.job, 0): f"forward_{i}" for i, a in enumerate(attempts)}
    with Frlake.open(tmp_path / "lake") as fl:
        fl.ingest([_history(tmp_path / "dumps", attempts, stacks)])
        third = _calls(fl)[("job-three", 0)]
        assert third["culprit_host"] == "host-bad" and third["culprit_host_inferred"], third
        assert third["host_incidents"] == 0 and third["call"] != "host"
        assert "inferred from where the ranks beside it ran" in third["why"]
        assert fl.cause("job-three", 0).host.inferred


def _placed_history(tmp_path: Path, third_hosts: list[str]) -> dict:
    """host-bad named as the root cause in two jobs at two stacks (its rank 1 dumped), then a third job whose
    rank 1 crashed without a dump on ``third_hosts``' layout: the third's call."""
    fill = [f"fill-{h}" for h in "abcd"]
    attempts = [Attempt("job-one", 0, _at(10), ["host-bad"] * 2 + fill[:2], missing=[1]),
                Attempt("job-two", 0, _at(20), ["host-bad"] * 2 + fill[2:], missing=[1]),
                Attempt("job-three", 0, _at(30), third_hosts, missing=[1], crashed=[1])]
    stacks = {(a.job, 0): f"forward_{i}" for i, a in enumerate(attempts)}
    with Frlake.open(tmp_path / "lake") as fl:
        fl.ingest([_history(tmp_path / "dumps", attempts, stacks)])
        return _calls(fl)[("job-three", 0)]


def test_a_host_strongly_placed_with_a_strong_record_is_called_host_at_low_confidence(tmp_path):
    """Rank 1 left no dump, but its three siblings dumped from host-bad (blocks of 4, two other hosts' blocks
    whole): the placement is strong, host-bad's own record is strong, so the call is host, at low confidence,
    and the why opens with that."""
    third = _placed_history(tmp_path, ["host-bad"] * 4 + ["fill-x"] * 4 + ["fill-y"] * 4)
    assert third["culprit_host"] == "host-bad" and third["culprit_host_inferred"] and third["culprit_host_placed"]
    assert (third["call"], third["confidence"]) == ("host", "low"), third
    assert third["why"].startswith("host, at low confidence: host-bad's own record is strong (root cause in 2 of"), third
    assert "a strong placement" in third["why"]


def test_a_host_weakly_placed_is_not_called_and_the_why_says_so_first(tmp_path):
    """The same history, but rank 1's block has one sibling: a weak placement; host-bad's record is as
    strong, and the call is unclear for that reason, said first."""
    third = _placed_history(tmp_path, ["host-bad", "host-bad", "fill-x", "fill-x"])
    assert third["culprit_host_inferred"] and not third["culprit_host_placed"]
    assert third["call"] == "unclear", third
    assert third["why"].startswith("unclear: host-bad's record is strong (root cause in 2 of"), third["why"]
    assert "inferred from a weak placement" in third["why"].split(". Evidence")[0]


def test_the_calls_do_not_depend_on_the_order_of_ingestion(code_history, tmp_path):
    """The same attempts ingested newest first, one at a time: history is read by start time, so every call
    is the same, and each was the same already when its own attempt came in."""
    hosts = ["node-a", "node-b", "node-c", "node-d"]
    with Frlake(code_history) as fl:
        want = fl.report("causes")
    with Frlake.open(tmp_path / "lake") as fl:
        for n in (2, 1, 0):
            root = _history(tmp_path / f"dumps-{n}", [Attempt("job-code", n, _at(5 * n), hosts[n:] + hosts[:n],
                                                              missing=[0])], {("job-code", n): "all_to_all_experts"})
            fl.ingest([root])
            if n == 2:  # alone, it has no history
                assert [r["call"] for r in fl.report("causes")] == ["unclear"]
        assert fl.report("causes") == want


def test_a_healthy_history_calls_nothing(tmp_path):
    attempts = [Attempt("calm", n, _at(n), ["h1", "h2", "h3", "h4"]) for n in range(3)]
    with Frlake.open(tmp_path / "lake") as fl:
        fl.ingest([write(tmp_path / "dumps", attempts)])
        assert fl.report("causes") == []
        assert fl.cause("calm", 1) is None
        runner = CliRunner()
        out = runner.invoke(app, ["--lake", str(tmp_path / "lake"), "report", "causes", "-f", "json"])
        assert out.exit_code == 0 and json.loads(out.stdout) == []


def test_report_causes_from_the_command_line(code_history):
    runner = CliRunner()
    out = runner.invoke(app, ["--lake", str(code_history.lake), "report", "causes", "-f", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert [(r["attempt"], r["call"]) for r in rows] == [(2, "code"), (1, "code"), (0, "unclear")]
    assert all(r["basis"] == LABEL for r in rows)
