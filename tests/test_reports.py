"""Fleet reports on the real corpus."""

from __future__ import annotations

import json
import math
from datetime import date

import pytest
from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.query.window import Window


def test_flaky_hosts_puts_gpu_b03_first(corpus_fl):
    rows = corpus_fl.report("flaky-hosts")
    assert rows[0]["host"] == "gpu-b03"
    assert {"host", "score", "attempts", "culprit_attempts"} <= rows[0].keys()
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    assert rows[0]["evidence"] and all({"job", "attempt", "reason"} <= e.keys() for e in rows[0]["evidence"])
    assert rows[0]["culprit_attempts"] == len(rows[0]["evidence"]) == sum(rows[0]["by_reason"].values())


def _wilson_lower_bound(k: int, n: int, z: float = 1.96) -> float:
    p = k / n
    return (p + z * z / (2 * n) - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)


def test_score_is_the_wilson_lower_bound_of_each_hosts_rate(corpus_fl):
    rows = corpus_fl.report("flaky-hosts")
    assert len(rows) > 3
    for r in rows:
        assert r["score"] == pytest.approx(_wilson_lower_bound(r["culprit_attempts"], r["attempts"]), abs=1e-4), r
    # a host blamed once in two attempts ranks below one blamed 25 times in 40
    assert _wilson_lower_bound(25, 40) > _wilson_lower_bound(1, 2)


def test_slow_ranks_names_every_straggler_culprit(corpus_fl, truth):
    rows = corpus_fl.report("slow-ranks")
    named = {(r["job"], r["rank"], r["host"]) for r in rows}
    for case in truth:
        if case["scenario"] == "straggler":
            assert (case["job"], case["culprit_rank"], case["culprit_host"]) in named
    assert all(r["lateness_ms"] is not None and r["lateness_ms"] > 10 for r in rows)


def test_hangs_lists_every_hang_with_its_host_and_no_mismatch(corpus_fl, truth):
    rows = corpus_fl.report("hangs")
    seen = {(e["job"], e["attempt"]): e["host"] for r in rows for e in r["evidence"]}
    hangs = {(c["job"], c["attempt"]): c["culprit_host"] for c in truth if c["scenario"].startswith("hang")}
    assert seen == hangs
    assert sum(r["attempts"] for r in rows) == len(seen)
    assert {e["verdict"] for r in rows for e in r["evidence"]} == {"hang"}


def test_one_stall_is_one_row_whichever_dumps_carry_stacks(corpus_fl, truth):
    """The five hangs of the corpus are one stall (rank never joins tp's all_gather in the same code);
    job-f70c5d's JSON dumps carry no stack, and it joins the four whose pickles do."""
    json_hang = next((c["job"], c["attempt"]) for c in truth if c["scenario"] == "hang_missing" and c["format"] == "json")
    (row,) = corpus_fl.report("hangs")
    assert row["attempts"] == 5 and row["jobs"] == 5 and row["top_frame"] is not None
    assert json_hang in {(e["job"], e["attempt"]) for e in row["evidence"]}


def test_window_filters_by_attempt_start(corpus_fl):
    assert corpus_fl.report("hangs", Window(since=date(2100, 1, 1))) == []
    assert corpus_fl.report("flaky-hosts", Window(until=date(2000, 1, 1))) == []
    everything = corpus_fl.report("hangs", Window(since=date(2000, 1, 1), until=date(2100, 1, 1)))
    assert everything == corpus_fl.report("hangs")


def test_report_cli_formats(corpus_lake):
    runner = CliRunner()
    base = ["--lake", str(corpus_lake.lake), "report"]
    data = json.loads(runner.invoke(app, base + ["flaky-hosts", "-f", "json"]).stdout)
    assert data[0]["host"] == "gpu-b03"
    csv_out = runner.invoke(app, base + ["slow-ranks", "-f", "csv"]).stdout.splitlines()
    assert csv_out[0].startswith("job,rank,host,lateness_ms")
    table = runner.invoke(app, base + ["hangs", "--since", "2020-01-01"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "gpu-b03" in table.stdout
    bad = runner.invoke(app, base + ["nope"])
    assert bad.exit_code != 0


@pytest.mark.slow
def test_a_stall_whose_user_code_moved_by_a_line_is_one_hangs_group(tmp_path, corpus, fl):
    """Two copies of a hang; in the second the user frames' lines moved (an
    edit above the call): one group by the stall signature, two exact ones."""
    import pickle
    import shutil

    from tests.helpers import load_trusted

    tree = tmp_path / "nfs"
    shutil.copytree(corpus / "job-223715", tree / "job-223715")
    moved = tree / "job-moved" / "attempt-0"
    for path in sorted((corpus / "job-223715" / "attempt-0").rglob("rank_*")):
        dump = load_trusted(path)
        for entry in dump["entries"]:
            for frame in entry.get("frames") or []:
                if "/torch/" not in frame["filename"]:
                    frame["line"] += 1
        target = moved / path.parent.name / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(pickle.dumps(dump, protocol=2))
    fl.ingest([tree])
    rows = [r for r in fl.report("hangs") if {e["job"] for e in r["evidence"]} & {"job-223715", "job-moved"}]
    assert len(rows) == 1, rows
    assert rows[0]["attempts"] == 2 and rows[0]["jobs"] == 2 and len(rows[0]["exact_signatures"]) == 2
