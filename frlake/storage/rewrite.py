"""Rewriting Parquet files of one table: read them batch by batch, in the
table's current schema (columns added since are NULL, columns dropped since
are left out), keep the rows wanted, and stage new files."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from frlake import schema
from frlake.signatures import signatures
from frlake.storage.files import CommittedFile, LakeFileSpec
from frlake.storage.lake import ROW_GROUP_BYTES, Lake, new_part_name
from frlake.storage.publish import Staged

RowFilter = Callable[[pa.RecordBatch], pa.RecordBatch]


def conform(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` in the columns and order of ``target``: NULL where it has none, but the signatures of
    ``entries`` (schema 2) made from the lists an older file holds."""
    if batch.schema.equals(target):
        return batch
    columns = []
    for f in target:
        i = batch.schema.get_field_index(f.name)
        if i >= 0:
            columns.append(batch.column(i).cast(f.type))
        elif f.name in _SIGNED_FROM and batch.schema.get_field_index(_SIGNED_FROM[f.name]) >= 0:
            lists = _SIGNED_FROM[f.name]
            columns.append(signatures(batch.column(lists).cast(target.field(lists).type)))
        else:
            columns.append(pa.nulls(batch.num_rows, f.type))
    return pa.RecordBatch.from_arrays(columns, schema=target)


_SIGNED_FROM = {sig: lists for lists, sig in schema.SIGNED}


def batches(lake: Lake, files: Sequence[CommittedFile], target: pa.Schema,
            keep: RowFilter | None = None) -> Iterator[pa.RecordBatch]:
    for f in files:
        # One thread decodes a file: read_ahead runs it beside the writer, and Arrow's own decoding threads
        # would only contend with the other file a compaction writes (a tenth more CPU).
        for batch in pq.ParquetFile(lake.root / f.readable).iter_batches(batch_size=64 * 1024, use_threads=False):
            batch = conform(batch, target)
            if keep is not None:
                batch = keep(batch)
            if batch.num_rows:
                yield batch


_END = object()  # what read_ahead's reader leaves after the last batch


def read_ahead(batches: Iterator[pa.RecordBatch], max_bytes: int = ROW_GROUP_BYTES) -> Iterator[pa.RecordBatch]:
    """``batches``, read by a thread of their own while the caller writes the ones before (decoding and
    encoding then run side by side, and both let go of the GIL): at most ``max_bytes`` of them wait, about
    one row group. The reader's error is raised here; the thread ends when the caller stops."""
    waiting: deque = deque()  # batches, then _END or the reader's error
    held = 0  # bytes of the batches waiting
    stopped = False
    cond = threading.Condition()

    def read() -> None:
        nonlocal held
        try:
            for batch in batches:
                with cond:
                    cond.wait_for(lambda: stopped or held < max_bytes)
                    if stopped:
                        return
                    waiting.append(batch)
                    held += batch.nbytes
                    cond.notify_all()
            last: object = _END
        except BaseException as exc:  # raised to the caller, below
            last = exc
        with cond:
            waiting.append(last)
            cond.notify_all()

    reader = threading.Thread(target=read, name="frlake-read-ahead", daemon=True)
    reader.start()
    try:
        while True:
            with cond:
                cond.wait_for(lambda: waiting)
                item = waiting.popleft()
                if isinstance(item, pa.RecordBatch):
                    held -= item.nbytes
                    cond.notify_all()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        with cond:
            stopped = True
            cond.notify_all()
        reader.join()


def without_dumps(dump_ids: set[int]) -> RowFilter:
    drop = pa.array(sorted(dump_ids), pa.int64())

    def keep(batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.filter(pc.invert(pc.is_in(batch.column("dump_id"), value_set=drop)))

    return keep


def rewrite(lake: Lake, run_id: int, batch_no: int, table: str, files: Sequence[CommittedFile],
            keep: RowFilter | None = None) -> Staged | None:
    """Stage one file holding the (kept) rows of ``files``; None if no row is left."""
    target = schema.TABLES[table]
    first = files[0]
    with closing(read_ahead(batches(lake, files, target, keep))) as ahead:  # a failed write stops the reader at once
        staged, rows, size = lake.stage_batches(target, ahead)
    if rows == 0:
        staged.unlink(missing_ok=True)
        return None
    rel = lake.part_path(table, new_part_name(run_id, batch_no), first.job, first.attempt)
    return Staged(staged, LakeFileSpec(table, rel, first.job, first.attempt, rows, size))
