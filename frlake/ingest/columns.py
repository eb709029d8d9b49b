"""The entries of one dump as Arrow columns: every known field read by
presence (whatever the FR version), each raw column's Python types checked
before anything hashes, repr()s or converts it, tensor shapes and dtype lists
built from flat buffers, stacks kept once each."""

from __future__ import annotations

import hashlib
import math
import operator
import re
from itertools import accumulate, chain, repeat

import pyarrow as pa
import pyarrow.compute as pc

from frlake import schema
from frlake.errors import DumpRejected, NotNative
from frlake.ingest.checks import NONE, Budget, bounded_json, int64, ints_in_range, storable_text, wrong_type
from frlake.ingest.limits import Limits
from frlake.ingest.native import fastpickle as _fastpickle  # None without a C compiler: Python passes
from frlake.ingest.native import speedups as _speedups
from frlake.signatures import signatures_of

# What a dump's ``entries`` may be once decoded: a list, or entries that the fast reader left as columns.
ENTRY_LISTS = (list,) if _fastpickle is None else (list, _fastpickle.NativeEntries)

# Every FR key an entry may hold, and the Python types its values may have
# (besides None), from the one table of entry fields (frlake.schema).
KNOWN_ENTRY_KEYS = frozenset(schema.RAW_ENTRY_KEYS)
# The scalar ones are checked here before Arrow converts them: Arrow's error
# message would repr() a wrong value, and the repr of a memo bomb never ends.
# (Lists and pairs are checked by the functions that flatten them.)
_RAW_TYPES = {k: types for k, types in schema.RAW_ENTRY_KEYS.items() if not types & {list, tuple}}
# The op names of point-to-point calls (torchcomms' "batch_op_issue" is one batch of sends and recvs).
P2P_OPS = frozenset({"send", "recv", "isend", "irecv", "batch_op_issue"})
# "nccl:send 0->1" and "nccl:recv 1<-0": the arrow points from sender to receiver.
_P2P_NAME = re.compile(
    r"^(?:(?P<backend>[\w.]+):)?(?P<op>\w+)"
    r"(?:\s+(?:(?P<src>-?\d+)\s*->\s*(?P<dst>-?\d+)|(?P<dst2>-?\d+)\s*<-\s*(?P<src2>-?\d+)))?"
)


def stack_id(frames_key: tuple) -> int:
    """A stable 63-bit id for a stack: the same frames give the same id in every run."""
    digest = hashlib.blake2b(repr(frames_key).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


def entry_columns(raw: list, encoding: str, budget: Budget, limits: Limits):
    if type(raw) is not list:  # left as columns by the fast reader
        return _native_columns(raw, budget, limits)
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
        wrong = kinds[name] - allowed - {NONE}
        if wrong:
            raise wrong_type(name, wrong)
    seq = cols["collective_seq_id"]
    if kinds["collective_seq_id"] <= {NONE}:  # before torch 2.4: one seq_id for collectives and p2p
        seq = cols["seq_id"]
    created = cols["time_created_ns"]
    if kinds["time_created_ns"] <= {NONE} and not kinds["time_created_us"] <= {NONE}:
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
    is_p2p = derived_p2p
    # The op name wins where the flag contradicts it: torchcomms records its sends and recvs ("ncclx:send",
    # no peer in the name) with is_p2p false. A true flag is kept (NCCL's p2p batches, "nccl:coalesced").
    if kinds["is_p2p"] <= {bool, NONE} and not kinds["is_p2p"] <= {NONE}:
        flags = pa.array(cols["is_p2p"], pa.bool_())
        is_p2p = pc.or_(pc.fill_null(flags, False), pc.fill_null(derived_p2p, False))
    elif not kinds["is_p2p"] <= {NONE}:  # integers as flags
        is_p2p = [bool(flag) or bool(named) for flag, named in zip(cols["is_p2p"], derived_p2p.to_pylist())]
    thread_id = cols["thread_id"]
    if int in kinds["thread_id"]:
        ints_in_range([v for v in thread_id if type(v) is int], "thread_id")
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
    return _finish(arrays, n, limits), stacks


def _finish(arrays: dict, n: int, limits: Limits) -> dict[str, pa.Array]:
    """The signatures of the lists, and every column as an Arrow array of its type."""
    for pair in (schema.SIGNED[:2], schema.SIGNED[2:]):  # inputs and outputs together: shapes, then dtypes
        for (_, sig), values in zip(pair, signatures_of(*(arrays[name] for name, _ in pair)), strict=True):
            arrays[sig] = values
    out: dict[str, pa.Array] = {}
    for name, values in arrays.items():
        if isinstance(values, pa.Array):
            out[name] = values
            continue
        typ = schema.ENTRIES.field(name).type
        try:
            out[name] = _scalar_array(values, typ, n)
        except UnicodeError:
            raise DumpRejected("bad_text", f"field '{name}' holds an unpaired surrogate, which UTF-8 cannot store") from None
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            # The Python types were checked above: what is left is a value out of the column's range.
            if pa.types.is_integer(typ):
                raise DumpRejected("out_of_range", f"field '{name}' holds an integer beyond {typ.bit_width} bits") from None
            raise DumpRejected("bad_schema", f"field '{name}' has a value of the wrong type") from None
        if typ == pa.string():
            _check_lengths(out[name], name, limits)
    return out


# The kind of value of every known field that the fast reader builds columns of (what a well-formed dump of
# torch 2.4 and later holds); the fields of older dumps it leaves to the reference.
_KIND = None if _fastpickle is None else _fastpickle.Kind
_NATIVE_KINDS = {} if _fastpickle is None else {
    **dict.fromkeys(("record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
                     "time_discovered_started_ns", "time_discovered_completed_ns", "timeout_ms"), _KIND.K_INT),
    "duration_ms": _KIND.K_FLOAT,
    **dict.fromkeys(("retired", "is_p2p"), _KIND.K_BOOL),
    **dict.fromkeys(("profiling_name", "state", "thread_id", "thread_name"), _KIND.K_STR),
    "process_group": _KIND.K_PAIR,
    **dict.fromkeys(("input_sizes", "output_sizes"), _KIND.K_SIZES),
    **dict.fromkeys(("input_dtypes", "output_dtypes"), _KIND.K_DTYPES),
    "frames": _KIND.K_FRAMES,
    **dict.fromkeys(("seq_id", "time_created_us"), _KIND.K_REFUSE),
}
assert not _NATIVE_KINDS or _NATIVE_KINDS.keys() == KNOWN_ENTRY_KEYS, "every known field has a kind for the fast reader"
_NATIVE_NAMES = list(_NATIVE_KINDS)
_NATIVE_KIND_BYTES = bytes(map(int, _NATIVE_KINDS.values()))


def _native_columns(raw, budget: Budget, limits: Limits) -> tuple[dict[str, pa.Array], dict[int, list[dict]]]:
    """:func:`entry_columns` of entries that the fast reader left in its graph: the same columns and
    stacks, built from its buffers. Anything it cannot vouch for raises NotNative (see frlake.errors)
    before anything is spent or kept, and the reference reads the dump."""
    built = raw.graph.entry_cells(raw.node, _NATIVE_NAMES, _NATIVE_KIND_BYTES, min(limits.max_tensors_per_entry, 2**31),
                                  min(limits.max_dims, 2**31), min(limits.max_frames, 2**31), min(limits.max_string, 2**31))
    if built is None:
        raise NotNative("a value the fast reader does not build columns of")
    n, fields, cols = built
    if fields * limits.min_field_bytes > max(budget.size, 4096):
        raise NotNative("the entries hold more fields than their bytes: the reference says so")
    (pg_name, pg_desc) = cols["process_group"]
    if n and pg_name[0] == 0 and pg_desc[0] == 0:  # no (name, desc) pair: the reference names groups by their pg_id
        raise NotNative("no process_group pairs")
    frame_lists, frames, distinct, places, valid_places = cols["frames"]
    sizes = [cols["input_sizes"], cols["output_sizes"]]
    dtypes = [cols["input_dtypes"], cols["output_dtypes"]]
    # What the reference pays, in its order: the frames, each list's tensors and dims, each list's dtypes.
    spends = [(frames + frame_lists if frame_lists else 0, "frames")]
    for name, c in zip(("input_sizes", "output_sizes"), sizes):
        spends += [(c[5], name), (c[6], name)]
    spends += [(c[5], name) for name, c in zip(("input_dtypes", "output_dtypes"), dtypes)]
    if sum(amount for amount, _ in spends) > budget.left:
        raise NotNative("over the expansion budget: the reference says where")
    for amount, what in spends:
        budget.spend(amount, what)

    stacks: dict[int, list[dict]] = {}
    ids = [_intern_stack(raw.graph.node_object(node), stacks, limits) for node in distinct]
    at = pa.Array.from_buffers(pa.int32(), n, [_bits(valid_places, frame_lists, n), pa.py_buffer(places)],
                               null_count=n - frame_lists)
    strings = {name: _native_array(pa.string(), n, cols[name])
               for name in ("profiling_name", "state", "thread_id", "thread_name")}
    backend, op, src, dst, derived_p2p = _names_of_array(strings["profiling_name"], limits)
    is_p2p = derived_p2p
    if cols["is_p2p"][0]:  # a true flag is kept (see entry_columns)
        flags = _native_array(pa.bool_(), n, cols["is_p2p"])
        is_p2p = pc.or_(pc.fill_null(flags, False), pc.fill_null(derived_p2p, False))
    ints = {name: _native_array(pa.int64(), n, cols[name])
            for name in ("record_id", "pg_id", "collective_seq_id", "p2p_seq_id", "op_id", "time_created_ns",
                         "time_discovered_started_ns", "time_discovered_completed_ns", "timeout_ms")}
    arrays = {
        "entry_index": pa.array(range(n), pa.int32()),
        "record_id": ints["record_id"],
        "pg_id": ints["pg_id"],
        "pg_name": _native_array(pa.string(), n, pg_name),
        "pg_desc": _native_array(pa.string(), n, pg_desc),
        "collective_seq_id": ints["collective_seq_id"],
        "p2p_seq_id": ints["p2p_seq_id"],
        "op_id": ints["op_id"],
        "profiling_name": strings["profiling_name"],
        "backend": backend,
        "op": op,
        "is_p2p": is_p2p,
        "p2p_src": src,
        "p2p_dst": dst,
        "state": strings["state"],
        "time_created_ns": ints["time_created_ns"],
        "time_discovered_started_ns": ints["time_discovered_started_ns"],
        "time_discovered_completed_ns": ints["time_discovered_completed_ns"],
        "duration_ms": _native_array(pa.float64(), n, cols["duration_ms"]),
        "retired": _native_array(pa.bool_(), n, cols["retired"]),
        "timeout_ms": ints["timeout_ms"],
        "input_sizes": _native_sizes(n, sizes[0]),
        "input_dtypes": _native_dtypes(n, dtypes[0]),
        "output_sizes": _native_sizes(n, sizes[1]),
        "output_dtypes": _native_dtypes(n, dtypes[1]),
        "thread_id": strings["thread_id"],
        "thread_name": strings["thread_name"],
        "stack_id": pa.array(ids, pa.int64()).take(at),
        "extra": pa.nulls(n, pa.string()),
    }
    return _finish(arrays, n, limits), stacks


def _bits(bitmap: bytearray | None, valid: int, n: int) -> pa.Buffer | None:
    return None if bitmap is None or valid == n else pa.py_buffer(bitmap)


def _native_array(typ: pa.DataType, n: int, built: tuple) -> pa.Array:
    """A column of scalars from the fast reader's buffers: (valid, validity, data) or, for strings,
    (valid, validity, offsets, data)."""
    valid, validity, *data = built
    return pa.Array.from_buffers(typ, n, [_bits(validity, valid, n), *map(pa.py_buffer, data)], null_count=n - valid)


def _mask(n: int, valid: int, nulls: bytearray | None) -> pa.Array | None:
    return None if nulls is None or valid == n else pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(nulls)])


def _native_sizes(n: int, built: tuple) -> pa.Array:
    valid, nulls, outer, inner, dims, tensors, n_dims = built
    flat = pa.Array.from_buffers(pa.int64(), n_dims, [None, pa.py_buffer(dims)])
    shapes = pa.ListArray.from_arrays(pa.Array.from_buffers(pa.int32(), tensors + 1, [None, pa.py_buffer(inner)]), flat)
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(outer)])
    return pa.ListArray.from_arrays(offsets, shapes, type=_SIZES, mask=_mask(n, valid, nulls))


def _native_dtypes(n: int, built: tuple) -> pa.Array:
    valid, nulls, outer, offsets, text, items, _ = built
    strings = pa.Array.from_buffers(pa.string(), items, [None, pa.py_buffer(offsets), pa.py_buffer(text)])
    outer_offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(outer)])
    return pa.ListArray.from_arrays(outer_offsets, strings, type=_DTYPES, mask=_mask(n, valid, nulls))


def _names_of_array(profiling_names: pa.Array, limits: Limits) -> tuple[pa.Array, ...]:
    """:func:`_names` of a column that is already Arrow: each distinct name split once."""
    encoded = pc.dictionary_encode(profiling_names)
    return _split_names(encoded.dictionary.to_pylist(), encoded.indices, limits)


def _columns(raw: list, total: int) -> tuple[dict[str, list], dict[str, set[type]], bool]:
    """Every known field of every entry as a column, the Python types found in
    each column, and whether some entry holds a field this frlake does not know.

    The fields that the first and last entries share (nearly all of them in a
    real dump) are read by one C-level ``itemgetter`` call per entry and then
    transposed; any other known field takes one ``dict.get`` pass of its own,
    until the fields read account for every value of every entry.
    """
    if _speedups is not None:
        found = _speedups.columns(raw, _FIELD_INDEX)
        if found is not None:
            return dict(zip(_FIELDS, found[0])), dict(zip(_FIELDS, found[1])), found[2]
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
    kinds = {name: set(map(type, col)) for name, col in cols.items()}
    for name in _FIELDS:
        if name in cols:
            continue
        if present == total:  # the fields read so far hold every value: no entry holds any other field
            cols[name], kinds[name] = [None] * n, {NONE}
            continue
        col = list(map(dict.get, raw, repeat(name), repeat(_MISSING)))
        found = set(map(type, col))
        if object in found:  # the _MISSING sentinel: no pickle or JSON value has type object
            present -= col.count(_MISSING)
            col = [None if v is _MISSING else v for v in col]
            found.discard(object)
            found.add(NONE)
        present += n
        cols[name], kinds[name] = col, found
    return cols, kinds, present != total


def _flatten(values: list, name: str, budget: Budget, max_len: int, what: str) -> tuple[list, pa.Array, pa.Array | None]:
    """One level of nesting: every value a list (or None) of at most
    ``max_len`` items, paid for. Returns the items, the Arrow offsets of each
    value's items and, if some value is None, the mask of those."""
    if _speedups is not None:
        flat = _speedups.flatten(values, min(max_len, 2**31), min(budget.left, 2**31))
        if flat is not None:
            items, offsets, has_none = flat
            budget.spend(len(items), name)
            mask = pa.array([v is None for v in values], pa.bool_()) if has_none else None
            return items, pa.Array.from_buffers(pa.int32(), len(values) + 1, [None, pa.py_buffer(offsets)]), mask
    found = set(map(type, values))
    if found - {list, NONE}:
        raise wrong_type(name, found - {list, NONE})
    if NONE in found:
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
    mask = pa.array([v is None for v in values], pa.bool_()) if NONE in found else None
    return list(chain.from_iterable(lists)), pa.array([0, *accumulate(lengths)], pa.int32()), mask


def _shapes(values: list, name: str, budget: Budget, limits: Limits) -> pa.Array:
    """Tensor shapes: lists of lists of ints, bounded and type-checked before
    anything expands them, then assembled from flat buffers."""
    tensors, outer, outer_mask = _flatten(values, name, budget, limits.max_tensors_per_entry, "a list of tensors")
    dims, inner, inner_mask = _flatten(tensors, name, budget, limits.max_dims, "a tensor shape")
    packed = None if _speedups is None else _speedups.int64s(dims)
    if packed is not None:
        flat = pa.Array.from_buffers(pa.int64(), len(dims), [None, pa.py_buffer(packed)])
    else:
        found = set(map(type, dims)) - {int}
        if found:
            raise wrong_type(name, found)
        try:
            flat = pa.array(dims, pa.int64())
        except OverflowError:
            raise DumpRejected("bad_schema", f"field '{name}' holds a dimension beyond 64 bits") from None
    shapes = pa.ListArray.from_arrays(inner, flat, mask=inner_mask)
    return pa.ListArray.from_arrays(outer, shapes, type=_SIZES, mask=outer_mask)


def _string_lists(values: list, name: str, budget: Budget, limits: Limits) -> pa.Array:
    items, offsets, mask = _flatten(values, name, budget, limits.max_tensors_per_entry, "a list")
    found = set(map(type, items)) - {str}
    if found:
        raise wrong_type(name, found)
    if items and max(map(len, items)) > limits.max_string:
        raise DumpRejected("too_large", f"field '{name}' holds a string over {limits.max_string:,} characters")
    try:
        strings = _scalar_array(items, pa.string(), len(items))
    except UnicodeError:
        raise DumpRejected("bad_text", f"field '{name}' holds an unpaired surrogate, which UTF-8 cannot store") from None
    return pa.ListArray.from_arrays(offsets, strings, type=_DTYPES, mask=mask)


_FIELDS = tuple(sorted(KNOWN_ENTRY_KEYS))
_FIELD_INDEX = {name: i for i, name in enumerate(_FIELDS)}
_NAME_TYPES = tuple(schema.ENTRIES.field(name).type for name in ("backend", "op", "p2p_src", "p2p_dst", "is_p2p"))
_SIZES, _DTYPES = schema.ENTRIES.field("input_sizes").type, schema.ENTRIES.field("input_dtypes").type
_MISSING = object()
# The Arrow types of the columns of scalars that the compiled pass builds, and its kinds of them.
_SCALAR_KINDS = {} if _speedups is None else {
    pa.int64(): _speedups.INT64, pa.float64(): _speedups.FLOAT64, pa.bool_(): _speedups.BOOL, pa.string(): _speedups.STRING}
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)
_FRAME_FIELDS = operator.itemgetter("name", "filename", "line")


def _scalar_array(values, typ: pa.DataType, n: int) -> pa.Array:
    """A column of ``n`` values as an Arrow array: from the compiled buffers
    where they can be built, else by ``pa.array``, whose errors the callers
    turn into the dump's rejection."""
    built = _compiled_array(values, typ, n)
    return built if built is not None else pa.array(values, typ, size=n)


def _compiled_array(values, typ: pa.DataType, n: int) -> pa.Array | None:
    """A column of scalars built from its compiled buffers (None: ``pa.array``
    converts it, and says what is wrong with it)."""
    kind = _SCALAR_KINDS.get(typ)
    if _speedups is None or kind is None or type(values) is not list or len(values) != n:  # (the tests unset _speedups)
        return None
    found = _speedups.scalars(values, kind)
    if found is None:
        return None
    nulls, validity, *data = found
    buffers = [None if validity is None else pa.py_buffer(validity), *map(pa.py_buffer, data)]
    return pa.Array.from_buffers(typ, n, buffers, null_count=nulls)


def _check_lengths(arr: pa.Array, name: str, limits: Limits) -> None:
    data = arr.buffers()[2]
    if data is None or data.size <= limits.max_string:  # all its strings together are not longer than the limit
        return
    if len(arr) and arr.null_count < len(arr):
        longest = pc.max(pc.utf8_length(arr)).as_py()
        if longest is not None and longest > limits.max_string:
            raise DumpRejected("too_large", f"field '{name}' holds a string of {longest:,} characters")


def _process_groups(groups: list, found: set[type], pg_ids: list) -> tuple[list, list]:
    """Split (name, desc) pairs; before torch 2.4 only the pg_id names a group."""
    if found <= {NONE}:
        ints_in_range(pg_ids, "pg_id")
        return [None if p is None else str(p) for p in pg_ids], [None] * len(groups)
    pairs = [g for g in groups if g is not None] if NONE in found else groups
    if found - {tuple, list, NONE} or set(map(len, pairs)) - {2}:
        raise DumpRejected("bad_schema", "'process_group' is not a (name, desc) pair")
    if NONE in found:
        names = [None if g is None else g[0] for g in groups]
        descs = [None if g is None else g[1] for g in groups]
    else:
        names, descs = list(map(_FIRST, groups)), list(map(_SECOND, groups))
    name_kinds = set(map(type, names))
    if name_kinds - {str, int, NONE}:
        raise wrong_type("process_group name", name_kinds - {str, int, NONE})
    if set(map(type, descs)) - {str, NONE}:
        raise wrong_type("process_group desc", set(map(type, descs)) - {str, NONE})
    if int in name_kinds:
        ints_in_range([v for v in names if type(v) is int], "process_group name")
        names = [v if v is None or type(v) is str else str(v) for v in names]
    return names, descs


def _stacks(frames_col: list, found: set[type], budget: Budget, limits: Limits) -> tuple[list, dict[int, list[dict]]]:
    """Give each entry the id of its stack and keep each distinct stack once.

    torch's pickler shares frame dicts between entries, so a stack is first
    keyed by the identities of its frame objects (C speed); only each distinct
    key is read for its content.
    """
    if found <= {NONE}:
        return [None] * len(frames_col), {}
    if found - {list, NONE}:
        raise DumpRejected("bad_schema", "'frames' is not a list of frames")
    lists = [f for f in frames_col if f is not None] if NONE in found else frames_col
    depths = list(map(len, lists))
    if max(depths) > limits.max_frames:
        raise DumpRejected("bad_schema", f"'frames' holds more than {limits.max_frames} frames")
    budget.spend(sum(depths) + len(depths), "frames")
    # Each entry: the first entry with its frames.
    firsts = None if _speedups is None else _speedups.first_same_frames(frames_col)
    if firsts is None:
        if NONE in found:
            keys = [None if f is None else tuple(map(id, f)) for f in frames_col]
        else:
            keys = list(map(tuple, map(map, repeat(id), frames_col)))
        first: dict[tuple | None, int] = {}
        firsts = list(map(first.setdefault, keys, range(len(keys))))
    stacks: dict[int, list[dict]] = {}
    resolved = {i: None if frames_col[i] is None else _intern_stack(frames_col[i], stacks, limits)
                for i in dict.fromkeys(firsts)}
    return list(map(resolved.__getitem__, firsts)), stacks


def _intern_stack(frames: list, stacks: dict, limits: Limits) -> int:
    if set(map(type, frames)) - {dict}:
        raise DumpRejected("bad_schema", "a frame is not a dict")
    try:
        key = tuple(map(_FRAME_FIELDS, frames))
    except KeyError:
        key = tuple((f.get("name"), f.get("filename"), f.get("line")) for f in frames)
    # Only str, int and None may be hashed: a tuple bomb would hash forever.
    if set(map(type, chain.from_iterable(key))) - {str, int, NONE}:
        raise DumpRejected("bad_schema", "a frame holds something other than a name, file and line")
    known = _checked_stacks.get((limits.max_string, key))
    if known is None:
        for name, filename, line in key:
            for text in (name, filename):
                if text is not None and (type(text) is not str or len(text) > limits.max_string):
                    raise DumpRejected("bad_schema", "a frame's name or filename is not a short string")
                if text is not None:
                    storable_text(text, "a frame's name or filename")
            if line is not None and type(line) is not int:
                raise DumpRejected("bad_schema", "a frame's line is not an integer")
            if line is not None:
                int64(line, "a frame's line")
        known = stack_id(key), [{"name": a, "filename": b, "line": c} for a, b, c in key]
        if len(_checked_stacks) >= _CHECKED_STACKS_MAX:
            _checked_stacks.clear()
        _checked_stacks[(limits.max_string, key)] = known
    sid, checked = known
    stacks[sid] = checked
    return sid


# The stacks this process has checked, by content (and string limit), with their ids and frames: a worker
# reads many dumps of one job, and each holds the same few stacks. Emptied when it is full.
_checked_stacks: dict[tuple[int, tuple], tuple[int, list[dict]]] = {}
_CHECKED_STACKS_MAX = 1 << 14


def _names(profiling_names: list, limits: Limits) -> tuple[pa.Array, ...]:
    """Split 'nccl:send 0->1' into backend, op, src, dst and is-p2p, once per
    distinct name (the names' types are checked): each column is the distinct
    names' parts taken by the index of each entry's name."""
    index = {name: i for i, name in enumerate(dict.fromkeys(profiling_names))}
    return _split_names(list(index), pa.array(list(map(index.__getitem__, profiling_names)), pa.int32()), limits)


def _split_names(distinct: list, at: pa.Array, limits: Limits) -> tuple[pa.Array, ...]:
    """The five columns of :func:`_names`: each distinct name split, taken by ``at``, each entry's name's
    place among them."""
    parts = list(zip(*(_split_name(name, limits) for name in distinct))) or [()] * 5
    return tuple(pa.array(values, typ).take(at) for values, typ in zip(parts, _NAME_TYPES))


def _split_name(name: object, limits: Limits) -> tuple:
    if not isinstance(name, str) or len(name) > limits.max_string:
        return (None, None, None, None, None)
    m = _P2P_NAME.match(name)
    if not m:
        return (None, None, None, None, None)
    op = m["op"]
    src, dst = _rank(m["src"] or m["src2"]), _rank(m["dst"] or m["dst2"])
    return (m["backend"], op, src, dst, op in P2P_OPS)


def _rank(text: str | None) -> int | None:
    if text is None or len(text) > 10:
        return None
    value = int(text)
    return value if abs(value) < 2**31 else None
