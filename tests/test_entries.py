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
    assert stacks[0].ranks == (2, 3) and stacks[0].op == "all_gather"


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
    reversed_ = runner.invoke(app, ["--lake", str(corpus_lake.lake), "entries", HANG[0], "--seq", "9:1"])
    assert reversed_.exit_code == 2 and "reversed" in reversed_.output
    client = create_app(ServerConfig(corpus_lake)).test_client()
    answer = client.get(f"/api/jobs/{HANG[0]}/attempts/0/entries?ranks=a-b")
    assert answer.status_code == 400 and answer.get_json()["error"]["code"] == "bad_request"
    for route in ("entries", "arrivals"):
        answer = client.get(f"/api/jobs/{HANG[0]}/attempts/0/{route}?seq=9:1")
        assert answer.status_code == 400 and "reversed" in answer.get_json()["error"]["message"]
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


def _rows_naming_a_group_of_not_all_their_ranks(settings) -> list[str]:
    """Rows of "where the ranks stand" that name a group one of their ranks is not in: a rank is in a
    group when it recorded an entry of it or a status of it, or the group's recorded members hold it (a
    group whose name other groups share, split_group's, is named ``name@members``)."""
    wrong = []
    with Frlake(settings) as fl:
        con = fl.connect()
        attempts = con.execute("SELECT DISTINCT job, attempt FROM entries ORDER BY ALL").fetchall()
        members = set(con.execute("SELECT DISTINCT job, attempt, rank, pg_name FROM entries UNION "
                                  "SELECT DISTINCT job, attempt, unnest(ranks), pg_name FROM groups UNION "
                                  "SELECT DISTINCT job, attempt, rank, pg_id FROM pg_status").fetchall())
        for job, attempt in attempts:
            for g in fl.stack_diff(job, attempt):
                if g.pg is not None and any((job, attempt, r, g.pg.split("@")[0]) not in members for r in g.ranks):
                    wrong.append(f"{job} attempt {attempt}: ranks {g.ranks} at {g.op} in {g.pg} ({g.pg_desc})")
    return wrong


def test_the_ranks_at_one_frame_in_two_groups_are_two_rows(corpus_lake):
    """job-223715 attempt 0: ranks 0, 2 and 3 stand at one frame of an all_gather, rank 0 in tp 1 (with
    rank 1, which never joined) and 2 and 3 in tp 2. One row "0, 2, 3 · all_gather · tp 1" put 2 and 3
    in tp 1."""
    with Frlake(corpus_lake) as fl:
        stacks = fl.stack_diff(*HANG)
    assert [(g.ranks, g.op, g.pg, g.pg_desc, g.odd_one_out) for g in stacks] == [
        ((2, 3), "all_gather", "2", "tp", False), ((0,), "all_gather", "1", "tp", False),
        ((1,), "all_reduce", "0", "default_pg", True)]
    assert stacks[0].stack_id == stacks[1].stack_id  # one frame, two groups
    assert _rows_naming_a_group_of_not_all_their_ranks(corpus_lake) == []


def test_no_row_of_where_the_ranks_stand_names_a_group_one_of_its_ranks_is_not_in(tmp_path):
    from frlake.config import Settings
    from tests.helpers import FIXTURES

    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([FIXTURES / "genuine", FIXTURES / "genuine-versions", FIXTURES / "producers", FIXTURES / "real"])
        assert fl.connect().execute("SELECT count(DISTINCT (job, attempt)) FROM entries").fetchone()[0] > 30
    assert _rows_naming_a_group_of_not_all_their_ranks(settings) == []


def test_the_legend_says_what_the_producer_records(tmp_path, corpus_lake):
    from frlake.config import Settings
    from tests.helpers import FIXTURES

    nccl = Settings.resolve(tmp_path / "lake")
    with Frlake(nccl) as fl:
        fl.ingest([FIXTURES / "producers" / "straggler_100ms"])
        (job,) = [row[0] for row in fl.connect().execute("SELECT DISTINCT job FROM entries").fetchall()]
    for settings, job, states, says in ((nccl, job, ["completed"], "Q scheduled, S started, C completed"),
                                        (corpus_lake, HANG[0], ["scheduled"], "do not record whether it started")):
        client = create_app(ServerConfig(settings)).test_client()
        assert client.get(f"/api/jobs/{job}/attempts/0/entries").get_json()["states_recorded"] == states
        page = client.get(f"/jobs/{job}/attempts/0/entries").get_data(as_text=True)
        assert says in page
        cli = runner.invoke(app, ["--lake", str(settings.lake), "entries", job, "--attempt", "0"])
        assert cli.exit_code == 0 and says in " ".join(cli.output.split()), cli.output
