"""Untrusted input: hostile pickles never run code or exhaust memory, and
broken files are set aside with a specific reason."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from frlake.errors import DumpRejected
from frlake.ingest import IdentityOptions, IngestOptions
from frlake.ingest.parse import Limits, parse_dump
from frlake.ingest.safeload import decode
from frlake.session import Frlake
from tests.helpers import FIXTURES, ROOT

BAD = FIXTURES / "bad"
MARKER = Path("/tmp/frlake-pwned-marker")
EXPECTED_REASONS = {
    "rce_reduce.pkl": "unsafe_pickle",
    "rce_eval.pkl": "unsafe_pickle",
    "global_only.pkl": "unsafe_pickle",
    "memo_bomb.pkl": "bad_schema",
    "size_bomb.pkl": "truncated",
    "deep_nesting.pkl": "bad_schema",
    "truncated": "truncated",
    "empty": "empty",
    "not_fr.pkl": "not_flight_recorder",
    "not_fr.json": "not_flight_recorder",
    "garbage.bin": "unknown_encoding",
    "bad_schema.pkl": "bad_schema",
}


def _read(data: bytes):
    obj, encoding = decode(data, 1 << 30)
    return parse_dump(obj, encoding, len(data))


@pytest.mark.parametrize("name", sorted(EXPECTED_REASONS))
def test_each_bad_file_is_refused_with_its_reason(name):
    MARKER.unlink(missing_ok=True)
    with pytest.raises(DumpRejected) as info:
        _read((BAD / name).read_bytes())
    assert info.value.reason == EXPECTED_REASONS[name]
    assert info.value.message
    assert not MARKER.exists()


@pytest.mark.slow
def test_hostile_pickles_in_a_tree_write_no_marker_and_others_ingest(tmp_path, corpus):
    """Ingest in a subprocess with a hard memory cap: a bomb that expanded
    would kill it; code that ran would leave the marker file."""
    MARKER.unlink(missing_ok=True)
    tree = tmp_path / "nfs" / "job-x" / "attempt-0" / "host-a"
    tree.mkdir(parents=True)
    for i, name in enumerate(sorted(EXPECTED_REASONS)):
        shutil.copy(BAD / name, tree / f"rank_{i + 10}")
    shutil.copy(corpus / "job-223715/attempt-0/gpu-b03/rank_1", tree / "rank_1")
    lake = tmp_path / "lake"
    code = (
        "import resource, sys, json\n"
        # 3 GiB of address space: pyarrow's dataset module reserves about 1 GB of it and a DuckDB connection
        # about 0.7 GB before either uses any; the memo bombs here would need tens of GB
        "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
        "from frlake.config import Settings\n"
        "from frlake import Frlake\n"
        f"s = Frlake(Settings.resolve({str(lake)!r})).ingest([{str(tmp_path / 'nfs')!r}])\n"
        "print(json.dumps(s.to_dict()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert not MARKER.exists()
    assert summary["ingested"] == 1
    assert summary["rejected"] == len(EXPECTED_REASONS)
    with Frlake.open(lake, f"sqlite:///{lake / 'catalog.db'}", must_exist=True) as fl:
        reasons = {Path(f.path).name: f.reason for f in fl.catalog.files.records(status="rejected")}
    expected = {f"rank_{i + 10}": reason for i, reason in enumerate(EXPECTED_REASONS[n] for n in sorted(EXPECTED_REASONS))}
    assert reasons == expected


def _entry(**overrides):
    base = {"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 1,
            "p2p_seq_id": 0, "op_id": 1, "profiling_name": "nccl:all_reduce", "time_created_ns": 10,
            "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"],
            "state": "completed", "retired": True, "is_p2p": False, "frames": []}
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides, reason",
    [
        ({"record_id": "zero"}, "bad_schema"),
        ({"input_sizes": [[1, "2"]]}, "bad_schema"),
        ({"input_sizes": [["x", 10**12]]}, "bad_schema"),
        ({"frames": [{"name": ["a"], "filename": "f", "line": 1}]}, "bad_schema"),
        ({"process_group": ("0",)}, "bad_schema"),
        ({"profiling_name": "x" * 70_000}, "too_large"),
        ({"input_sizes": [[1, True]]}, "bad_schema"),
        ({"input_sizes": [[1, 2**70]]}, "bad_schema"),
        ({"input_sizes": [{"a": 1}]}, "bad_schema"),
        ({"input_sizes": "[[4]]"}, "bad_schema"),
        ({"output_dtypes": ["Float", 3]}, "bad_schema"),
        ({"output_dtypes": ["x" * 70_000]}, "too_large"),
    ],
)
def test_fields_of_the_wrong_shape_are_refused(overrides, reason):
    data = pickle.dumps({"version": "2.10", "entries": [_entry(**overrides)]})
    with pytest.raises(DumpRejected) as info:
        _read(data)
    assert info.value.reason == reason


def test_tensor_lists_keep_nulls_and_empty_lists():
    shapes = [None, [], [[]], [[2, 3], None, [4]], [[5]]]
    dtypes = [None, [], ["Float"], ["Float", "Half", "BFloat16"], ["Int"]]
    entries = [_entry(record_id=i, input_sizes=s, output_sizes=s, input_dtypes=d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    parsed = _read(pickle.dumps({"version": "2.10", "entries": entries}))
    assert parsed.entries["input_sizes"].to_pylist() == shapes
    assert parsed.entries["output_sizes"].to_pylist() == shapes
    assert parsed.entries["input_dtypes"].to_pylist() == dtypes


def test_shared_references_cannot_blow_up_a_field():
    big = list(range(60))
    shared = [big] * 100_000  # tiny as a pickle (memo references), 6M ints expanded
    data = pickle.dumps({"version": "2.10", "entries": [_entry(input_sizes=[big] * 60, extra_field=shared)]})
    assert len(data) < 1_000_000
    with pytest.raises(DumpRejected) as info:
        _read(data)
    assert info.value.reason == "too_many_nodes"


def test_deep_json_is_refused():
    data = b'{"version": "2.10", "entries": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}"
    with pytest.raises(DumpRejected) as info:
        _read(data)
    assert info.value.reason in ("too_deep", "bad_schema")


def test_encoding_comes_from_content_not_name(tmp_path, corpus, fl):
    src = corpus / "job-f70c5d/attempt-2/gpu-b04/rank_2.json"
    tree = tmp_path / "job-f/attempt-0/h"
    tree.mkdir(parents=True)
    shutil.copy(src, tree / "rank_2.pkl")  # JSON bytes under a pickle-ish name
    shutil.copy(corpus / "job-223715/attempt-0/gpu-b03/rank_1", tree / "rank_1.json")  # and the reverse
    summary = fl.ingest([tmp_path / "job-f"])
    assert summary.ingested == 2
    con = fl.connect()
    assert dict(con.execute("SELECT rank, encoding FROM dumps").fetchall()) == {2: "json", 1: "pickle"}


def _hash_bomb(depth: int = 64) -> bytes:
    """A 400-byte pickle whose dict key is a tuple of shared nested tuples: hashing it
    takes 2**depth steps, inside the C unpickler, before any check of frlake can run."""
    out = [b"\x80\x02)q\x00"]  # PROTO 2, EMPTY_TUPLE, BINPUT 0
    for i in range(1, depth + 1):
        out.append(b"h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"\x86q" + bytes([i]))  # (t, t)
    out.append(b"}h" + bytes([depth]) + b"Ns.")  # {t_depth: None}
    return b"".join(out)


@pytest.mark.slow
def test_a_hash_bomb_is_stopped_by_its_cpu_budget_and_the_rest_ingests(tmp_path, corpus, fl):
    tree = tmp_path / "nfs" / "job-x" / "attempt-0" / "host-a"
    tree.mkdir(parents=True)
    (tree / "rank_7").write_bytes(_hash_bomb())
    for rank in (0, 1):
        shutil.copy(corpus / f"job-223715/attempt-0/gpu-b03/rank_{rank}", tree / f"rank_{rank}")
    options = IngestOptions(workers=2, limits=Limits(cpu_seconds=1), chunk_files=2)
    summary = fl.ingest([tmp_path / "nfs"], options)
    assert (summary.ingested, summary.rejected, summary.rejected_by_reason) == (2, 1, {"worker_killed": 1})
    assert summary.rejected_files[0]["path"].endswith("rank_7")
    again = fl.ingest([tmp_path / "nfs"], options)  # known, unchanged: never read again
    assert (again.unchanged, again.skipped_rejected, again.ingested, again.rejected) == (2, 1, 0, 0)


@pytest.mark.slow
def test_an_uploaded_hash_bomb_is_stopped_too(corpus, fl):
    good = (corpus / "job-223715/attempt-0/gpu-b03/rank_1").read_bytes()
    options = IngestOptions(identity=IdentityOptions(job="up", attempt=0, host="h"), workers=1, isolate=True,
                            limits=Limits(cpu_seconds=1))
    summary = fl.ingest_upload([("rank_3", _hash_bomb()), ("rank_1", good)], options)
    assert (summary.ingested, summary.rejected_by_reason) == (1, {"worker_killed": 1})


_COUNTS = textwrap.dedent("""
    import json, resource, struct, sys
    from frlake.errors import DumpRejected
    from frlake.ingest.parse import parse_bytes
    from frlake.ingest.limits import Limits
    from frlake.ingest.worker import data_size
    genuine = open(sys.argv[1], "rb").read()
    cases = {
        "bytearray8": b"\\x80\\x05\\x96" + struct.pack("<Q", 2**31) + b".",
        "bytes8": b"\\x80\\x05\\x8e" + struct.pack("<Q", 2**40) + b".",
        "bytes4": b"\\x80\\x05B" + struct.pack("<I", 2**32 - 1) + b".",
        "in a real dump": genuine[:2] + b"\\x96" + struct.pack("<Q", 2**33) + genuine[2:],
    }
    # what a worker reads a dump under (frlake.ingest.worker.memory_budget): 1 GiB over what it holds
    resource.setrlimit(resource.RLIMIT_DATA, (data_size() + (1 << 30), resource.RLIM_INFINITY))
    seen = {}
    for name, data in cases.items():
        for native in (True, False):
            # CPython reads the failed bytearray's export count from the memory it was given: make that
            # memory not 0, as in a long-running worker (freed 56-byte objects whose 7th word is not)
            junk = [bytes(23 * [1]) for _ in range(1000)]
            del junk
            try:
                parse_bytes(data, Limits(), native=native)
            except DumpRejected as exc:
                seen[f"{name}, native={native}"] = exc.reason
    print(json.dumps(seen))
""")


def test_a_count_of_bytes_the_file_cannot_hold_is_truncated_and_frees_what_it_allocated():
    """BINBYTES, BINBYTES8 and BYTEARRAY8 declare a count that CPython's unpickler allocates before it reads
    the bytes: under a worker's memory budget a count of gigabytes failed to allocate (over_memory_budget on
    some machines, truncated on others), and a failed bytearray is misfreed by CPython 3.11, which prints
    "SystemError: deallocated bytearray object has exported buffers" (CPython's smallest reproducer:
    ``setrlimit(RLIMIT_DATA, 1 GiB)``, then ``pickle.loads(b"\\x80\\x05\\x96" + struct.pack("<Q", 2**31) + b".")``
    twice: the second prints). frlake refuses such a count before the unpickler allocates it: truncated,
    and nothing on stderr."""
    genuine = next(p for p in sorted((FIXTURES / "genuine").rglob("rank_*")) if p.suffix != ".json")
    out = subprocess.run([sys.executable, "-c", _COUNTS, str(genuine)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    seen = json.loads(out.stdout)
    assert len(seen) == 8 and set(seen.values()) == {"truncated"}, seen


def test_the_fuzz_harness_counts_stderr_and_unraisable_exceptions_as_findings():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import fuzz_reader
    finally:
        sys.path.remove(str(ROOT / "bench"))

    class Raises:
        def __del__(self):
            raise RuntimeError("in a destructor")

    with fuzz_reader.Noise() as noise:
        assert noise.since() == ""
        os.write(2, b"from C\n")
        assert noise.since() == "from C\n"
        Raises()
        assert noise.since() == "unraisable RuntimeError: in a destructor"
        assert noise.since() == ""
    # and its run: the cases of the seed that found CPython's bytearray print
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "fuzz_reader.py"), "--cases", "600", "--seed",
                          "20261205", "--out", os.devnull], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 differences, 0 with stderr output or unraisable exceptions" in out.stdout
