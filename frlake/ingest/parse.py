"""Turn one decoded Flight Recorder dump into Arrow columns.

Every FR version is read by field presence, not by a version whitelist:
the bare list of torch <= 2.2 (``seq_id``, ``time_created_us``), "1.4"
(``pg_config`` as pg id -> ranks), "2.1" ... "2.10" and later, and the JSON
variant (no frames, string pg_status, 0 for null times, list for
process_group). Fields this code does not know are kept as JSON in an
``extra`` column so nothing is lost.

The decoded object is untrusted: a pickle may reference one object many
times, so every expansion (entries, tensor sizes, frames, strings, unknown
fields) is bounded against a budget that grows with the file's size, and the
types of known fields are checked by Arrow's converters.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
import os
import re
from dataclasses import dataclass, field, replace
from itertools import accumulate, chain, repeat

import pyarrow as pa

from frlake import schema
from frlake.errors import DumpRejected

KNOWN_ENTRY_KEYS = frozenset(
    {
        "record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "seq_id", "op_id",
        "profiling_name", "time_created_ns", "time_created_us", "duration_ms", "input_sizes",
        "input_dtypes", "output_sizes", "output_dtypes", "state", "time_discovered_started_ns",
        "time_discovered_completed_ns", "retired", "timeout_ms", "is_p2p", "thread_id", "thread_name",
        "frames",
    }
)
KNOWN_TOP_KEYS = frozenset(
    {"entries", "version", "pg_config", "pg_status", "nccl_version", "comm_lib_version", "nccl_comm_state"}
)
# Keys a self-describing dump may carry to name its own identity.
IDENTITY_KEYS = {
    "job": ("job", "job_id", "job_name"),
    "attempt": ("attempt", "attempt_id", "restart", "restart_count"),
    "host": ("hostname", "host"),
    "rank": ("rank", "global_rank"),
}
_IDENTITY_KEY_SET = frozenset(k for keys in IDENTITY_KEYS.values() for k in keys)
_PG_STATUS_KEYS = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")
# "nccl:send 0->1" and "nccl:recv 1<-0": the arrow points from sender to receiver.
_P2P_NAME = re.compile(
    r"^(?:(?P<backend>[\w.]+):)?(?P<op>\w+)"
    r"(?:\s+(?:(?P<src>-?\d+)\s*->\s*(?P<dst>-?\d+)|(?P<dst2>-?\d+)\s*<-\s*(?P<src2>-?\d+)))?"
)


# Peak memory of decoding and parsing a real dump is 15-23 times its size
# (measured on 0.2-100 MB pickles); file-size caps derived from a memory
# budget divide it by this, with room to spare.
EXPANSION_FACTOR = 32
_GIB = 1 << 30


def machine_memory() -> int:
    """Physical memory of this machine in bytes (8 GiB if it cannot be told)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * _GIB


@dataclass(frozen=True)
class Limits:
    """Caps on what one dump may expand to. The defaults fit any real buffer
    (TORCH_FR_BUFFER_SIZE up to millions) with room to spare.

    ``memory_bytes`` is what one worker may allocate while it reads one dump
    (None: three quarters of the machine's memory shared by the workers,
    between 256 MiB and 16 GiB; see ``resolved``); ``max_file_bytes`` is
    derived from it (None: ``memory_bytes / EXPANSION_FACTOR``, at most
    2 GiB), so that no file under the cap can need more than the budget."""

    max_file_bytes: int | None = None
    memory_bytes: int | None = None
    max_entries: int = 5_000_000
    max_depth: int = 64
    max_string: int = 1 << 16
    max_tensors_per_entry: int = 1 << 16
    max_dims: int = 64
    max_frames: int = 1 << 12
    # Elements (tensors, dims, frames, unknown-field nodes) allowed per byte of
    # file; real dumps use under 0.1 (the corpus: 0.084 at most).
    expansion_per_byte: int = 2
    expansion_floor: int = 1 << 20
    # The fewest bytes a distinct entry, and one field of one entry, can take
    # in an honest file; the corpus' smallest are 209 and 10. More entries or
    # fields than this allows can only be shared references (a memo bomb).
    min_entry_bytes: int = 16
    min_field_bytes: int = 2
    # CPU seconds a worker process may spend decoding and parsing one dump (a
    # 2,000-entry dump needs about 0.02 s) before the kernel stops it.
    cpu_seconds: float = 30.0
    cpu_seconds_per_gib: float = 120.0

    def cpu_budget(self, size: int) -> float:
        return self.cpu_seconds + self.cpu_seconds_per_gib * size / (1 << 30)

    def resolved(self, workers: int = 1) -> "Limits":
        """These limits with the memory budget and the file-size cap made
        concrete for this machine and ``workers`` parallel workers."""
        memory = self.memory_bytes
        if memory is None:
            memory = min(16 * _GIB, max(256 << 20, machine_memory() * 3 // 4 // max(1, workers)))
        max_file = self.max_file_bytes
        if max_file is None:
            max_file = min(2 * _GIB, memory // EXPANSION_FACTOR)
        return replace(self, memory_bytes=memory, max_file_bytes=max_file)


@dataclass
class ParsedDump:
    version: str | None
    comm_lib_version: str | None
    identity: dict[str, object]
    entries: dict[str, pa.Array]
    stacks: dict[int, list[dict]]
    groups: list[dict]
    pg_status: list[dict]
    extra: str | None
    n_entries: int = 0
    stats: dict[str, int | None] = field(default_factory=dict)


class _Budget:
    __slots__ = ("left", "size")

    def __init__(self, size: int, limits: Limits):
        self.size = size
        self.left = max(limits.expansion_floor, size * limits.expansion_per_byte)

    def spend(self, n: int, what: str) -> None:
        self.left -= n
        if self.left < 0:
            raise DumpRejected(
                "too_many_nodes",
                f"{what} expands far beyond the file's size (shared references: a memo bomb?)",
            )


def bounded_json(value: object, budget: _Budget, limits: Limits) -> str:
    """Serialize an unknown field to JSON, refusing deep or exploding structures."""

    def plain(obj: object, depth: int) -> object:
        if depth > limits.max_depth:
            raise DumpRejected("too_deep", f"an unknown field is nested deeper than {limits.max_depth} levels")
        budget.spend(1, "an unknown field")
        if obj is None or isinstance(obj, (bool, float)):
            return obj
        if isinstance(obj, int):
            return _int64(obj, "an unknown field")
        if isinstance(obj, str):
            if len(obj) > limits.max_string:
                raise DumpRejected("too_large", f"a string of {len(obj):,} characters exceeds the limit")
            budget.spend(len(obj) // 16, "an unknown field")  # a shared string is paid for each time
            return obj
        if isinstance(obj, bytes):
            budget.spend(len(obj) // 16, "an unknown field")
            return obj.hex()
        if isinstance(obj, (list, tuple)):
            budget.spend(len(obj), "an unknown field")
            return [plain(v, depth + 1) for v in obj]
        if isinstance(obj, dict):
            budget.spend(len(obj), "an unknown field")
            wrong = set(map(type, obj)) - _KEY_TYPES
            if wrong:  # str() of a tuple key could expand a memo bomb
                raise _wrong_type("an unknown field's key", wrong)
            return {k if type(k) is str else str(plain(k, depth + 1)): plain(v, depth + 1) for k, v in obj.items()}
        raise DumpRejected("bad_schema", f"an unknown field holds a {type(obj).__name__}")

    # ensure_ascii: an unpaired surrogate becomes the escape "\\ud800", which UTF-8 can store
    return json.dumps(plain(value, 0), separators=(",", ":"), allow_nan=True)


_KEY_TYPES = {str, int, float, bool, type(None)}
_I64 = 1 << 63


def _int64(value: int, name: str, bound: int = _I64) -> int:
    if not -bound <= value < bound:
        raise DumpRejected("out_of_range", f"{name} holds an integer beyond {bound.bit_length()} bits")
    return value


def _ints_in_range(values: list, name: str, bound: int = _I64) -> None:
    """Every int of ``values`` (which may hold None) fits a signed column of
    ``bound``; comparing a huge int is cheap, printing one is not."""
    ints = [v for v in values if type(v) is int] if None in values else values
    if ints and (max(ints) >= bound or min(ints) < -bound):
        raise DumpRejected("out_of_range", f"'{name}' holds an integer beyond {bound.bit_length()} bits")


def _text(value: str, name: str) -> str:
    """``value`` if UTF-8 can store it: Python strings may hold unpaired
    surrogates (a pickle's BINUNICODE, a JSON "\\ud800"); those are refused."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise DumpRejected("bad_text", f"{name} holds an unpaired surrogate, which UTF-8 cannot store") from None
    return value


def stack_id(frames_key: tuple) -> int:
    """A stable 63-bit id for a stack: the same frames give the same id in every run."""
    digest = hashlib.blake2b(repr(frames_key).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def parse_dump(obj: object, encoding: str, size: int, limits: Limits = Limits()) -> ParsedDump:
    """Normalize a decoded dump (see module docstring) or raise DumpRejected."""
    budget = _Budget(size, limits)
    if isinstance(obj, list):  # torch <= 2.2: a bare list of entries
        top: dict = {}
        raw_entries = obj
    elif isinstance(obj, dict):
        top = obj
        if "entries" not in top:
            raise DumpRejected("not_flight_recorder", "the file has no 'entries': not a Flight Recorder dump")
        raw_entries = top["entries"]
    else:
        raise DumpRejected("not_flight_recorder", f"the file holds a {type(obj).__name__}, not a Flight Recorder dump")
    if not isinstance(raw_entries, list):
        raise DumpRejected("bad_schema", f"'entries' is a {type(raw_entries).__name__}, not a list")
    if len(raw_entries) > limits.max_entries:
        raise DumpRejected("too_large", f"{len(raw_entries):,} entries exceed the limit of {limits.max_entries:,}")
    budget.spend(len(raw_entries), "the entry list")
    if len(raw_entries) * limits.min_entry_bytes > max(size, 4096):
        raise DumpRejected(
            "too_many_nodes",
            f"{len(raw_entries):,} entries in {size:,} bytes: an entry takes at least {limits.min_entry_bytes} "
            "bytes, so they are shared references (a memo bomb?)",
        )

    version = top.get("version")
    if version is not None:
        version = _short_str(version, "version", limits)
    comm = top.get("comm_lib_version", top.get("nccl_version"))
    extra_top = {k: v for k, v in top.items() if k not in KNOWN_TOP_KEYS and k not in _IDENTITY_KEY_SET}
    if "nccl_comm_state" in top and top["nccl_comm_state"]:
        extra_top["nccl_comm_state"] = top["nccl_comm_state"]
    if "nccl_version" in top and "comm_lib_version" in top:
        extra_top["nccl_version"] = top["nccl_version"]

    entries, stacks = _entry_columns(raw_entries, encoding, budget, limits)
    return ParsedDump(
        version=version,
        comm_lib_version=None if comm is None else _short_str(comm, "comm_lib_version", limits),
        identity=_identity(top, limits),
        entries=entries,
        stacks=stacks,
        groups=_groups(top.get("pg_config"), budget, limits),
        pg_status=_pg_status(top.get("pg_status"), budget, limits),
        extra=bounded_json(extra_top, budget, limits) if extra_top else None,
        n_entries=len(raw_entries),
        stats=_stats(entries),
    )


def _short_str(value: object, name: str, limits: Limits) -> str:
    if not isinstance(value, (str, int, float)):
        raise DumpRejected("bad_schema", f"'{name}' is a {type(value).__name__}")
    if isinstance(value, int):
        _int64(value, f"'{name}'")
    text = str(value)
    if len(text) > limits.max_string:
        raise DumpRejected("too_large", f"'{name}' is {len(text):,} characters long")
    return _text(text, f"'{name}'")


def _identity(top: dict, limits: Limits) -> dict[str, object]:
    found: dict[str, object] = {}
    for what, keys in IDENTITY_KEYS.items():
        for key in keys:
            if key in top and top[key] is not None:
                found[what] = _short_str(top[key], key, limits)
                break
    return found


def _entry_columns(raw: list, encoding: str, budget: _Budget, limits: Limits):
    n = len(raw)
    found = set(map(type, raw)) - {dict}
    if found:
        raise DumpRejected("bad_schema", f"an entry is a {', '.join(sorted(t.__name__ for t in found))}, not a dict")
    total = sum(map(len, raw))
    if total * limits.min_field_bytes > max(budget.size, 4096):
        raise DumpRejected(
            "too_many_nodes",
            f"the entries hold {total:,} fields in {budget.size:,} bytes: shared entries (a memo bomb?)",
        )
    cols, kinds, unknown = _columns(raw, total)
    extras: list[str | None] = [None] * n
    if unknown:  # some entry has keys this frlake does not know
        for i, e in enumerate(raw):
            if not e.keys() <= KNOWN_ENTRY_KEYS:
                extras[i] = bounded_json({k: v for k, v in e.items() if k not in KNOWN_ENTRY_KEYS}, budget, limits)

    # Check every raw column's types before anything hashes, repr()s or converts it.
    for name, allowed in _RAW_TYPES.items():
        wrong = kinds[name] - allowed - {_NONE}
        if wrong:
            raise _wrong_type(name, wrong)
    seq = cols["collective_seq_id"]
    if kinds["collective_seq_id"] <= {_NONE}:  # before torch 2.4: one seq_id for collectives and p2p
        seq = cols["seq_id"]
    created = cols["time_created_ns"]
    if kinds["time_created_ns"] <= {_NONE} and not kinds["time_created_us"] <= {_NONE}:
        micros = cols["time_created_us"]
        if float in kinds["time_created_us"] and not all(map(math.isfinite, filter(None, micros))):
            raise DumpRejected("bad_value", "field 'time_created_us' holds NaN or Infinity")
        created = [None if us is None else int(us * 1000) for us in micros]
    pg_name, pg_desc = _process_groups(cols["process_group"], kinds["process_group"], cols["pg_id"])
    stack_ids, stacks = _stacks(cols["frames"], kinds["frames"], budget, limits)
    if encoding == "json":  # JSON writes 0 where pickle writes None
        for name in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            cols[name] = [None if v == 0 else v for v in cols[name]]

    backend, op, src, dst, derived_p2p = _names(cols["profiling_name"], limits)
    is_p2p = cols["is_p2p"] if not kinds["is_p2p"] <= {_NONE} else derived_p2p
    thread_id = cols["thread_id"]
    if int in kinds["thread_id"]:
        _ints_in_range([v for v in thread_id if type(v) is int], "thread_id")
        thread_id = [v if v is None or type(v) is str else str(v) for v in thread_id]

    arrays = {
        "entry_index": pa.array(range(n), pa.int32()),
        "record_id": cols["record_id"],
        "pg_id": cols["pg_id"],
        "pg_name": pg_name,
        "pg_desc": pg_desc,
        "collective_seq_id": seq,
        "p2p_seq_id": cols["p2p_seq_id"],
        "op_id": cols["op_id"],
        "profiling_name": cols["profiling_name"],
        "backend": backend,
        "op": op,
        "is_p2p": is_p2p,
        "p2p_src": src,
        "p2p_dst": dst,
        "state": cols["state"],
        "time_created_ns": created,
        "time_discovered_started_ns": cols["time_discovered_started_ns"],
        "time_discovered_completed_ns": cols["time_discovered_completed_ns"],
        "duration_ms": cols["duration_ms"],
        "retired": cols["retired"],
        "timeout_ms": cols["timeout_ms"],
        "input_sizes": cols["input_sizes"],
        "input_dtypes": cols["input_dtypes"],
        "output_sizes": cols["output_sizes"],
        "output_dtypes": cols["output_dtypes"],
        "thread_id": thread_id,
        "thread_name": cols["thread_name"],
        "stack_id": stack_ids,
        "extra": extras,
    }
    for name in ("input_sizes", "output_sizes"):
        arrays[name] = _shapes(arrays[name], name, budget, limits)
    for name in ("input_dtypes", "output_dtypes"):
        arrays[name] = _string_lists(arrays[name], name, budget, limits)
    out: dict[str, pa.Array] = {}
    for name, values in arrays.items():
        if isinstance(values, pa.Array):
            out[name] = values
            continue
        typ = schema.ENTRIES.field(name).type

        try:
            out[name] = pa.array(values, typ, size=n)
        except UnicodeError:
            raise DumpRejected("bad_text", f"field '{name}' holds an unpaired surrogate, which UTF-8 cannot store") from None
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            # The Python types were checked above: what is left is a value out of the column's range.
            if pa.types.is_integer(typ):
                raise DumpRejected("out_of_range", f"field '{name}' holds an integer beyond {typ.bit_width} bits") from None
            raise DumpRejected("bad_schema", f"field '{name}' has a value of the wrong type") from None
        if typ == pa.string():
            _check_lengths(out[name], name, limits)
    return out, stacks


# Python types each scalar column may hold. Checked before Arrow converts a
# column: Arrow's error message would repr() a wrong value, and the repr of a
# memo bomb never ends.
_INT, _NUM, _STR, _BOOL = {int}, {int, float}, {str}, {bool, int}
_RAW_TYPES = {
    "record_id": _INT, "pg_id": _INT, "seq_id": _INT, "collective_seq_id": _INT, "p2p_seq_id": _INT, "op_id": _INT, "profiling_name": _STR,
    "state": _STR, "time_created_ns": _INT, "time_created_us": _NUM, "time_discovered_started_ns": _INT,
    "time_discovered_completed_ns": _INT, "duration_ms": _NUM, "retired": _BOOL, "timeout_ms": _INT,
    "is_p2p": _BOOL, "thread_id": _STR | _INT, "thread_name": _STR,
}
_NONE = type(None)


def _wrong_type(name: str, found: set[type]) -> DumpRejected:
    names = ", ".join(sorted(t.__name__ for t in found))
    return DumpRejected("bad_schema", f"field '{name}' holds a value of type {names}")


def _columns(raw: list, total: int) -> tuple[dict[str, list], dict[str, set[type]], bool]:
    """Every known field of every entry as a column, the Python types found in
    each column, and whether some entry holds a field this frlake does not know.

    The fields that the first and last entries share (nearly all of them in a
    real dump) are read by one C-level ``itemgetter`` call per entry and then
    transposed; any other known field takes one ``dict.get`` pass of its own.
    """
    n = len(raw)
    cols: dict[str, list] = {}
    shared = [k for k in raw[0] if type(k) is str and k in KNOWN_ENTRY_KEYS and k in raw[-1]] if n else []
    while shared:
        try:
            rows = list(map(operator.itemgetter(*shared), raw))
        except KeyError as exc:  # a field some middle entry lacks: read it on its own below
            shared.remove(exc.args[0])
            continue
        cols = {shared[0]: rows} if len(shared) == 1 else dict(zip(shared, zip(*rows)))
        break
    present = n * len(cols)
    only_shared = present == total  # then no entry holds any other field
    kinds = {name: set(map(type, col)) for name, col in cols.items()}
    for name in _FIELDS:
        if name in cols:
            continue
        if only_shared:
            cols[name], kinds[name] = [None] * n, {_NONE}
            continue
        col = list(map(dict.get, raw, repeat(name), repeat(_MISSING)))
        found = set(map(type, col))
        if object in found:  # the _MISSING sentinel: no pickle or JSON value has type object
            present -= col.count(_MISSING)
            col = [None if v is _MISSING else v for v in col]
            found.discard(object)
            found.add(_NONE)
        present += n
        cols[name], kinds[name] = col, found
    return cols, kinds, present != total


def _flatten(values: list, name: str, budget: _Budget, max_len: int, what: str) -> tuple[list, pa.Array, pa.Array | None]:
    """One level of nesting: every value a list (or None) of at most
    ``max_len`` items, paid for. Returns the items, the Arrow offsets of each
    value's items and, if some value is None, the mask of those."""
    found = set(map(type, values))
    if found - {list, _NONE}:
        raise _wrong_type(name, found - {list, _NONE})
    if _NONE in found:
        lists = [v for v in values if v is not None]
        lengths = [0 if v is None else len(v) for v in values]
    else:
        lists, lengths = values, list(map(len, values))
    if lengths and max(lengths) > max_len:
        raise DumpRejected("bad_schema", f"field '{name}' has {what} with more than {max_len:,} items")
    total = sum(lengths)
    budget.spend(total, name)
    if total >= 2**31:
        raise DumpRejected("too_large", f"field '{name}' holds {total:,} items")
    mask = pa.array([v is None for v in values], pa.bool_()) if _NONE in found else None
    return list(chain.from_iterable(lists)), pa.array([0, *accumulate(lengths)], pa.int32()), mask


def _shapes(values: list, name: str, budget: _Budget, limits: Limits) -> pa.Array:
    """Tensor shapes: lists of lists of ints, bounded and type-checked before
    anything expands them, then assembled from flat buffers."""
    tensors, outer, outer_mask = _flatten(values, name, budget, limits.max_tensors_per_entry, "a list of tensors")
    dims, inner, inner_mask = _flatten(tensors, name, budget, limits.max_dims, "a tensor shape")
    found = set(map(type, dims)) - {int}
    if found:
        raise _wrong_type(name, found)
    try:
        flat = pa.array(dims, pa.int64())
    except OverflowError:
        raise DumpRejected("bad_schema", f"field '{name}' holds a dimension beyond 64 bits") from None
    shapes = pa.ListArray.from_arrays(inner, flat, mask=inner_mask)
    return pa.ListArray.from_arrays(outer, shapes, type=_SIZES, mask=outer_mask)


def _string_lists(values: list, name: str, budget: _Budget, limits: Limits) -> pa.Array:
    items, offsets, mask = _flatten(values, name, budget, limits.max_tensors_per_entry, "a list")
    found = set(map(type, items)) - {str}
    if found:
        raise _wrong_type(name, found)
    if items and max(map(len, items)) > limits.max_string:
        raise DumpRejected("too_large", f"field '{name}' holds a string over {limits.max_string:,} characters")
    try:
        strings = pa.array(items, pa.string())
    except UnicodeError:
        raise DumpRejected("bad_text", f"field '{name}' holds an unpaired surrogate, which UTF-8 cannot store") from None
    return pa.ListArray.from_arrays(offsets, strings, type=_DTYPES, mask=mask)


_FIELDS = tuple(sorted(KNOWN_ENTRY_KEYS))
_SIZES, _DTYPES = schema.ENTRIES.field("input_sizes").type, schema.ENTRIES.field("input_dtypes").type
_MISSING = object()
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_FRAME_FIELDS = operator.itemgetter("name", "filename", "line")


def _check_lengths(arr: pa.Array, name: str, limits: Limits) -> None:
    import pyarrow.compute as pc

    if len(arr) and arr.null_count < len(arr):
        longest = pc.max(pc.utf8_length(arr)).as_py()
        if longest is not None and longest > limits.max_string:
            raise DumpRejected("too_large", f"field '{name}' holds a string of {longest:,} characters")


def _process_groups(groups: list, found: set[type], pg_ids: list) -> tuple[list, list]:
    """Split (name, desc) pairs; before torch 2.4 only the pg_id names a group."""
    if found <= {_NONE}:
        _ints_in_range(pg_ids, "pg_id")
        return [None if p is None else str(p) for p in pg_ids], [None] * len(groups)
    pairs = [g for g in groups if g is not None] if _NONE in found else groups
    if found - {tuple, list, _NONE} or set(map(len, pairs)) - {2}:
        raise DumpRejected("bad_schema", "'process_group' is not a (name, desc) pair")
    if _NONE in found:
        names = [None if g is None else g[0] for g in groups]
        descs = [None if g is None else g[1] for g in groups]
    else:
        names, descs = list(map(_FIRST, groups)), list(map(_SECOND, groups))
    name_kinds = set(map(type, names))
    if name_kinds - {str, int, _NONE}:
        raise _wrong_type("process_group name", name_kinds - {str, int, _NONE})
    if set(map(type, descs)) - {str, _NONE}:
        raise _wrong_type("process_group desc", set(map(type, descs)) - {str, _NONE})
    if int in name_kinds:
        _ints_in_range([v for v in names if type(v) is int], "process_group name")
        names = [v if v is None or type(v) is str else str(v) for v in names]
    return names, descs


def _stacks(frames_col: list, found: set[type], budget: _Budget, limits: Limits) -> tuple[list, dict[int, list[dict]]]:
    """Give each entry the id of its stack and keep each distinct stack once.

    torch's pickler shares frame dicts between entries, so a stack is first
    keyed by the identities of its frame objects (C speed); only each distinct
    key is read for its content.
    """
    if found <= {_NONE}:
        return [None] * len(frames_col), {}
    if found - {list, _NONE}:
        raise DumpRejected("bad_schema", "'frames' is not a list of frames")
    lists = [f for f in frames_col if f is not None] if _NONE in found else frames_col
    depths = list(map(len, lists))
    if max(depths) > limits.max_frames:
        raise DumpRejected("bad_schema", f"'frames' holds more than {limits.max_frames} frames")
    budget.spend(sum(depths) + len(depths), "frames")
    if _NONE in found:
        keys = [None if f is None else tuple(map(id, f)) for f in frames_col]
    else:
        keys = list(map(tuple, map(map, repeat(id), frames_col)))
    first: dict[tuple | None, int] = {}
    firsts = list(map(first.setdefault, keys, range(len(keys))))  # each entry: the first entry with its frames
    stacks: dict[int, list[dict]] = {}
    by_content: dict[tuple, int] = {}
    resolved = {i: None if key is None else _intern_stack(frames_col[i], by_content, stacks, limits)
                for key, i in first.items()}
    return list(map(resolved.__getitem__, firsts)), stacks


def _intern_stack(frames: list, by_content: dict, stacks: dict, limits: Limits) -> int:
    if set(map(type, frames)) - {dict}:
        raise DumpRejected("bad_schema", "a frame is not a dict")
    try:
        key = tuple(map(_FRAME_FIELDS, frames))
    except KeyError:
        key = tuple((f.get("name"), f.get("filename"), f.get("line")) for f in frames)
    # Only str, int and None may be hashed: a tuple bomb would hash forever.
    if set(map(type, chain.from_iterable(key))) - {str, int, _NONE}:
        raise DumpRejected("bad_schema", "a frame holds something other than a name, file and line")
    sid = by_content.get(key)
    if sid is None:
        for name, filename, line in key:
            for text in (name, filename):
                if text is not None and (type(text) is not str or len(text) > limits.max_string):
                    raise DumpRejected("bad_schema", "a frame's name or filename is not a short string")
                if text is not None:
                    _text(text, "a frame's name or filename")
            if line is not None and type(line) is not int:
                raise DumpRejected("bad_schema", "a frame's line is not an integer")
            if line is not None:
                _int64(line, "a frame's line")
        sid = by_content[key] = stack_id(key)
        stacks[sid] = [{"name": a, "filename": b, "line": c} for a, b, c in key]
    return sid


def _names(profiling_names: list, limits: Limits):
    """Split 'nccl:send 0->1' into backend, op, src, dst and is-p2p, once per distinct name."""
    if not profiling_names:
        return [], [], [], [], []
    table = {name: _split_name(name, limits) for name in dict.fromkeys(profiling_names)}
    return tuple(map(list, zip(*map(table.__getitem__, profiling_names))))


def _split_name(name: object, limits: Limits) -> tuple:
    if not isinstance(name, str) or len(name) > limits.max_string:
        return (None, None, None, None, None)
    m = _P2P_NAME.match(name)
    if not m:
        return (None, None, None, None, None)
    op = m["op"]
    src, dst = _rank(m["src"] or m["src2"]), _rank(m["dst"] or m["dst2"])
    return (m["backend"], op, src, dst, op in ("send", "recv", "isend", "irecv"))


def _rank(text: str | None) -> int | None:
    if text is None or len(text) > 10:
        return None
    value = int(text)
    return value if abs(value) < 2**31 else None


def _parse_ranks(raw: object) -> list[int] | None:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if isinstance(raw, (list, tuple)) and set(map(type, raw)) <= {int}:
        return list(raw)
    return None


def _mapping(value: object, name: str, budget: _Budget) -> dict:
    """A top-level table of the dump (pg_config, pg_status): a dict, paid for."""
    if not isinstance(value, dict):
        raise DumpRejected("bad_schema", f"'{name}' is a {type(value).__name__}, not a dict")
    budget.spend(len(value), name)
    return value


def _groups(pg_config: object, budget: _Budget, limits: Limits) -> list[dict]:
    if not pg_config:
        return []
    pg_config = _mapping(pg_config, "pg_config", budget)
    groups = []
    for key, value in pg_config.items():
        if isinstance(value, dict):  # 2.1 and later: {name, desc, ranks: "[0, 1]"}
            name, desc, raw = value.get("name", key), value.get("desc"), value.get("ranks")
        else:  # 1.4: pg id -> list of ranks
            name, desc, raw = key, None, value
        if isinstance(raw, (list, tuple)):
            budget.spend(len(raw), "pg_config")
        elif isinstance(raw, str) and len(raw) > 16 * limits.max_string:
            raise DumpRejected("too_large", "a pg_config rank list is too long")
        ranks = _parse_ranks(raw)
        if ranks is not None and len(ranks) >= 2**31:
            ranks = None
        if ranks:
            _ints_in_range(ranks, "pg_config ranks", 1 << 31)
        groups.append(
            {
                "pg_name": _short_str(name, "pg_config name", limits),
                "pg_desc": None if desc is None else _short_str(desc, "pg_config desc", limits),
                "ranks": ranks,
                "group_size": None if ranks is None else len(ranks),
                "ranks_raw": None if raw is None or ranks is not None else bounded_json(raw, budget, limits),
            }
        )
    return groups


def _as_int(value: object, name: str) -> int | None:
    if value is None or type(value) is bool:
        return None
    if type(value) is float and not math.isfinite(value):
        raise DumpRejected("bad_value", f"pg_status '{name}' is NaN or Infinity")
    if type(value) is str and len(value.strip()) > 20:  # int() of thousands of digits is slow, then refused
        if value.strip().lstrip("+-").isdigit():
            raise DumpRejected("out_of_range", f"pg_status '{name}' is an integer beyond 64 bits")
        return None
    if type(value) is not int:
        try:
            value = int(value)  # JSON dumps write pg_status values as strings
        except (TypeError, ValueError):
            return None
    return _int64(value, f"pg_status '{name}'")


def _pg_status(status: object, budget: _Budget, limits: Limits) -> list[dict]:
    if not status:
        return []
    status = _mapping(status, "pg_status", budget)
    rows = []
    for key, value in status.items():
        pg_id = _short_str(key, "pg_status key", limits)  # checks the key's type before anything prints it
        if not isinstance(value, dict):
            raise DumpRejected("bad_schema", f"pg_status of group {pg_id[:80]!r} is a {type(value).__name__}, not a dict")
        row = {"pg_id": pg_id}
        for name in _PG_STATUS_KEYS:
            row[name] = _as_int(value.get(name), name)
        rest = {k: v for k, v in value.items() if k not in _PG_STATUS_KEYS}
        row["extra"] = bounded_json(rest, budget, limits) if rest else None
        rows.append(row)
    return rows


def _stats(entries: dict[str, pa.Array]) -> dict[str, int | None]:
    import pyarrow.compute as pc

    rec = pc.min_max(entries["record_id"])
    created = pc.min_max(entries["time_created_ns"])
    return {
        "first_record_id": rec["min"].as_py(),
        "last_record_id": rec["max"].as_py(),
        "first_time_created_ns": created["min"].as_py(),
        "last_time_created_ns": created["max"].as_py(),
    }
