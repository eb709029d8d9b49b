"""Diagnoses on the real corpus: every attempt, pickle and JSON."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from frlake.cli.main import app
from tests.helpers import TRUTH

EXPECTED_VERDICT = {"healthy": {"healthy"}, "straggler": {"straggler"}}
HANG_OR_MISMATCH = {"hang", "mismatch"}
TRUTH_CASES = json.loads(TRUTH.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("case", TRUTH_CASES, ids=lambda t: f"{t['job']}-{t['attempt']}-{t['scenario']}-{t['format']}")
def test_verdict_and_root_cause_match_the_truth(corpus_fl, case):
    d = corpus_fl.diagnose(case["job"], case["attempt"], store=False)
    assert d.verdict in EXPECTED_VERDICT.get(case["scenario"], HANG_OR_MISMATCH), d.summary
    if case["culprit_rank"] is None:
        assert d.culprits == []
    else:
        assert (d.root.rank, d.root.host) == (case["culprit_rank"], case["culprit_host"]), d.summary
        assert d.root.role == "root"
    assert sorted(d.ranks_dumped) == case["ranks_dumped"]
    assert d.world_size == case["world"]


@pytest.mark.slow
def test_reasons_name_the_fault(corpus_fl, truth):
    by_scenario = {}
    for case in truth:
        if case["culprit_rank"] is not None:
            by_scenario.setdefault(case["scenario"], set()).add(
                corpus_fl.diagnose(case["job"], case["attempt"], store=False).root.reason)
    assert by_scenario["size_mismatch"] == {"size_mismatch"}
    assert by_scenario["dtype_mismatch"] == {"dtype_mismatch"}
    assert by_scenario["type_mismatch"] == {"type_mismatch"}
    assert by_scenario["hang_missing"] == {"missing"}
    assert by_scenario["straggler"] == {"straggler"}


def test_json_has_the_promised_keys(corpus_fl):
    d = corpus_fl.diagnose("job-24fdd5", 1, store=False).to_dict()
    assert {"job", "attempt", "verdict", "culprits"} <= d.keys()
    root = d["culprits"][0]
    assert {"rank", "host", "reason", "pg", "pg_desc", "seq", "op", "stack"} <= root.keys()
    assert root["stack"][0]["name"] == "all_reduce"
    # the rank that left no dump is named, not a crash of the analysis
    assert any(c["reason"] == "no_dump" and c["rank"] == 2 for c in d["culprits"])
    straggler = corpus_fl.diagnose("job-65a07f", 0, store=False).to_dict()["culprits"][0]
    assert straggler["lateness_ms"] > 10


def test_latest_attempt_is_the_default(corpus_fl):
    assert corpus_fl.diagnose("job-f70c5d", store=False).attempt == 2


@pytest.mark.slow
def test_diagnoses_are_stored_kept_current_and_queryable(corpus, fl):
    # the hung attempt arrives without its culprit's dump first
    first = fl.ingest([corpus / "job-223715/attempt-0/gpu-c04"])
    assert first.diagnosed and first.diagnosed[0].verdict in {"healthy", "incomplete", "hang"}
    fl.ingest([corpus / "job-223715"])
    con = fl.connect()
    row = con.execute("SELECT verdict FROM incidents WHERE job = 'job-223715' AND attempt = 0").fetchone()
    assert row == ("hang",)
    culprit = con.execute(
        "SELECT rank, host, reason, stack_signature IS NOT NULL FROM culprits WHERE job = 'job-223715' AND position = 0"
    ).fetchone()
    assert culprit == (1, "gpu-b03", "missing", True)
    redone = fl.rediagnose()
    assert [(d.job, d.attempt, d.verdict) for d in redone] == [("job-223715", 0, "hang")]


def test_cli_report_and_json(corpus_lake):
    runner = CliRunner()
    out = runner.invoke(app, ["--lake", str(corpus_lake.lake), "diagnose", "job-223715", "--attempt", "0", "-f", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert (data["verdict"], data["culprits"][0]["rank"], data["culprits"][0]["host"]) == ("hang", 1, "gpu-b03")
    table = runner.invoke(app, ["--lake", str(corpus_lake.lake), "diagnose", "job-223715", "--attempt", "0"])
    assert table.exit_code == 0 and "gpu-b03" in table.stdout and "Root cause" in table.stdout
    missing = runner.invoke(app, ["--lake", str(corpus_lake.lake), "diagnose", "no-such-job"])
    assert missing.exit_code == 1 and "no dumps of job" in missing.output
    redo = runner.invoke(app, ["--lake", str(corpus_lake.lake), "rediagnose", "--job", "job-223715", "-f", "json"])
    assert json.loads(redo.stdout) == [{"job": "job-223715", "attempt": 0, "verdict": "hang", "rank": 1,
                                        "host": "gpu-b03", "reason": "missing"}]
