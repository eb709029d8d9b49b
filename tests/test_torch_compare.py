"""frlake against torch's own analyzer (torchfrtrace) on the same pickle dumps.

Wherever torch names the culprit, frlake names the same rank; and frlake is
exactly right at least as often. The counts are printed (pytest -s) and kept
in the closing notes of the diagnose issue.
"""

from __future__ import annotations

import os

import pytest

from tests.torch_fr import run_torch_on_attempt

if os.environ.get("FRLAKE_REQUIRE_TORCH"):
    import torch  # noqa: F401  (fail, do not skip, where CI promised torch)
else:
    pytest.importorskip("torch")

pytestmark = pytest.mark.slow  # the whole module: see README, "Tests"


def _frlake_right(case, d) -> bool:
    if case["culprit_rank"] is None:
        return d.verdict == "healthy"
    return d.root is not None and (d.root.rank, d.root.host) == (case["culprit_rank"], case["culprit_host"])


@pytest.fixture(scope="module")
def torch_verdicts(corpus, truth) -> dict:
    """torch's analyzer on every pickle attempt of the corpus, run once (it reads pickles only)."""
    return {(case["job"], case["attempt"]): run_torch_on_attempt(corpus / case["job"] / f"attempt-{case['attempt']}")
            for case in truth if case["format"] == "pickle"}


def test_frlake_agrees_with_torch_where_torch_names_a_culprit_and_is_right_more_often(corpus_fl, truth,
                                                                                       torch_verdicts):
    rows = []
    for case in truth:
        if case["format"] != "pickle":
            continue  # torch's analyzer reads pickles only
        v = torch_verdicts[(case["job"], case["attempt"])]
        d = corpus_fl.diagnose(case["job"], case["attempt"], store=False)
        torch_right = (v.named_rank == case["culprit_rank"]) and not v.gave_up
        if case["culprit_rank"] is None:
            torch_right = not v.gave_up and v.named_rank is None and not v.findings
        rows.append((case, v, d, torch_right, _frlake_right(case, d)))
        if v.named_rank is not None and v.named_rank == case["culprit_rank"]:
            assert d.root is not None and d.root.rank == v.named_rank, (case, d.summary)
    torch_ok = sum(r[3] for r in rows)
    frlake_ok = sum(r[4] for r in rows)
    gave_up = sum(r[1].gave_up for r in rows)
    print(f"\npickle attempts: {len(rows)}; torch exactly right {torch_ok}, gave up {gave_up}; frlake exactly right {frlake_ok}")
    for case, v, d, t_ok, f_ok in rows:
        if not t_ok:
            print(f"  torch missed {case['job']}/{case['attempt']} {case['scenario']}: named {v.named_rank}"
                  f"{' (gave up: ' + v.reason + ')' if v.gave_up else ''}; frlake: {d.verdict} rank "
                  f"{d.root.rank if d.root else None}")
    assert frlake_ok == len(rows)
    assert frlake_ok >= torch_ok


def test_every_missing_ranks_set_torch_prints_is_the_collectives_rows(corpus_lake, torch_verdicts, views):
    """The collectives view is torch's flat database for every attempt at once:
    each "missing ranks" set torch's analyzer prints is that row's missing set."""

    con = views(corpus_lake.lake, corpus_lake.db_url)
    compared = 0
    for (job, attempt), v in torch_verdicts.items():
        for f in v.findings:
            if f["kind"] != "MISSING_RANKS":
                continue
            pg = f["group"].split(":", 1)[0]
            row = con.execute("SELECT missing FROM collectives WHERE job = ? AND attempt = ? AND pg = ? AND seq = ?",
                              [job, attempt, pg, f["seq"]]).fetchone()
            assert row is not None, (job, attempt, f)
            assert sorted(row[0]) == sorted(f["missing_ranks"]), (job, attempt, f["group"], f["seq"])
            compared += 1
    print(f"\n{compared} missing-ranks sets compared with torch")
    assert compared >= 5, f"only {compared} missing-ranks sets to compare"


def test_an_extra_collective_where_a_rank_left_no_dump(fl):
    """Real gloo dumps (tests/fixtures/real/extra_collective): rank 0 issued one all_reduce too many,
    and rank 7 wrote no dump. torch gives up on the missing file; frlake names rank 0."""
    from tests.helpers import FIXTURES

    tree = FIXTURES / "real" / "extra_collective"
    v = run_torch_on_attempt(tree / "job-extra" / "attempt-0")
    assert v.gave_up and v.named_rank is None
    assert fl.ingest([tree / "job-extra"]).rejected == 0
    for attempt in (0, 1):  # pickle, JSON
        d = fl.diagnose("job-extra", attempt, store=False)
        assert (d.verdict, d.root.rank, d.root.host, d.root.reason) == ("mismatch", 0, "host-a", "size_mismatch")
        assert d.ranks_missing_dump == [7]


@pytest.mark.parametrize("job", ["newgroup", "split5"])
def test_pairs_that_share_a_desc_or_a_name(job, fl):
    """Real torch 2.13 gloo dumps (tests/fixtures/make_split_group.py): torch keys a group by name plus its
    ranks, as frlake does; both call the job healthy, and both name rank 3 as the one missing from its
    pair's last all_gather (torch also lists ranks 2 and 3 as missing from the world's all_reduce)."""
    from tests.helpers import FIXTURES

    tree = FIXTURES / "real" / "split_group" / job
    assert fl.ingest([tree]).rejected == 0
    healthy = run_torch_on_attempt(tree / "attempt-0")
    assert not healthy.gave_up and not healthy.findings
    assert fl.diagnose(job, 0, store=False).verdict == "healthy"
    hung = run_torch_on_attempt(tree / "attempt-1")
    tp = [f for f in hung.findings if f["group"] and f["group"].endswith(":tp")]
    assert [f["missing_ranks"] for f in tp] == [[3]]
    d = fl.diagnose(job, 1, store=False)
    assert (d.verdict, d.root.rank, d.root.host) == ("hang", 3, "host-1")
