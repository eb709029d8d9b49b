"""The torch Flight Recorder analyzer wrapper (tests/torch_fr.py).

The parser and flatten tests need no torch. The end-to-end test runs torch's
analyzer in a subprocess with the current interpreter and is skipped when
torch is not importable here (frlake's own venv has no torch); run it with an
interpreter that has both torch and frlake's test deps, e.g.
``/tmp/torch-venv/bin/python -m pytest tests/test_torch_fr_wrapper.py``.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.helpers import CORPUS, TRUTH
from tests.torch_fr import flatten_attempt, parse_torch_output, run_torch_analyzer

HANG = ("job-223715", 0)  # hang_missing, culprit rank 1, all four pickles dumped

# Real torch 2.13 stderr (job-5f5228 attempt-1), frames shortened.
SAMPLE = """\
/x/torch/_subclasses/functional_tensor.py:368: UserWarning: Failed to initialize NumPy: No module named 'numpy'
  cpu = _conversion_method_template(device=torch.device("cpu"))
tabulate is not installed. Proceeding without it.
Not all ranks joining collective, sequence number: 2
internal record id: 5
group info: 0:default_pg
collective: gloo:all_reduce
missing ranks: {0, 2}
input sizes: [[1]]
output sizes: [[1]]
world size: 4
expected ranks: {0, 1, 2, 3}
collective state: scheduled
collective stack trace: 
 all_reduce at /x/torch/distributed/distributed_c10d.py:3245
<module> at <string>:1
Collective sequence number: 2 has errors
internal record id: 4
group info: 3:dp
collective: gloo:all_reduce
input sizes: [[64, 32]]
output sizes: [[64, 32]]
world size: 2
expected ranks: {0, 2}
collective state: scheduled
error msg: Culprit rank 0; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[64, 32]]' does not match found input sizes: '[[32, 32]]', Culprit rank 5; Error type: COLLECTIVE_STATE_MISMATCH, Expected state: 'a' does not match found state: 'b'
collective stack trace: 
 all_reduce at /x/torch/distributed/distributed_c10d.py:3245
We cannot decide what's wrong with this collective entry because we missed FR dumps from ranks ({7}) so we don't have enough information. If you want to debug further use -j to dump all raw trace
Too many mismatches for process_group 07779425821995253562: default_pg aborting
"""


def test_parse_real_sample():
    p = parse_torch_output(SAMPLE)
    assert p["missing_ranks"] == [0, 2]
    assert p["culprit_ranks"] == [0, 5]
    assert p["mismatch_kinds"] == ["MISSING_RANKS", "SIZE_OR_SYNTAX_MISMATCH", "COLLECTIVE_STATE_MISMATCH"]
    assert list(p["groups"]) == ["0:default_pg", "3:dp"]
    assert p["groups"]["3:dp"]["culprit_ranks"] == [0, 5]
    assert p["groups"]["0:default_pg"]["missing_ranks"] == [0, 2]
    f0, f1 = p["findings"][:2]
    assert (f0["kind"], f0["seq"], f0["record_id"], f0["expected_ranks"]) == ("MISSING_RANKS", 2, 5, [0, 1, 2, 3])
    assert len(f0["frames"]) == 2
    assert f1["errors"][0]["detail"].startswith("Expected input sizes: '[[64, 32]]'")
    assert p["missing_dump_ranks"] == [7]
    assert p["aborted_groups"] == ["default_pg (07779425821995253562)"]


def test_parse_healthy_and_crash():
    assert parse_torch_output("tabulate is not installed. Proceeding without it.\n")["findings"] == []
    crash = 'Traceback (most recent call last):\n  File "x", line 1\nAssertionError: Missing dump files from ranks {2}\n'
    p = parse_torch_output(crash)
    assert p["culprit_ranks"] == p["missing_ranks"] == [] and p["findings"] == []


def test_flatten_skips_json(tmp_path):
    att = tmp_path / "attempt-0"
    (att / "h0").mkdir(parents=True)
    (att / "h1").mkdir()
    (att / "h0" / "rank_0").write_bytes(b"\x80\x04N.")
    (att / "h1" / "rank_1").write_bytes(b"\x80\x04N.")
    (att / "h1" / "rank_2.json").write_text("{}")
    (att / "h1" / "rank_3").write_text('{"version": "2.10"}')  # JSON body, no extension
    dest = tmp_path / "flat"
    linked = flatten_attempt(att, dest)
    assert sorted(linked) == [0, 1]
    assert sorted(p.name for p in dest.iterdir()) == ["rank_0", "rank_1"]
    (att / "h0" / "rank_1").write_bytes(b"\x80\x04N.")
    with pytest.raises(ValueError):
        flatten_attempt(att, tmp_path / "flat2")


@pytest.mark.slow
def test_torch_on_a_corpus_hang(tmp_path):
    pytest.importorskip("torch")
    job, attempt = HANG
    truth = next(t for t in json.loads(TRUTH.read_text()) if (t["job"], t["attempt"]) == HANG)
    flat = tmp_path / "flat"
    linked = flatten_attempt(CORPUS / job / f"attempt-{attempt}", flat)
    assert sorted(linked) == truth["ranks_dumped"]

    v = run_torch_analyzer(flat, python=sys.executable, timeout=300)

    assert v.returncode == 0, v.raw_stderr[-2000:]
    assert not v.gave_up and not v.timed_out and v.reason == ""
    assert v.seconds > 0
    assert v.peak_rss_mb is not None and v.peak_rss_mb > 10
    assert v.raw_stdout.strip() == ""  # torch logs everything to stderr
    assert sorted(v.file_order) == truth["ranks_dumped"]

    # parsed ranks == what torch printed, re-read independently from the raw text
    printed_missing: list[int] = []
    for m in re.finditer(r"^missing ranks: \{([\d, ]*)\}", v.raw_stderr, re.M):
        for r in (int(x) for x in m.group(1).split(",") if x.strip()):
            if r not in printed_missing:
                printed_missing.append(r)
    printed_culprits: list[int] = []
    for r in (int(x) for x in re.findall(r"Culprit rank (\d+);", v.raw_stderr)):
        if r not in printed_culprits:
            printed_culprits.append(r)
    assert v.missing_ranks == printed_missing
    assert v.culprit_ranks == printed_culprits
    assert ("MISSING_RANKS" in v.mismatch_kinds) == bool(printed_missing)

    # what torch 2.13 says about this hang: rank 1 never joined tp all_gather #4
    assert v.missing_ranks == [truth["culprit_rank"]]
    assert v.culprit_ranks == []
    assert v.named_rank == truth["culprit_rank"]
    assert list(v.groups) == ["1:tp"]
