"""The fast reader of pickles (frlake/ingest/_fastpickle.pyx) against the
reference, the safe unpickler and the parser: the same columns, stacks,
groups, statuses and statistics for every dump the tests hold, and the same
verdict (reason and message) for hostile entries and for corrupted bytes.
Where it cannot vouch for a dump it leaves it to the reference; these tests
also show that real dumps do not need that."""

from __future__ import annotations

import io
import os
import pickle
import random
import resource
import struct
from contextlib import contextmanager

import pytest

from frlake.errors import DumpRejected, NotNative
from frlake.ingest import columns as entry_columns
from frlake.ingest import safeload
from frlake.ingest.limits import Limits
from frlake.ingest.parse import parse_bytes, parse_dump
from frlake.ingest.safeload import decode
from frlake.ingest.worker import data_size
from tests.helpers import CORPUS
from tests.test_speedups import HOSTILE, REAL, _dump_files, _entry, hostile_entry_lists

FAST = entry_columns._fastpickle
needs_fast = pytest.mark.skipif(FAST is None, reason="frlake was built without a C compiler")


def test_the_fast_reader_is_built_where_required():
    """CI sets FRLAKE_REQUIRE_SPEEDUPS: a build that silently left the fast reader out fails there."""
    if not os.environ.get("FRLAKE_REQUIRE_SPEEDUPS"):
        pytest.skip("FRLAKE_REQUIRE_SPEEDUPS is not set")
    assert FAST is not None, "frlake.ingest._fastpickle did not build (pip install -e . needs a C compiler)"


def _outcome(data: bytes, limits: Limits, native: bool):
    try:
        parsed, encoding = parse_bytes(data, limits, native=native)
    except DumpRejected as exc:
        return ("rejected", exc.reason, exc.message)
    columns = {name: (str(array.type), repr(array.to_pylist())) for name, array in parsed.entries.items()}  # NaN: "nan"
    return ("parsed", encoding, columns, list(parsed.stacks.items()), parsed.stats, parsed.n_entries, parsed.groups,
            parsed.pg_status, parsed.version, parsed.comm_lib_version, parsed.extra, parsed.identity, parsed.health,
            parsed.has_entries)


def _path(data: bytes, limits: Limits = Limits()) -> str:
    """Which reader read the dump: "native", "fallback" (the fast reader gave it up while parsing) or
    "reference" (the fast reader did not read it at all)."""
    try:
        obj, encoding = decode(data, len(data), native=True)
    except DumpRejected:
        return "reference"
    if not isinstance(obj, dict) or type(obj.get("entries")) is list or "entries" not in obj:
        return "reference"
    try:
        parse_dump(obj, encoding, len(data), limits)
    except NotNative:
        return "fallback"
    except DumpRejected:
        pass
    return "native"


@contextmanager
def _memory_cap(extra: int = 1 << 30):
    """What a worker process runs a dump under (frlake.ingest.worker.memory_budget): a corrupted memo index
    of hundreds of millions makes the reference allocate gigabytes, and here fail at once instead."""
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (data_size() + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _same(data: bytes, limits: Limits = Limits()):
    with _memory_cap():
        fast = _outcome(data, limits, native=True)
        reference = _outcome(data, limits, native=False)
    assert fast == reference
    return fast


@pytest.mark.slow
@needs_fast
def test_every_dump_of_the_tests_reads_the_same_and_real_pickles_read_natively():
    paths: dict[str, int] = {}
    for path in _dump_files():
        data = path.read_bytes()
        assert _same(data)[0] in ("parsed", "rejected"), path
        paths[_path(data)] = paths.get(_path(data), 0) + 1
    # Every dump torch wrote for the corpus (a modern pickle) reads natively.
    for path in (p for p in CORPUS.rglob("rank_*") if p.suffix != ".json"):
        assert _path(path.read_bytes()) == "native", path
    assert paths.get("native", 0) >= 250, paths


def _pickled(raw: list, protocol: int) -> bytes:
    return pickle.dumps({"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
                         "pg_status": {"0": {"last_enqueued_collective": 3}}, "entries": raw}, protocol=protocol)


@needs_fast
@pytest.mark.parametrize("seed", range(4))
def test_hostile_variations_of_real_entries_get_the_same_verdict(seed):
    """Each trial: a real dump's entries, one to three hostile changes, pickled by Python with protocol 2
    (BINPUT, as torch's C++ pickler memoizes) or 4 and 5 (MEMOIZE, FRAME), under the default limits and under
    tight ones. The trials reach the fast reader's both sides: columns built, and dumps given up."""
    tight = Limits(max_tensors_per_entry=3, max_dims=4, max_frames=30, max_string=40)
    small_budget = Limits(expansion_floor=300, expansion_per_byte=0.05)
    seen: dict[str, int] = {}
    for trial, raw in enumerate(hostile_entry_lists(seed, 300)[1]):
        data = _pickled(raw, (2, 4, 5)[trial % 3])
        limits = [tight, small_budget, Limits()][trial // 3 % 3]
        outcome = _same(data, limits)
        key = f"{_path(data, limits)}:{outcome[1] if outcome[0] == 'rejected' else 'parsed'}"
        seen[key] = seen.get(key, 0) + 1
    assert "native:parsed" in seen and any(k.startswith("fallback:") for k in seen), seen
    assert any(k.endswith("bad_schema") for k in seen) and any(k.endswith("too_many_nodes") for k in seen), seen


@needs_fast
@pytest.mark.parametrize("seed", range(3))
def test_corrupted_bytes_get_the_same_verdict(seed):
    """Bytes flipped, cut, doubled or dropped anywhere in a real pickle (its opcodes, lengths, memo indexes):
    the fast reader must never read past its input or accept what the reference refuses."""
    rng = random.Random(seed)
    templates = [REAL.read_bytes(), _pickled([_entry(r) for r in range(40)], 2), _pickled([_entry(r) for r in range(40)], 5)]
    verdicts: dict[str, int] = {}
    for _ in range(400):
        data = bytearray(rng.choice(templates))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            what = rng.random()
            if what < 0.5:
                data[at] = rng.randrange(256)
            elif what < 0.65:
                del data[at:at + rng.randint(1, 8)]
            elif what < 0.8:
                data[at:at] = data[at:at + rng.randint(1, 8)]
            elif what < 0.9:
                del data[at:]
                if not data:
                    data = bytearray(b"\x80")
            else:
                data[at] = rng.choice(b"(.0123adehjlqrstu}])NKMJ\x8a\x8c\x94\x95G")
        outcome = _same(bytes(data))
        verdict = outcome[1] if outcome[0] == "rejected" else "parsed"
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    assert {"corrupt_pickle", "truncated"} <= verdicts.keys(), verdicts


def _ops(*parts: bytes) -> bytes:
    return b"\x80\x02" + b"".join(parts) + b"."


def _text(s: str | bytes) -> bytes:
    raw = s if isinstance(s, bytes) else s.encode("utf-8", "surrogatepass")
    return b"X" + struct.pack("<I", len(raw)) + raw


def _top(entries_ops: bytes) -> bytes:
    """A dump whose entry list holds the given opcodes' values."""
    return _ops(b"}(", _text("version"), _text("2.10"), _text("entries"), b"](", entries_ops, b"eu")


def _entry_ops(**overrides: bytes) -> bytes:
    fields = {"record_id": b"K\x01", "pg_id": b"K\x00", "process_group": _text("0") + _text("default_pg") + b"\x86",
              "collective_seq_id": b"K\x01", "profiling_name": _text("nccl:all_reduce"), "time_created_ns": b"J\x10\x00\x00\x00",
              "state": _text("completed"), "input_sizes": b"]](K\x04K\x08ea", "input_dtypes": b"](" + _text("Float") + b"e"}
    fields.update(overrides)
    return b"}(" + b"".join(_text(k) + v for k, v in fields.items()) + b"u"


@needs_fast
@pytest.mark.parametrize("case, ops", [
    ("a plain entry", _top(_entry_ops())),
    ("64-bit bounds", _top(_entry_ops(time_created_ns=b"\x8a\x08" + struct.pack("<q", 2**63 - 1),
                                      record_id=b"\x8a\x08" + struct.pack("<q", -(2**63))))),
    ("an integer of 9 bytes", _top(_entry_ops(time_created_ns=b"\x8a\x09" + (2**63).to_bytes(9, "little", signed=True)))),
    ("LONG1 of no bytes and of negative ones", _top(_entry_ops(op_id=b"\x8a\x00", pg_id=b"\x8a\x01\xff"))),
    ("a key twice (the last wins)", _top(_entry_ops()[:-1] + _text("state") + _text("scheduled") + b"u")),
    ("a bool where an int belongs", _top(_entry_ops(record_id=b"\x88"))),
    ("NaN and -0.0 durations", _top(_entry_ops(duration_ms=b"G" + struct.pack(">d", float("nan"))) +
                                    _entry_ops(duration_ms=b"G" + struct.pack(">d", -0.0)))),
    ("a lone surrogate", _top(_entry_ops(state=_text("\ud800".encode("utf-8", "surrogatepass"))))),
    ("bytes that are not UTF-8", _top(_entry_ops(state=_text(b"\xff\xfe")))),
    ("an overlong UTF-8 form", _top(_entry_ops(state=_text(b"\xc0\xaf")))),
    ("a 4-byte character", _top(_entry_ops(state=_text("\U0001f600")))),
    ("a list in place of the pair", _top(_entry_ops(process_group=b"](" + _text("0") + _text("pg") + b"e"))),
    ("a pair of three", _top(_entry_ops(process_group=_text("0") + _text("pg") + _text("x") + b"\x87"))),
    ("a list appended one item at a time", _top(_entry_ops(input_sizes=b"]]K\x04aa"))),
    ("shared sizes (BINPUT, BINGET)", _top(_entry_ops(input_sizes=b"]]K\x04aaq\x07") + _entry_ops(input_sizes=b"h\x07"))),
    ("BINGET of an unset index", _top(_entry_ops(input_sizes=b"h\x63"))),
    ("LONG_BINPUT past the file's length", _top(_entry_ops(input_sizes=b"]r\x00\x00\x10\x00"))),
    ("SETITEMS without a mark", _ops(b"}", _text("entries"), b"]u")),
    ("APPENDS onto a dict", _top(b"}(K\x01e")),
    ("SETITEMS with an odd count", _ops(b"}(", _text("entries"), b"](e", _text("version"), b"u")),
    ("an item under the mark", _top(b"(a")),
    ("bytes after STOP", _top(_entry_ops()) + b"N"),
    ("no STOP", _top(_entry_ops())[:-1]),
    ("a FRAME longer than the file", b"\x80\x04\x95" + struct.pack("<Q", 10**9) + _top(_entry_ops())[2:]),
    # The C unpickler reads a frame at once; an argument across its end is read from the bytes after it.
    *((f"a FRAME that ends {k} bytes into the dump", b"\x80\x04\x95" + struct.pack("<Q", k) + _top(_entry_ops())[2:])
      for k in (1, 5, 9, 30, 31)),
    ("frames that end between opcodes", b"\x80\x04\x95" + struct.pack("<Q", 2) + b"}(" +
     b"\x95" + struct.pack("<Q", len(_top(_entry_ops())) - 6) + _top(_entry_ops())[4:]),
    ("protocol 6", b"\x80\x06" + _top(_entry_ops())[2:]),
    ("a global", _ops(b"cos\nsystem\n", _text("true"), b"\x85R")),
    ("a dict as a key", _ops(b"}(}", _text("entries"), b"u")),
    ("entries under a tuple that a list holds (a cycle)", _ops(b"}(", _text("entries"), b"]q\x00", b"h\x00\x85a", b"u")),
    ("an empty entry list", _top(b"")),
    ("a shape of None", _top(_entry_ops(input_sizes=b"](Ne"))),
])
def test_opcodes_and_values_read_as_the_reference_reads_them(case, ops):
    _same(ops)


@needs_fast
def test_an_entry_list_written_in_batches_and_shared_frames_read_natively():
    frame = {"name": "step", "filename": "train.py", "line": 7}
    raw = [_entry(r) for r in range(2500)]  # pickle appends 1,000 at a time
    for i, e in enumerate(raw):
        e["frames"] = [frame, {"name": f"f{i % 3}", "filename": "a.py", "line": i % 3}]
    raw[5]["frames"] = raw[4]["frames"]  # one list shared by two entries
    for protocol in (2, 4, 5):
        data = _pickled(raw, protocol)
        assert _path(data) == "native"
        outcome = _same(data)
        assert outcome[0] == "parsed" and outcome[5] == 2500
        assert len(outcome[3]) == 3  # three distinct stacks


@needs_fast
def test_what_the_reference_would_refuse_for_its_values_is_refused_the_same():
    """A value over a limit is given up by the fast reader; the reference says which limit."""
    raw = [_entry(r) for r in range(10)]
    raw[3]["state"] = "x" * 100
    raw[4]["input_sizes"] = [[1] * 9]
    limits = Limits(max_string=50, max_dims=8)
    data = _pickled(raw, 4)
    outcome = _same(data, limits)
    assert outcome[0] == "rejected" and outcome[1] in ("too_large", "bad_schema")
    assert _path(data, limits) == "fallback"


@needs_fast
def test_values_of_every_hostile_kind_in_every_field():
    """Each field of a well-formed entry replaced by each hostile value: the same verdict, field by field."""
    fields = sorted(entry_columns.KNOWN_ENTRY_KEYS)
    for name in fields:
        for value in HOSTILE:
            raw = [_entry(0), _entry(1)]
            raw[1][name] = value
            _same(_pickled(raw, 4))


# ---- a count the file cannot hold (frlake.ingest.safeload.overrun) ----------------------------------------

def _walk_in_python(data: bytes):
    saved, safeload._fastpickle = safeload._fastpickle, None
    try:
        return safeload.overrun(data)
    finally:
        safeload._fastpickle = saved


def _spliced(data: bytes, at: int, op: bytes, count: int) -> bytes:
    width = 1 if op == b"C" else 4 if op in (b"B", b"X") else 8
    return data[:at] + op + count.to_bytes(width, "little") + data[at:]


@needs_fast
def test_the_walk_in_c_and_in_python_find_the_same_counts():
    """Counts of bytes, strings and frames spliced anywhere into real pickles, read the way the C unpickler
    reads them: the two walks name the same opcode, count and bytes left, or none."""
    rng = random.Random(7)
    templates = [p.read_bytes() for p in _dump_files()][:40] + [_pickled([_entry(r) for r in range(40)], 5)]
    found = 0
    for _ in range(3000):
        data = rng.choice(templates)
        for _ in range(rng.randint(1, 3)):
            op = rng.choice((b"B", b"C", b"\x8e", b"\x96", b"X", b"\x95"))
            count = rng.choice((0, 1, 9, rng.randrange(len(data) + 1), 2**31, 2**40, 2**63 - 1, 2**64 - 1))
            data = _spliced(data, rng.randrange(len(data)), op, count % (1 << (8 * (1 if op == b"C" else 4 if op in (b"B", b"X") else 8))))
        walked = safeload.overrun(data)
        assert walked == _walk_in_python(data)
        found += walked is not None
    assert 100 < found < 2900, found  # both answers were asked for, many times


def test_every_real_pickle_declares_only_what_it_holds():
    for path in _dump_files():
        data = path.read_bytes()
        if data[:1] == b"\x80":
            assert safeload.overrun(data) is None, path


def test_the_walk_reads_across_a_frame_s_end_as_the_unpickler_does():
    """The C unpickler reads a frame at once; a read that begins in the frame and ends after it takes its
    bytes from after the frame (_pickle.c's _Unpickler_ReadImpl). Here BINBYTES8's count begins two bytes
    before the frame's end, so the count the unpickler allocates is the 8 bytes after the frame: 2**40."""
    body = b"\x8e\x00\x00"  # the opcode and two bytes of a count, at the frame's end
    data = b"\x80\x05\x95" + len(body).to_bytes(8, "little") + body + (2**40).to_bytes(8, "little") + b"."
    at = 2 + 9
    assert safeload.overrun(data) == _walk_in_python(data) == (at, 2**40, 1)
    with pytest.raises(DumpRejected) as info:
        decode(data, 1 << 20)
    assert (info.value.reason, info.value.message) == (
        "truncated", "the pickle declares 1,099,511,627,776 bytes at offset 11, where 1 are left (truncated file)")
    with _memory_cap(), pytest.raises(MemoryError):  # what the walk foresaw: CPython allocating 1 TiB
        pickle.Unpickler(io.BytesIO(data)).load()  # from a stream, as frlake reads (pickle.loads reads on)
