"""Every Flight Recorder format in the wild, from our faithful fixtures."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from frlake.config import Settings
from frlake.session import Frlake
from tests.helpers import FIXTURES

FORMATS = FIXTURES / "formats"
EXPECTED = json.loads((FORMATS / "expected.json").read_text())["files"]
BY_VARIANT: dict[str, list[dict]] = defaultdict(list)
for _f in EXPECTED:
    BY_VARIANT[_f["variant"]].append(_f)


@pytest.fixture(scope="module")
def formats_lake(tmp_path_factory):
    settings = Settings.resolve(tmp_path_factory.mktemp("formats"))
    with Frlake(settings) as fl:
        summary = fl.ingest(sorted(p for p in FORMATS.iterdir() if p.is_dir()))
    assert summary.rejected == 0, summary.rejected_files
    return settings


@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(BY_VARIANT))
def test_variant_is_read_with_identity_counts_and_version(formats_lake, variant, views):
    con = views(formats_lake.lake)
    for f in BY_VARIANT[variant]:
        row = con.execute(
            "SELECT job, attempt, host, rank, fr_version, n_entries FROM dumps WHERE source_path LIKE ?",
            ["%/" + f["path"]],
        ).fetchone()
        assert row == (f["job"], f["attempt"], f["host"], f["rank"], f["version"], f["entries"]), f["path"]
        n = con.execute("SELECT count(*) FROM entries WHERE job = ? AND rank = ?", [f["job"], f["rank"]]).fetchone()[0]
        assert n == f["entries"]


@pytest.mark.parametrize("variant", sorted(BY_VARIANT))
def test_core_fields_are_normalized(formats_lake, variant, views):
    con = views(formats_lake.lake)
    job = BY_VARIANT[variant][0]["job"]
    rows = con.execute(
        "SELECT collective_seq_id, time_created_ns, pg_name, op, input_sizes FROM entries WHERE job = ? ORDER BY rank, entry_index",
        [job],
    ).fetchall()
    assert rows
    for seq, created, pg_name, op, sizes in rows:
        assert seq is not None and seq >= 0
        assert created is not None and created > 10**15, "times are in ns, also for time_created_us dumps"
        assert pg_name is not None
        assert op in {"all_reduce", "all_gather", "send", "recv", "reduce_scatter", "broadcast", "barrier"}
        assert isinstance(sizes, list)


def test_old_list_format_converts_microseconds(formats_lake, views):
    con = views(formats_lake.lake)
    first = con.execute(
        "SELECT time_created_ns FROM entries WHERE job = 'fmt-v0_list' AND rank = 0 ORDER BY entry_index LIMIT 1"
    ).fetchone()[0]
    path = next(f["path"] for f in BY_VARIANT["v0_list"] if f["rank"] == 0)
    from tests.helpers import load_trusted

    raw = load_trusted(FORMATS / path)
    assert isinstance(raw, list)
    assert first == raw[0]["time_created_us"] * 1000


def test_unknown_fields_are_kept(formats_lake, views):
    con = views(formats_lake.lake)
    extras = [e for (e,) in con.execute("SELECT extra FROM entries WHERE job = 'fmt-v2_10_unknown' AND extra IS NOT NULL").fetchall()]
    assert extras and all("future_field" in json.loads(e) for e in extras)
    top = con.execute("SELECT extra FROM dumps WHERE job = 'fmt-v2_10_unknown'").fetchall()
    assert all(t[0] and json.loads(t[0]) for t in top)


def test_pg_config_of_every_shape_gives_member_ranks(formats_lake, views):
    con = views(formats_lake.lake)
    rows = con.execute("SELECT job, ranks FROM groups WHERE ranks IS NOT NULL").fetchall()
    jobs_with_groups = {j for j, _ in rows}
    assert {"fmt-v1_4", "fmt-v2_1", "fmt-v2_10_unknown", "fmt-json_2_10"} <= jobs_with_groups
    assert all(r and all(isinstance(x, int) for x in r) for _, r in rows)


def test_json_status_values_become_integers(formats_lake, views):
    con = views(formats_lake.lake)
    rows = con.execute("SELECT last_enqueued_collective FROM pg_status WHERE job = 'fmt-json_2_10'").fetchall()
    assert rows and all(isinstance(r[0], int) for r in rows)


def test_p2p_names_give_sender_and_receiver(formats_lake, views):
    con = views(formats_lake.lake)
    rows = con.execute(
        "SELECT DISTINCT profiling_name, op, p2p_src, p2p_dst, is_p2p FROM entries WHERE job = 'fmt-v2_10_unknown' AND is_p2p ORDER BY 1"
    ).fetchall()
    assert rows == [("nccl:recv 1<-0", "recv", 0, 1, True), ("nccl:send 0->1", "send", 0, 1, True)]
