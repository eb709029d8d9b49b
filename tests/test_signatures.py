"""The entries' stored signatures (frlake.signatures, schema 2 of ``entries``):
stable values, equal to those of the lists they sign, the same verdicts as
the lists hashed at diagnosis time, and lakes written before them (schema 1)
read, diagnosed alike and upgraded by compaction."""

from __future__ import annotations

import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import update

from frlake.catalog.models import LakeFile
from frlake.config import Settings
from frlake.schema import SIGNED, schema_variable
from frlake.session import Frlake
from frlake.signatures import EMPTY_LIST, NO_LIST, signatures, value_signature
from frlake.storage.compact import CompactOptions
from frlake.storage.files import LakeFiles
from tests.test_diagnose_p2p import _steps, _write_job

SHAPES = pa.list_(pa.list_(pa.int64()))
DTYPES = pa.list_(pa.string())
SIGS = [sig for _, sig in SIGNED]


def test_a_signature_is_the_same_in_every_run_and_version():
    """Stored in the lake for years: a change here would make old and new dumps of one attempt disagree."""
    assert value_signature([[1024, 4096]]) == 6432040187556506889
    assert value_signature(["BFloat16"]) == 1257269918744270222
    assert (NO_LIST, EMPTY_LIST) == (value_signature(None), value_signature([]))
    assert NO_LIST == 4160016975378344247 and EMPTY_LIST == 4090036724241674979


def test_two_threads_that_sign_at_once_get_each_value_its_own_signature(monkeypatch):
    """A compaction writes two files at once, and a file of an older schema gets its signatures as it is read:
    the process' numbering of values, which is emptied when it is full, is shared by both threads. (With the
    numbering this small, it is emptied on nearly every call: unguarded, a thread read the numbers the other
    had just emptied.)"""
    import sys
    import threading

    from frlake import signatures as module

    monkeypatch.setattr(module, "_MAX_IDS", 8)
    columns = [pa.array([[[t, i]] for i in range(50)], SHAPES) for t in range(2)]
    want = [[value_signature(v) for v in c.to_pylist()] for c in columns]
    got: dict[int, list] = {}
    start = threading.Barrier(2)

    def sign(t: int) -> None:
        start.wait()
        try:
            got[t] = [signatures(columns[t]).to_pylist() for _ in range(100)]
        except Exception as exc:  # noqa: BLE001 - the test's verdict, below
            got[t] = [exc]

    threads = [threading.Thread(target=sign, args=(t,)) for t in range(2)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the threads take turns as often as Python lets them
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    for t in range(2):
        assert got[t] == [want[t]] * 100


@pytest.mark.parametrize("values, typ", [
    ([[[1024, 4096]], [[1024], [4096]], [], [[]], None, [None], [[1024, 4096]], [[3]], [[], []], [None, None],
      [[-1, 0]], [[2**62, -(2**62)]]], SHAPES),
    ([["Float"], ["a;b", "c"], ["a", "b;c"], None, [], ["Float"], ["a\\;b"], ["a\\", "b"], ["é", "Float"], [""],
      ["", ""]], DTYPES),
])
def test_each_value_has_its_own_signature_whatever_the_slice(values, typ):
    column = pa.array(values, typ)
    for part in (column, column.slice(3), column.slice(4, 2), column.slice(0, 1), column.slice(len(values) - 1)):
        assert signatures(part).to_pylist() == [value_signature(v) for v in part.to_pylist()]
    distinct = {repr(v) for v in values}
    assert len(set(signatures(column).to_pylist())) == len(distinct), "[[1,2]] is not [[1],[2]], nor [] None"
    assert signatures(pa.chunked_array([column.slice(0, 2), column.slice(2)])).to_pylist() == \
        signatures(column).to_pylist()


def test_ingested_entries_carry_the_signatures_of_their_lists(corpus_lake):
    with Frlake(corpus_lake) as fl:
        con = fl.connect()
        assert con.execute(f"SELECT getvariable('{schema_variable('entries')}')").fetchone()[0] == 2
        for lists, sig in SIGNED:
            rows = con.execute(f"SELECT DISTINCT {lists}, {sig} FROM entries").fetchall()
            assert rows and all(s == value_signature(v) for v, s in rows), lists
            assert con.execute(f"SELECT count(*) FROM entries WHERE {sig} IS NULL").fetchone()[0] == 0


# Mismatches of each kind, a hang, a straggler and healthy attempts, in pickle and JSON.
JOBS = ("job-5f5228", "job-f70c5d", "job-24fdd5")


def _diagnoses(settings: Settings) -> dict:
    with Frlake(settings) as fl:
        attempts = fl.catalog.attempts.keys()
        out = {}
        for job, attempt in attempts:
            d = fl.diagnose(job, attempt, store=False).to_dict()
            d.pop("seconds")
            out[(job, attempt)] = d
        return out


def _as_schema_1(settings: Settings) -> None:
    """Make every entries file one that a frlake before signatures wrote: no signature columns, version 1."""
    with Frlake(settings) as fl:
        for f in LakeFiles(fl.catalog).committed("entries"):
            old = pq.read_table(settings.lake / f.readable).drop_columns(SIGS)
            for name in {f.readable, f.path}:  # frlake's views read the hidden name, outside engines the final one
                if (settings.lake / name).exists():
                    (settings.lake / name).unlink()  # the two names are links of one file
                    pq.write_table(old, settings.lake / name)
        with fl.catalog.session(write=True) as s:
            s.execute(update(LakeFile).where(LakeFile.table_name == "entries").values(schema_version=1))


@pytest.mark.slow
def test_a_lake_from_before_signatures_is_read_diagnosed_alike_and_signed_by_compaction(tmp_path, corpus):
    tree = tmp_path / "nfs"
    for job in JOBS:
        shutil.copytree(corpus / job, tree / job)
    _write_job(tmp_path, lambda rank: _steps(rank, odd_rank=2, odd_sizes=[[[512, 64]], [[96]]]))  # "nccl"
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([tree])
    signed = _diagnoses(settings)
    verdicts = {d["verdict"] for d in signed.values()}
    assert {"healthy", "hang", "mismatch", "straggler"} <= verdicts, verdicts
    assert signed[("nccl", 0)]["culprits"][0]["reason"] == "size_mismatch"  # inside a coalesced block

    _as_schema_1(settings)
    with Frlake(settings) as fl:
        con = fl.connect()
        assert con.execute(f"SELECT getvariable('{schema_variable('entries')}')").fetchone()[0] == 1
        n, with_sig = con.execute("SELECT count(*), count(input_sizes_sig) FROM entries").fetchone()
        assert n > 0 and with_sig == 0, "the old files' rows have no signatures"
        sandboxed = fl.query("SELECT count(*) AS n, count(input_sizes_sig) AS signed FROM entries").rows
        assert [tuple(r) for r in sandboxed] == [(n, 0)], "the SQL sandbox reads them alike"
    assert _diagnoses(settings) == signed, "the lists hashed at diagnosis time give the same diagnoses"

    with Frlake(settings) as fl:
        files = LakeFiles(fl.catalog)
        assert files.old_schema_partitions([("nccl", 0)]) == [("entries", "nccl", 0)], "only the ones asked"
        old = len(files.committed("entries"))
        summary = fl.compact(options=CompactOptions(retire_grace_s=0))
        assert summary.partitions > 0 and summary.old_schema_files == old, (old, summary)
        assert {f.schema_version for f in LakeFiles(fl.catalog).committed("entries")} == {2}
        con = fl.connect()
        assert con.execute(f"SELECT getvariable('{schema_variable('entries')}')").fetchone()[0] == 2
        for lists, sig in SIGNED:
            rows = con.execute(f"SELECT DISTINCT {lists}, {sig} FROM entries").fetchall()
            assert all(s == value_signature(v) for v, s in rows), lists
        assert fl.compact(options=CompactOptions(retire_grace_s=0)).partitions == 0, "nothing old is left"
    assert _diagnoses(settings) == signed


def test_a_diagnosis_compares_the_stored_signatures(tmp_path):
    """Rank 2's stored input signatures changed, its lists not: the diagnosis sees a size mismatch."""
    _write_job(tmp_path, lambda rank: _steps(rank))
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([tmp_path / "nfs"])
        assert fl.diagnose("nccl", 0, store=False).verdict == "healthy"
        for f in LakeFiles(fl.catalog).committed("entries"):
            path = settings.lake / f.readable
            table = pq.read_table(path)
            rank2 = pa.compute.equal(table.column("rank"), 2)
            column = pa.compute.if_else(rank2, pa.scalar(7, pa.int64()), table.column("input_sizes_sig"))
            pq.write_table(table.set_column(table.schema.get_field_index("input_sizes_sig"), "input_sizes_sig",
                                            column), path)
        d = fl.diagnose("nccl", 0, store=False)
    assert d.verdict == "mismatch" and d.root.rank == 2 and d.root.reason == "size_mismatch"


def test_the_process_wide_numbering_stays_right_when_it_is_emptied(monkeypatch):
    """A worker numbers every value it has seen and keeps each number's signature; full, both are emptied."""
    import frlake.signatures as signing

    monkeypatch.setattr(signing, "_MAX_IDS", 3)
    for k in range(20):
        column = pa.array([[[k, 1]], [[k], [1]], None, [[k, 1]], [[2 * k]]], SHAPES)
        names = pa.array([[f"d{k}"], [f"d{k}", "x"], None], DTYPES)
        assert signatures(column).to_pylist() == [value_signature(v) for v in column.to_pylist()]
        assert signatures(names).to_pylist() == [value_signature(v) for v in names.to_pylist()]
    assert len(signing._id_of) <= 3 + 10


def test_each_new_value_is_signed_from_an_entry_that_holds_it(monkeypatch):
    """With nothing numbered yet, each value's first entry stands for it, wherever it is."""
    import frlake.signatures as signing

    monkeypatch.setattr(signing, "_id_of", {})
    monkeypatch.setattr(signing, "_signature_of", {})
    column = pa.array([[[1]], [[1]], [[2]], [[2]], None, [[3]], [[2]]], SHAPES)
    assert signatures(column).to_pylist() == [value_signature(v) for v in column.to_pylist()]
