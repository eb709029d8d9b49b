"""One attempt, closely: the collectives with ranks side by side (torch's -j,
--selected-ranks, --pg-filters) and where each rank stands, grouped by stack."""

from __future__ import annotations

import csv
import io
import json

from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.server import create_app
from frlake.server.config import ServerConfig
from frlake.session import Frlake

runner = CliRunner()
HANG = ("job-223715", 0)  # rank 1 never joined tp 1's all_gather at seq 4


def test_the_hang_shows_the_member_that_never_enqueued_and_the_odd_stack(corpus_lake):
    with Frlake(corpus_lake) as fl:
        view = fl.entries(*HANG)
        stacks = fl.stack_diff(*HANG)
    (at_hang,) = [c for c in view.collectives if (c.pg, c.seq) == ("1", 4)]
    assert at_hang.members == (0, 1) and at_hang.missing == (1,) and set(at_hang.cells) == {0}
    assert [r.rank for r in view.ranks] == [0, 1, 2, 3]
    odd = [g for g in stacks if g.odd_one_out]
    assert [g.ranks for g in odd] == [(1,)], stacks
    assert stacks[0].ranks == (0, 2, 3) and stacks[0].op == "all_gather"


def test_filters_by_rank_group_and_window(corpus_lake):
    from frlake.query.side_by_side import EntryFilter

    with Frlake(corpus_lake) as fl:
        view = fl.entries(*HANG, EntryFilter(ranks=(0, 1), pgs=("tp",), seq_from=3, seq_to=4))
    assert [(c.pg_desc, c.seq) for c in view.collectives] == [("tp", 3), ("tp", 4)]
    assert [r.rank for r in view.ranks] == [0, 1]


def test_the_cli_and_the_api_give_the_same_view(corpus_lake):
    cli = runner.invoke(app, ["--lake", str(corpus_lake.lake), "entries", HANG[0], "--attempt", "0",
                              "--ranks", "0-3", "--seq", "4:", "-f", "json"])
    assert cli.exit_code == 0, cli.output
    from_cli = json.loads(cli.output)
    client = create_app(ServerConfig(corpus_lake)).test_client()
    api = client.get(f"/api/jobs/{HANG[0]}/attempts/0/entries?ranks=0-3&seq=4:").get_json()
    assert api["collectives"] == from_cli["collectives"] and api["stacks"] == from_cli["stacks"]
    page = client.get(f"/jobs/{HANG[0]}/attempts/0/entries?seq=4:")
    assert page.status_code == 200 and b"another frame than the rest" in page.data


def test_bad_windows_and_ranks_are_clear_errors(corpus_lake):
    bad = runner.invoke(app, ["--lake", str(corpus_lake.lake), "entries", HANG[0], "--seq", "x:y"])
    assert bad.exit_code == 2 and "A:B" in bad.output
    client = create_app(ServerConfig(corpus_lake)).test_client()
    answer = client.get(f"/api/jobs/{HANG[0]}/attempts/0/entries?ranks=a-b")
    assert answer.status_code == 400 and answer.get_json()["error"]["code"] == "bad_request"
    missing = runner.invoke(app, ["--lake", str(corpus_lake.lake), "entries", "job-NOPE"])
    assert missing.exit_code == 1 and "no dumps of job" in missing.output


def test_a_coalesced_block_is_a_row_per_op_and_the_disagreeing_op_is_marked(tmp_path, fl):
    """torch's testBuildDB block, completed: two broadcasts, [[4, 4]] then [[5, 5]] on rank 0 and [[4, 4]]
    twice on rank 1. The block is a mismatch, and the entries view shows which of its ops disagrees."""
    from tests.test_torch_checklist import _write, marker, op

    _write(tmp_path / "nfs" / "blk" / "attempt-0", [
        [op("_broadcast_oop", [[4, 4]], [[4, 4]], seq=1), op("_broadcast_oop", [[5, 5]], [[5, 5]], seq=1),
         marker("ALLGATHER_coalesced", 1)],
        [op("_broadcast_oop", [[4, 4]], [[4, 4]], seq=1)] * 2 + [marker("ALLGATHER_coalesced", 1)]])
    assert fl.ingest([tmp_path / "nfs"]).rejected == 0
    assert fl.diagnose("blk", 0, store=False).verdict == "mismatch"
    view = fl.entries("blk", 0)
    assert [(c.seq, c.part, c.parts, c.agree) for c in view.collectives] == [(1, 1, 2, True), (1, 2, 2, False)]
    assert view.collectives[1].cells[0].sizes == "[[5, 5]]" and view.collectives[1].label.endswith("op 2 of 2")
    out = runner.invoke(app, ["--lake", str(fl.settings.lake), "entries", "blk", "-f", "csv"])
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.output)))
    assert [(r["part"], r["agree"]) for r in rows] == [("1", "yes"), ("2", "NO")]
