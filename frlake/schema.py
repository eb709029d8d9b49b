"""The Arrow schemas of the lake's tables: one place, used by the writer,
the query views and the docs (docs/schema.md describes every column).

Every table except ``stacks`` is partitioned Hive-style by ``job`` and
``attempt``; those two columns live in the folder names, not in the files.
"""

from __future__ import annotations

import pyarrow as pa

PARTITION_FIELDS = [pa.field("job", pa.string()), pa.field("attempt", pa.int64())]

_SIZES = pa.list_(pa.list_(pa.int64()))
_DTYPES = pa.list_(pa.string())

ENTRIES = pa.schema(
    [
        ("dump_id", pa.int64()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("entry_index", pa.int32()),
        ("record_id", pa.int64()),
        ("pg_id", pa.int64()),
        ("pg_name", pa.string()),
        ("pg_desc", pa.string()),
        ("collective_seq_id", pa.int64()),
        ("p2p_seq_id", pa.int64()),
        ("op_id", pa.int64()),
        ("profiling_name", pa.string()),
        ("backend", pa.string()),
        ("op", pa.string()),
        ("is_p2p", pa.bool_()),
        ("p2p_src", pa.int32()),
        ("p2p_dst", pa.int32()),
        ("state", pa.string()),
        ("time_created_ns", pa.int64()),
        ("time_discovered_started_ns", pa.int64()),
        ("time_discovered_completed_ns", pa.int64()),
        ("duration_ms", pa.float64()),
        ("retired", pa.bool_()),
        ("timeout_ms", pa.int64()),
        ("input_sizes", _SIZES),
        ("input_dtypes", _DTYPES),
        ("output_sizes", _SIZES),
        ("output_dtypes", _DTYPES),
        ("thread_id", pa.string()),
        ("thread_name", pa.string()),
        ("stack_id", pa.int64()),
        ("extra", pa.string()),
    ]
)

DUMPS = pa.schema(
    [
        ("dump_id", pa.int64()),
        ("sha256", pa.string()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("fr_version", pa.string()),
        ("encoding", pa.string()),
        ("comm_lib_version", pa.string()),
        ("size_bytes", pa.int64()),
        ("n_entries", pa.int64()),
        ("n_groups", pa.int64()),
        ("first_record_id", pa.int64()),
        ("last_record_id", pa.int64()),
        ("first_time_created_ns", pa.int64()),
        ("last_time_created_ns", pa.int64()),
        ("source_path", pa.string()),
        ("source_mtime_ns", pa.int64()),
        ("ingested_at", pa.timestamp("us", tz="UTC")),
        ("run_id", pa.int64()),
        ("extra", pa.string()),
    ]
)

GROUPS = pa.schema(
    [
        ("dump_id", pa.int64()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("pg_name", pa.string()),
        ("pg_desc", pa.string()),
        ("ranks", pa.list_(pa.int32())),
        ("group_size", pa.int32()),
        ("ranks_raw", pa.string()),
    ]
)

PG_STATUS = pa.schema(
    [
        ("dump_id", pa.int64()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("pg_id", pa.string()),
        ("last_enqueued_collective", pa.int64()),
        ("last_started_collective", pa.int64()),
        ("last_completed_collective", pa.int64()),
        ("extra", pa.string()),
    ]
)

FRAME = pa.struct([("name", pa.string()), ("filename", pa.string()), ("line", pa.int64())])

STACKS = pa.schema(
    [
        ("stack_id", pa.int64()),
        ("depth", pa.int32()),
        ("frames", pa.list_(FRAME)),
    ]
)

TABLES: dict[str, pa.Schema] = {
    "dumps": DUMPS,
    "entries": ENTRIES,
    "groups": GROUPS,
    "pg_status": PG_STATUS,
    "stacks": STACKS,
}

PARTITIONED = ("dumps", "entries", "groups", "pg_status")
