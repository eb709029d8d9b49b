"""Merge a partition's small Parquet files into few large ones.

Each ingest batch adds a file per table per attempt it touched, and one to
``stacks``; a cron every ten minutes makes tens of thousands. Per table and
(job, attempt) (``stacks``: the whole table), the files smaller than
``target_bytes`` are merged, in their order, into files of about that size,
written in the table's current schema (frlake.schema: the columns a newer
frlake added are NULL in older files' rows, but for the entries' signatures,
made from their lists). A partition with files of an older schema version
has them rewritten in the current one, whatever their number and size.
Each partition switches in one catalog transaction (frlake.storage.publish); the
replaced files are retired and deleted once the grace period is over.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field

from frlake.catalog.store import Catalog
from frlake.schema import schema_version
from frlake.storage.files import CommittedFile, LakeFiles, partition_order
from frlake.storage.lake import Lake
from frlake.storage.publish import DEFAULT_GRACE_S, publish, recover, sweep
from frlake.storage.rewrite import rewrite

log = logging.getLogger("frlake.compact")


@dataclass(frozen=True)
class CompactOptions:
    min_files: int = 2  # a partition is merged when it has at least this many small files
    # Files at least this large are left alone; merged files are about this size. 128 MB: Spark reads a file
    # of up to that as one task (spark.sql.files.maxPartitionBytes), and a 16,384-rank attempt's entries (240 MB)
    # make two files, written side by side (_merge), so compaction is not bound to one writer on one core.
    target_bytes: int = 128 << 20
    dry_run: bool = False
    lock_timeout_s: float | None = 600.0
    retire_grace_s: float = DEFAULT_GRACE_S


@dataclass
class CompactSummary:
    run_id: int | None = None
    dry_run: bool = False
    partitions: int = 0
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    deleted: int = 0
    old_schema_files: int = 0  # of files_before: written with an older schema, rewritten in the current one
    seconds: float = 0.0
    merged: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def compact(catalog: Catalog, lake: Lake, partitions: Iterable[tuple[str | None, int | None]] | None = None,
            options: CompactOptions = CompactOptions()) -> CompactSummary:
    """Compact every partition with ``min_files`` small files, or only the
    given (job, attempt) ``partitions`` ((None, None) is ``stacks``): what
    ingest runs on the attempts it touched, so its cost does not grow with
    the lake."""
    started = time.perf_counter()
    summary = CompactSummary(dry_run=options.dry_run)
    wanted = None if partitions is None else sorted(set(partitions), key=lambda p: (p[0] or "", p[1] or 0))
    with lake.write_lock(options.lock_timeout_s):
        recover(lake, catalog)
        records = LakeFiles(catalog)
        plans = []
        crowded = {(t, j, a) for t, j, a, _ in records.partition_file_counts(wanted, options.min_files)}
        for table, job, attempt in sorted(crowded | set(records.old_schema_partitions(wanted)), key=partition_order):
            files = [f for f in records.committed(table, None if job is None else (job, attempt))
                     if (f.job, f.attempt) == (job, attempt)]
            small = [f for f in files if f.bytes < options.target_bytes]
            merge = len(small) >= options.min_files
            # files of an older schema are rewritten in the current one whatever their number and size
            groups = [g for g in _groups(small, options.target_bytes) if (merge and len(g) >= 2) or _old(g, table)]
            groups += [[f] for f in files if f.bytes >= options.target_bytes and _old([f], table)]
            if groups:
                plans.append((table, job, attempt, groups))
        for table, job, attempt, groups in plans:
            summary.partitions += 1
            n = sum(len(g) for g in groups)
            summary.files_before += n
            summary.old_schema_files += sum(_old([f], table) for g in groups for f in g)
            summary.bytes_before += sum(f.bytes for g in groups for f in g)
            summary.merged.append({"table": table, "job": job, "attempt": attempt, "files": n})
        if not options.dry_run and plans:
            summary.run_id = catalog.runs.begin(json.dumps([]), json.dumps(asdict(options)), kind="compact")
            try:
                with lake.run_staging(summary.run_id) as run_lake:
                    for batch, (table, _, _, groups) in enumerate(plans, start=1):
                        _merge(run_lake, catalog, summary, batch, table, groups)
                        # the replaced files' final names go now: an outside reader sees one or the other
                        summary.deleted += sweep(lake, catalog, options.retire_grace_s)
            except BaseException:
                catalog.runs.finish(summary.run_id, "failed", {})
                raise
            catalog.runs.finish(summary.run_id, "finished", {})
        if not options.dry_run:
            summary.deleted += sweep(lake, catalog, options.retire_grace_s)
    summary.seconds = round(time.perf_counter() - started, 3)
    if summary.partitions:
        log.info("compacted %d partitions: %d files into %d", summary.partitions, summary.files_before,
                 summary.files_after)
    return summary


def _old(files: Sequence[CommittedFile], table: str) -> bool:
    """Some of ``files`` has an older schema than frlake writes today (frlake.schema.SCHEMA_VERSIONS)."""
    return any(f.schema_version < schema_version(table) for f in files)


def _groups(files: Sequence[CommittedFile], target: int) -> list[list[CommittedFile]]:
    """Consecutive files whose sizes add up to about ``target`` each."""
    groups: list[list[CommittedFile]] = [[]]
    size = 0
    for f in files:
        if groups[-1] and size + f.bytes > target:
            groups.append([])
            size = 0
        groups[-1].append(f)
        size += f.bytes
    return [g for g in groups if g]


def _merge(lake: Lake, catalog: Catalog, summary: CompactSummary, batch: int, table: str,
           groups: list[list[CommittedFile]]) -> None:
    """One partition: its merged files replace the ones they hold, in one transaction.

    Its merged files are written two at a time: Parquet's encoder and zstd
    run on one core per file (and let go of the GIL), and a large attempt's
    entries make several files. Each group of files still makes one merged
    file, and they are published in the groups' order."""
    staged: list = []
    old = [f for group in groups for f in group]
    try:
        with ThreadPoolExecutor(max_workers=min(2, len(groups))) as threads:
            written = [threads.submit(rewrite, lake, summary.run_id, batch, table, group) for group in groups]
            wait(written)  # every file written or failed before any is kept or removed
        staged = [f.result() for f in written if f.exception() is None and f.result() is not None]
        for f in written:
            f.result()  # the first failure, once each staged file is known (and removed below)
        publish(lake, catalog, summary.run_id, staged, lambda ids: LakeFiles(catalog).replace(ids, old))
    finally:
        for s in staged:
            s.staged.unlink(missing_ok=True)
    summary.files_after += len(staged)
    summary.bytes_after += sum(s.spec.bytes for s in staged)
