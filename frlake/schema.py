"""The Arrow schemas of the lake's tables: one place, used by the writer,
the query views and the docs (docs/schema.md describes every column).

Every table except ``stacks`` is partitioned Hive-style by ``job`` and
``attempt``; those two columns live in the folder names, not in the files.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field

import pyarrow as pa

PARTITION_FIELDS = [pa.field("job", pa.string()), pa.field("attempt", pa.int64())]

_SIZES = pa.list_(pa.list_(pa.int64()))
_DTYPES = pa.list_(pa.string())

@dataclass(frozen=True)
class EntryField:
    """One column of ``entries``: its Arrow type and the Flight Recorder keys
    it is read from, each with the Python types a value may have (None is
    always allowed). No keys: frlake derives the column (identity, the parts
    of ``profiling_name``, the stack id)."""

    name: str
    type: pa.DataType
    raw: dict[str, frozenset[type]] = dataclass_field(default_factory=dict)


# The lists an entry's signature columns sign (frlake.signatures): (list column, its signature column).
SIGNED = (("input_sizes", "input_sizes_sig"), ("output_sizes", "output_sizes_sig"),
          ("input_dtypes", "input_dtypes_sig"), ("output_dtypes", "output_dtypes_sig"))

_INT, _NUM, _STR, _BOOL = frozenset({int}), frozenset({int, float}), frozenset({str}), frozenset({bool, int})
_LIST, _PAIR = frozenset({list}), frozenset({tuple, list})

# The one table of entry fields: the parser's known keys and type checks and
# the ``entries`` schema all derive from it (docs/schema.md describes each).
ENTRY_FIELDS: tuple[EntryField, ...] = (
    EntryField("dump_id", pa.int64()),
    EntryField("rank", pa.int32()),
    EntryField("host", pa.string()),
    EntryField("entry_index", pa.int32()),
    EntryField("record_id", pa.int64(), {"record_id": _INT}),
    EntryField("pg_id", pa.int64(), {"pg_id": _INT}),
    EntryField("pg_name", pa.string(), {"process_group": _PAIR}),
    EntryField("pg_desc", pa.string(), {"process_group": _PAIR}),
    # before torch 2.4 one seq_id numbered collectives and p2p alike
    EntryField("collective_seq_id", pa.int64(), {"collective_seq_id": _INT, "seq_id": _INT}),
    EntryField("p2p_seq_id", pa.int64(), {"p2p_seq_id": _INT}),
    EntryField("op_id", pa.int64(), {"op_id": _INT}),
    EntryField("profiling_name", pa.string(), {"profiling_name": _STR}),
    EntryField("backend", pa.string()),
    EntryField("op", pa.string()),
    EntryField("is_p2p", pa.bool_(), {"is_p2p": _BOOL}),
    EntryField("p2p_src", pa.int32()),
    EntryField("p2p_dst", pa.int32()),
    EntryField("state", pa.string(), {"state": _STR}),
    # torch <= 2.2 wrote microseconds
    EntryField("time_created_ns", pa.int64(), {"time_created_ns": _INT, "time_created_us": _NUM}),
    EntryField("time_discovered_started_ns", pa.int64(), {"time_discovered_started_ns": _INT}),
    EntryField("time_discovered_completed_ns", pa.int64(), {"time_discovered_completed_ns": _INT}),
    EntryField("duration_ms", pa.float64(), {"duration_ms": _NUM}),
    EntryField("retired", pa.bool_(), {"retired": _BOOL}),
    EntryField("timeout_ms", pa.int64(), {"timeout_ms": _INT}),
    EntryField("input_sizes", _SIZES, {"input_sizes": _LIST}),
    EntryField("input_dtypes", _DTYPES, {"input_dtypes": _LIST}),
    EntryField("output_sizes", _SIZES, {"output_sizes": _LIST}),
    EntryField("output_dtypes", _DTYPES, {"output_dtypes": _LIST}),
    # stable signatures of the four lists (frlake.signatures): what a diagnosis compares; since schema 2
    *(EntryField(sig, pa.int64()) for _, sig in SIGNED),
    EntryField("thread_id", pa.string(), {"thread_id": _STR | _INT}),
    EntryField("thread_name", pa.string(), {"thread_name": _STR}),
    EntryField("stack_id", pa.int64(), {"frames": _LIST}),
    EntryField("extra", pa.string()),  # the fields this frlake does not know, as JSON
)
ENTRIES = pa.schema([(f.name, f.type) for f in ENTRY_FIELDS])
RAW_ENTRY_KEYS: dict[str, frozenset[type]] = {k: t for f in ENTRY_FIELDS for k, t in f.raw.items()}

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

# The members of each group a dump lists, as (start, step, count) runs (frlake.ingest.parse.rank_runs): what a
# diagnosis reads, since 16,384 dumps that each list the world's 16,384 ranks are 268M numbers in ``groups``
# and about 50,000 here. (A table of its own: the files of ``groups`` keep one schema.)
GROUP_RUNS = pa.schema(
    [
        ("dump_id", pa.int64()),
        ("rank", pa.int32()),
        ("pg_name", pa.string()),
        ("group_size", pa.int32()),
        ("rank_runs", pa.list_(pa.int64())),
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
COMPLETED = pa.struct([("pg", pa.string()), ("seq", pa.int64())])

# One row per dump: when it was written and what moment it shows (a table of its own, so the files of
# ``dumps`` keep one schema; docs/lake.md "Schema evolution").
SNAPSHOTS = pa.schema(
    [
        ("dump_id", pa.int64()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("written_ns", pa.int64()),  # when the file was written: a time in its name, else its mtime
        ("written_from", pa.string()),  # file_name | mtime
        ("snapshot_ns", pa.int64()),  # the moment it shows: a time in its name, else its newest entry, else mtime
        ("snapshot_from", pa.string()),  # file_name | newest_entry | mtime
        ("has_entries", pa.bool_()),  # False: no 'entries' key (onlyActive with nothing active, no collectives)
        ("n_pending", pa.int64()),  # collectives not completed when it was written
        ("oldest_pending_ns", pa.int64()),  # time_created of the oldest of them
        ("timeout_ms", pa.int64()),  # the largest timeout of its entries
        ("overdue", pa.bool_()),  # a pending entry was older than its timeout when the dump was written
        # (NULL: only within the resolution of the name's time, which cannot tell)
        ("last_completed", pa.list_(COMPLETED)),  # per group, the last completed collective sequence id
    ]
)

# nvidia-resiliency-ext's collector: one row per check of a dump's health_check_results.
HEALTH = pa.schema(
    [
        ("dump_id", pa.int64()),
        ("rank", pa.int32()),
        ("host", pa.string()),
        ("snapshot_ns", pa.int64()),
        ("check_name", pa.string()),  # gpu | nic | ...
        ("status", pa.string()),  # as recorded: Healthy | Failed
        ("healthy", pa.bool_()),
        ("output", pa.string()),  # the check's captured log
    ]
)

# The torch debug server's stacks_<ts>.txt (faulthandler) and pyspy_dump_<ts>.txt: one row per thread.
LIVE_STACKS = pa.schema(
    [
        ("rank", pa.int32()),
        ("host", pa.string()),  # from the block's header, http://<host>:<port>/handler/...
        ("snapshot_ns", pa.int64()),  # the time in the file name, else its mtime
        ("source", pa.string()),  # faulthandler | py-spy
        ("source_path", pa.string()),
        ("sha256", pa.string()),
        ("thread_index", pa.int32()),  # its position in the rank's block (faulthandler lists the main thread last)
        ("thread", pa.string()),  # as the header names it (id, and py-spy's name)
        ("current", pa.bool_()),  # faulthandler's "Current thread" (the handler's own thread)
        ("depth", pa.int32()),
        ("frames", pa.list_(FRAME)),  # innermost first, like the stacks table
        ("error", pa.string()),  # the block's text when the rank did not answer (e.g. "Error: 404")
    ]
)

STACKS = pa.schema(
    [
        ("stack_id", pa.int64()),
        ("depth", pa.int32()),
        ("frames", pa.list_(FRAME)),
    ]
)

# Summary tables: per-attempt summaries that the session writes when it diagnoses an attempt, in the same
# catalog transaction that stores the diagnosis, so they always show what the stored diagnosis saw
# (frlake/storage/summary_tables.py, docs/lake.md "Summary tables"). The slow-links report reads them instead of
# the entries.
# One row per collective instance of one group (pg_name) with timed, completed entries:
COLLECTIVE_DURATIONS = pa.schema(
    [
        ("pg_name", pa.string()),
        ("pg_desc", pa.string()),
        ("seq", pa.int64()),  # collective_seq_id
        ("op", pa.string()),
        ("duration_ms", pa.float64()),  # the median duration_ms of its members' entries
        ("entries", pa.int64()),  # how many entries that median is of
        ("hosts", pa.list_(pa.string())),  # the hosts of those entries, sorted, each once
        ("n_groups", pa.int64()),  # groups of the attempt with this collective (pg_desc, seq, op), itself included
        ("sibling_median_ms", pa.float64()),  # the median of those groups' duration_ms
        ("slowdown", pa.float64()),  # duration_ms / sibling_median_ms
    ]
)
# One row per host of an attempt with timed, completed collective entries:
WATCHDOG_LAGS = pa.schema(
    [
        ("host", pa.string()),
        ("entries", pa.int64()),
        ("watchdog_lag_ms", pa.float64()),  # median of (discovered completed - discovered started) - duration_ms
    ]
)
# One row per host of an attempt with timed, completed collective entries: its whole share of the slow-links
# report, so that the report reads one small row per host and attempt (frlake.query.links), not a row per
# collective. The median of a host's slowdowns over many attempts is exact from its bins (see SLOW_LINKS).
SLOWDOWN_BIN = pa.struct([
    ("slowdown", pa.float64()),  # round(slowdown, 3): every slowdown of the bin rounds to it
    ("collectives", pa.int64()),  # how many of the host's collectives have it
    ("low", pa.float64()),  # the smallest and the largest slowdown of the bin, exact
    ("high", pa.float64()),
])
HOST_COLLECTIVE = pa.struct([
    ("pg_desc", pa.string()),
    ("op", pa.string()),
    ("collectives", pa.int64()),
    ("slowdown", pa.float64()),  # the median slowdown of the host's collectives of this pg_desc and op
])
HOST_LINKS = pa.schema(
    [
        ("host", pa.string()),
        ("collectives", pa.int64()),  # collective instances of its groups that had sibling groups to compare
        ("slow_collectives", pa.int64()),  # ... of which at least 1.5 times their siblings' median
        ("watchdog_lag_ms", pa.float64()),  # as watchdog_lags
        ("slowdowns", pa.list_(SLOWDOWN_BIN)),  # the slowdowns of those collectives, in bins, by slowdown
        ("by_collective", pa.list_(HOST_COLLECTIVE)),  # by pg_desc and op
    ]
)

# The schema version of each table's files (1 where it never changed). The catalog records the version of
# every file it commits (lake_files.schema_version); a file keeps the columns of its version, and frlake's
# views give the columns added since as NULL. A rewrite (compaction, forget) writes the current version.
SCHEMA_VERSIONS = {"entries": 2}
# The columns each version added.
ADDED_COLUMNS = {"entries": {2: tuple(sig for _, sig in SIGNED)}}


def schema_version(table: str) -> int:
    """The version of the files frlake writes for ``table`` today."""
    return SCHEMA_VERSIONS.get(table, 1)


def schema_variable(table: str) -> str:
    """The DuckDB variable (``getvariable``) in which frlake's views hold the oldest schema version among
    the files of ``table`` they read."""
    return f"frlake_schema_{table}"


def columns_missing(table: str, version: int) -> tuple[str, ...]:
    """The columns of ``table`` that its files of ``version`` do not hold."""
    return tuple(c for v, added in sorted(ADDED_COLUMNS.get(table, {}).items()) if v > version for c in added)


TABLES: dict[str, pa.Schema] = {
    "dumps": DUMPS,
    "entries": ENTRIES,
    "groups": GROUPS,
    "group_runs": GROUP_RUNS,
    "pg_status": PG_STATUS,
    "stacks": STACKS,
    "snapshots": SNAPSHOTS,
    "health": HEALTH,
    "live_stacks": LIVE_STACKS,
    "collective_durations": COLLECTIVE_DURATIONS,
    "watchdog_lags": WATCHDOG_LAGS,
    "host_links": HOST_LINKS,
}

PARTITIONED = ("dumps", "entries", "groups", "group_runs", "pg_status", "snapshots", "health", "live_stacks",
               "collective_durations", "watchdog_lags", "host_links")
# Written with each diagnosis and replaced whole by the next (not by ingest; a forget retires them and the
# attempt's new diagnosis writes them again).
SUMMARY_TABLES = ("collective_durations", "watchdog_lags", "host_links")


# Progress between the snapshots of each rank (the derived view ``rank_progress``, docs/schema.md):
# ``moving`` when its last completed sequence ids changed since its previous snapshot, ``stuck`` when they
# did not across snapshots further apart than its timeout, ``unchanged`` when closer, ``first`` for the first.
RANK_PROGRESS_SQL = """
    WITH s AS (
      SELECT job, attempt, rank, host, dump_id, snapshot_ns, timeout_ms, last_completed,
             lag(last_completed) OVER w AS previous_completed, lag(snapshot_ns) OVER w AS previous_snapshot_ns,
             row_number() OVER w AS snapshot_index, count(*) OVER (PARTITION BY job, attempt, rank) AS snapshots
      FROM snapshots {where}
      WINDOW w AS (PARTITION BY job, attempt, rank ORDER BY snapshot_ns NULLS FIRST, dump_id)
    )
    SELECT job, attempt, rank, host, dump_id, snapshot_index, snapshots, snapshot_ns, previous_snapshot_ns,
           CASE WHEN previous_snapshot_ns IS NULL THEN 'first'
                WHEN last_completed IS DISTINCT FROM previous_completed THEN 'moving'
                WHEN timeout_ms IS NOT NULL AND snapshot_ns - previous_snapshot_ns > timeout_ms * 1000000 THEN 'stuck'
                ELSE 'unchanged' END AS progress,
           last_completed, previous_completed
    FROM s
"""
