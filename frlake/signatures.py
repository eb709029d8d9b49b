"""Stable signatures of an entry's tensor shapes and dtypes, stored beside
them in ``entries`` (``input_sizes_sig`` and its three siblings:
frlake.schema.SIGNED).

A diagnosis compares every member's shapes at every collective: at 16,384
ranks that is 16M entries, and reading their nested lists back from Parquet
to hash them was most of its first pass. The signatures are made
once, at ingest (and by a rewrite of files written before they existed).

The signature of a value is defined by the value alone, so it is the same in
every run, on every machine, in every version of frlake: the first 63 bits of
the BLAKE2b digest of its compact JSON (``[[1024,4096]]``, ``["Float"]``,
``null`` for a missing list). Each distinct value is hashed once per process;
which entries hold it is found by Arrow on flat buffers, without a Python
step per entry.
"""

from __future__ import annotations

import hashlib
import json
import threading

import pyarrow as pa
import pyarrow.compute as pc


def value_signature(value: object) -> int:
    """The signature of one list value (None included): see the module's doc."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=True)
    return int.from_bytes(hashlib.blake2b(text.encode("ascii"), digest_size=8).digest(), "big") >> 1


NO_LIST = value_signature(None)  # an entry without the list
EMPTY_LIST = value_signature([])  # an entry with no tensors


def signatures(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The signature of every value of a ``list<list<int64>>`` (shapes) or
    ``list<string>`` (dtypes) column, as int64."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if len(values) == 0:
        return pa.array([], pa.int64())
    with _numbering:  # the numbers are the process'; a compaction rewrites two files at once
        return _signatures(values)


def _signatures(values: pa.Array) -> pa.Array:
    ids = _ids(values)
    known = pc.unique(ids)
    numbers = known.to_pylist()
    new = [k for k, i in enumerate(numbers) if i not in _signature_of]
    if new:  # the first entry that holds a value stands for it (found for all of them in one pass)
        firsts = pc.index_in(known.take(pa.array(new, pa.int64())), value_set=ids).to_pylist()
        for k, at in zip(new, firsts, strict=True):
            _signature_of[numbers[k]] = value_signature(values[at].as_py())
    sigs = pa.array([_signature_of[i] for i in numbers], pa.int64())
    return sigs.take(pc.index_in(ids, value_set=known))


def signatures_of(*columns: pa.Array) -> list[pa.Array]:
    """:func:`signatures` of several columns of one type, in one pass (each pass has a cost of its own)."""
    together = signatures(pa.concat_arrays(list(columns)))
    starts = [0]
    for c in columns:
        starts.append(starts[-1] + len(c))
    return [together.slice(a, b - a) for a, b in zip(starts, starts[1:])]


# Every value this process has seen, by what identifies it (a tensor's dims as bytes, a string, or the ids of
# a list's items as bytes), numbered in the order they came; and the signature of each number. A worker
# reads many dumps of one job, which hold the same few shapes. Both are emptied when they are full.
_id_of: dict[tuple, int] = {}
_signature_of: dict[int, int] = {}
_numbering = threading.Lock()  # held by whoever numbers values and reads their signatures
_MAX_IDS = 1 << 16
# An Arrow scalar, not a Python int: pyarrow converting a Python value looks for dateutil (and pandas) each
# time, and where they are not installed each look is a failed import, paid on every conversion.
_EIGHT = pa.scalar(8, pa.int64())


def _ids(values: pa.Array) -> pa.Array:
    """The process-wide number of every value (a missing one included): equal for equal values, and only
    for them. A list is identified by the bytes of its items' numbers (8 bytes each, so equal bytes are
    equal items); a list of integers (a tensor's dims) by their own bytes."""
    if len(_id_of) > _MAX_IDS:
        _id_of.clear()
        _signature_of.clear()
    values = pa.concat_arrays([values])  # offsets from 0, nulls from the first value (a slice's own copy)
    if pa.types.is_list(values.type):
        items = values.values if pa.types.is_integer(values.type.value_type) else _ids(values.values)
        items = pa.concat_arrays([items.cast(pa.int64())])
        offsets = pc.multiply(values.offsets.cast(pa.int64()), _EIGHT)
        keys = pa.Array.from_buffers(pa.large_binary(), len(values),
                                     [values.buffers()[0], offsets.buffers()[1], items.buffers()[1]])
        kind = str(values.type)
    else:
        keys, kind = values, "item"
    local = pc.dictionary_encode(keys, null_encoding="encode")
    numbers = [_id_of.setdefault((kind, k), len(_id_of)) for k in local.dictionary.to_pylist()]
    return pa.array(numbers, pa.int64()).take(local.indices)
