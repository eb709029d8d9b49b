"""Stable signatures of an entry's tensor shapes and dtypes, stored beside
them in ``entries`` (``input_sizes_sig`` and its three siblings).

A diagnosis compares every member's shapes at every collective: at 16,384
ranks that is 16M entries, and reading their nested lists back from Parquet
to hash them cost more than half of its first pass. The signatures are made
once, at ingest (and by a rewrite of files written before they existed).

The signature of a value is defined by the value alone, so it is the same in
every run, on every machine, in every version of frlake: the first 63 bits of
the BLAKE2b digest of its compact JSON (``[[1024,4096]]``, ``["Float"]``,
``null`` for a missing list). Each distinct value of a column is hashed once;
which entries hold it is found by Arrow on flat buffers, without a Python
step per entry.
"""

from __future__ import annotations

import hashlib
import json

import pyarrow as pa
import pyarrow.compute as pc

# The signed columns: (list column, its signature column).
SIGNED = (("input_sizes", "input_sizes_sig"), ("output_sizes", "output_sizes_sig"),
          ("input_dtypes", "input_dtypes_sig"), ("output_dtypes", "output_dtypes_sig"))


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
    n = len(values)
    if n == 0:
        return pa.array([], pa.int64())
    code = _codes(values)  # numbered in the order the values first occur
    # the first entry of each distinct value: where the highest number so far goes up
    highest = pc.cumulative_max(code)
    firsts = [0, *pc.add(pc.indices_nonzero(pc.not_equal(highest[1:], highest[:-1])), 1).to_pylist()]
    return pa.array([value_signature(values[i].as_py()) for i in firsts], pa.int64()).take(code)


def _codes(values: pa.Array) -> pa.Array:
    """A number per value (a missing one included), equal for equal values and only for them, numbered in
    the order they first occur. A list is numbered by the bytes of its items' numbers: 8 bytes each, so
    equal bytes are equal items."""
    values = pa.concat_arrays([values])  # offsets from 0, nulls from the first value (a slice's own copy)
    if not pa.types.is_list(values.type):
        return pc.dictionary_encode(values, null_encoding="encode").indices.cast(pa.int64())
    items = values.values if pa.types.is_integer(values.type.value_type) else _codes(values.values)
    items = pa.concat_arrays([items.cast(pa.int64())])
    offsets = pc.multiply(values.offsets.cast(pa.int64()), 8)
    keys = pa.Array.from_buffers(pa.large_binary(), len(values),
                                 [values.buffers()[0], offsets.buffers()[1], items.buffers()[1]])
    return pc.dictionary_encode(keys, null_encoding="encode").indices.cast(pa.int64())
