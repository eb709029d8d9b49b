"""The compiled passes of the parser (frlake/ingest/_speedups.pyx) against
the Python ones, the reference: the same columns, stacks and statistics for
every dump the tests hold, and the same verdict (the same reason and
message) for thousands of hostile variations of a real dump's entries."""

from __future__ import annotations

import os
import pickle
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from frlake.errors import DumpRejected
from frlake.ingest import columns as entry_columns
from frlake.ingest.limits import Limits
from frlake.ingest.parse import parse_dump
from frlake.ingest.safeload import decode
from tests.helpers import CORPUS, FIXTURES, ROOT

COMPILED = entry_columns._speedups
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="frlake was built without a C compiler")


def test_the_compiled_passes_are_built_where_required():
    """CI sets FRLAKE_REQUIRE_SPEEDUPS: a build that silently fell back to Python fails there."""
    if os.environ.get("FRLAKE_REQUIRE_SPEEDUPS"):
        assert COMPILED is not None, "frlake.ingest._speedups did not build (pip install -e . needs a C compiler)"
    else:
        pytest.skip("FRLAKE_REQUIRE_SPEEDUPS is not set")


def _outcome(obj, encoding: str, size: int, limits: Limits, compiled: bool):
    saved = entry_columns._speedups
    entry_columns._speedups = COMPILED if compiled else None
    try:
        parsed = parse_dump(obj, encoding, size, limits)
    except DumpRejected as exc:
        return ("rejected", exc.reason, exc.message)
    finally:
        entry_columns._speedups = saved
    columns = {name: (str(array.type), repr(array.to_pylist())) for name, array in parsed.entries.items()}  # NaN: "nan"
    return ("parsed", columns, list(parsed.stacks.items()), parsed.stats, parsed.n_entries)


def _same(obj, encoding: str, size: int, limits: Limits = Limits()):
    compiled = _outcome(obj, encoding, size, limits, compiled=True)
    reference = _outcome(obj, encoding, size, limits, compiled=False)
    assert compiled == reference
    return compiled


def _dump_files() -> list[Path]:
    roots = [CORPUS, FIXTURES / "formats", FIXTURES / "producers", FIXTURES / "real", ROOT / "samples"]
    return sorted(p for root in roots for p in root.rglob("*") if p.is_file() and p.suffix not in (".md", ".py"))


@needs_compiled
def test_every_dump_of_the_tests_parses_the_same_compiled():
    files, parsed = _dump_files(), 0
    assert len(files) > 300
    for path in files:
        data = path.read_bytes()
        try:
            obj, encoding = decode(data, 1 << 31)
        except DumpRejected:
            continue
        if _same(obj, encoding, len(data))[0] == "parsed":
            parsed += 1
            raw = obj if isinstance(obj, list) else obj.get("entries", [])
            # a real dump takes the compiled passes themselves, not their fall-back to Python
            columns = COMPILED.columns(raw, entry_columns._FIELD_INDEX)
            assert columns is not None, path
            frames = [e.get("frames") for e in raw]
            if any(f is not None for f in frames):
                assert COMPILED.first_same_frames(frames) is not None, path
            for name, values in zip(entry_columns._FIELDS, columns[0], strict=True):
                kind = SCALAR_FIELDS.get(name)
                if kind is not None and set(map(type, values)) <= {KIND_TYPES[kind], type(None)}:
                    assert COMPILED.scalars(values, kind) is not None, (path, name)
    assert parsed > 300


# The fields stored as they are, as a column of scalars, by the compiled kind that builds them.
SCALAR_FIELDS = {name: entry_columns._SCALAR_KINDS[entry_columns.schema.ENTRIES.field(name).type]
                 for name in entry_columns._FIELDS if name in entry_columns.schema.ENTRIES.names
                 and entry_columns.schema.ENTRIES.field(name).type in entry_columns._SCALAR_KINDS}
KIND_TYPES = {} if COMPILED is None else {COMPILED.INT64: int, COMPILED.FLOAT64: float, COMPILED.BOOL: bool,
                                          COMPILED.STRING: str}


@needs_compiled
@pytest.mark.parametrize("values, typ", [
    ([1, None, -(2**63), 2**63 - 1, 0], "int64"), ([None] * 9, "int64"), ([], "int64"), ([True, 1], "int64"),
    ([2**63], "int64"), ([1.5], "int64"), ([1.5, None, float("nan"), -0.0, float("inf")], "double"), ([1], "double"),
    ([True, False, None, True] * 5, "bool"), ([1], "bool"), (["", "nccl:send 0->1", None, "é€😀"], "string"),
    (["\ud800"], "string"), ([b"x"], "string"), ([None] * 17, "string"),
])
def test_a_column_of_scalars_is_what_arrow_makes_of_it_or_left_to_arrow(values, typ):
    """The compiled buffers hold what pa.array makes of the same list; a value of another type, beyond 64 bits,
    or that UTF-8 cannot store is left to pa.array (None), which says what is wrong."""
    import pyarrow as pa

    arrow_type = {"int64": pa.int64(), "double": pa.float64(), "bool": pa.bool_(), "string": pa.string()}[typ]
    built = entry_columns._compiled_array(values, arrow_type, len(values))
    try:
        expected = pa.array(values, arrow_type)
    except (pa.ArrowException, TypeError, ValueError, OverflowError, UnicodeError):
        assert built is None
        return
    if any(type(v) is not KIND_TYPES[entry_columns._SCALAR_KINDS[arrow_type]] for v in values if v is not None):
        assert built is None  # pa.array converts it (a bool as an int, an int as a float): left to it
        return
    built.validate(full=True)
    assert built.type == expected.type and built.null_count == expected.null_count
    assert repr(built.to_pylist()) == repr(expected.to_pylist())  # NaN and -0.0 compared by their repr


def _entry(rank: int = 0):
    frame = {"name": "step", "filename": "train.py", "line": 7}
    return {"record_id": rank, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 1,
            "p2p_seq_id": 0, "op_id": 1, "profiling_name": "nccl:all_reduce", "time_created_ns": 10,
            "input_sizes": [[4, 8]], "output_sizes": [[4, 8]], "input_dtypes": ["Float"], "output_dtypes": ["Float"],
            "state": "completed", "retired": True, "is_p2p": False, "frames": [frame, frame]}


# Values a hostile or odd dump may hold in any field, or in any place inside a list field.
HOSTILE = [None, True, False, 0, -1, 7, 2**31, 2**63 - 1, -(2**63), 2**63, 2**64, -(2**70), 1.5, float("nan"),
           float("inf"), "", "x", "nccl:send 0->1", "\ud800", b"raw", bytearray(b"b"), (), (1, 2), ("0", "pg"),
           ("0",), [], [[]], [None], [[None]], [[1, 2]], [[True]], [[2**64]], [[1.5]], [["a"]], [(1,)], [[1]] * 5,
           [[1] * 9], ["Float"], ["Float", None], [1], [{}], {"a": 1}, {}, {1: 2},
           [{"name": "f", "filename": "a.py", "line": 1}], [{"name": "f", "filename": "a.py", "line": 2**70}],
           [{"name": 3, "filename": "a.py", "line": 1}], [None, {"name": "f"}]]
KEYS = [*sorted(entry_columns.KNOWN_ENTRY_KEYS), "new_field", 7, ("k",)]


def _mutate(raw: list, rng: random.Random) -> None:
    i = rng.randrange(len(raw))
    what = rng.random()
    if what < 0.05:
        raw[i] = rng.choice([[], "entry", None, (1,)])
    elif what < 0.15 and isinstance(raw[i], dict) and raw[i]:
        del raw[i][rng.choice(list(raw[i]))]
    elif what < 0.25 and isinstance(raw[i], dict):  # share another entry's list (a pickle's memo does)
        j = rng.randrange(len(raw))
        key = rng.choice(["frames", "input_sizes", "output_sizes", "input_dtypes"])
        if isinstance(raw[j], dict) and key in raw[j]:
            raw[i][key] = raw[j][key]
    elif what < 0.45 and isinstance(raw[i], dict):  # one place inside a list field
        key = rng.choice(["frames", "input_sizes", "output_sizes", "input_dtypes", "output_dtypes"])
        value = raw[i].get(key)
        if isinstance(value, list) and value:
            k = rng.randrange(len(value))
            inner = value[k]
            if isinstance(inner, list) and inner and rng.random() < 0.5:
                inner[rng.randrange(len(inner))] = rng.choice(HOSTILE)
            else:
                value[k] = rng.choice(HOSTILE)
    elif isinstance(raw[i], dict):
        raw[i][rng.choice(KEYS)] = rng.choice(HOSTILE)


REAL = CORPUS / "job-223715" / "attempt-0" / "gpu-b03" / "rank_0"


def hostile_entry_lists(seed: int, trials: int) -> tuple[int, Iterator[list]]:
    """The size of a real dump's entries pickled (five made-up entries added), and ``trials`` times those
    entries (the memo keeps frames and entries shared) with one to three hostile changes."""
    real = decode(REAL.read_bytes(), 1 << 31)[0]["entries"] * 3 + [_entry(r) for r in range(5)]
    template = pickle.dumps(real, protocol=4)

    def lists() -> Iterator[list]:
        rng = random.Random(seed)
        for _ in range(trials):
            raw = pickle.loads(template)
            for _ in range(rng.randint(1, 3)):
                _mutate(raw, rng)
            yield raw

    return len(template), lists()


@needs_compiled
@pytest.mark.parametrize("seed", range(4))
def test_hostile_variations_of_real_entries_get_the_same_verdict(seed):
    """Each trial: a real dump's entries with one to three hostile changes (:func:`hostile_entry_lists`),
    under the default limits and under tight ones (tensors, dims, frames, the expansion budget)."""
    size_of_real, lists = hostile_entry_lists(seed, 600)
    tight = Limits(max_tensors_per_entry=3, max_dims=4, max_frames=30)
    small_budget = Limits(expansion_floor=300, expansion_per_byte=1)
    verdicts: dict[str, int] = {}
    for trial, raw in enumerate(lists):
        limits, size = [(tight, size_of_real), (small_budget, 100), (Limits(), size_of_real)][trial % 3]
        outcome = _same({"version": "2.10", "entries": raw}, "pickle", size, limits)
        verdict = outcome[1] if outcome[0] == "rejected" else "parsed"
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    # The trials reach both sides of the compiled passes: well-formed dumps and each kind of rejection.
    assert {"parsed", "bad_schema", "too_many_nodes"} <= verdicts.keys(), verdicts


@needs_compiled
def test_entries_that_share_one_frame_list_and_equal_frames_get_one_stack():
    shared = [{"name": "f", "filename": "a.py", "line": 1}]
    raw = [_entry(0), _entry(1), _entry(2), _entry(3)]
    raw[1]["frames"] = raw[0]["frames"]  # the same list object
    raw[2]["frames"] = shared  # other frame objects with equal contents
    raw[3]["frames"] = None
    dump = {"version": "2.10", "entries": raw}
    assert _same(dump, "pickle", 10_000)[0] == "parsed"
    parsed = parse_dump(dump, "pickle", 10_000)
    stack_ids = parsed.entries["stack_id"].to_pylist()
    assert stack_ids[0] == stack_ids[1] != stack_ids[2] and stack_ids[3] is None
    assert len(parsed.stacks) == 2
