"""How files become part of the lake and leave it (docs/lake.md, "Atomic
publication"). Every writer (ingest, forget, compaction) goes through here,
holding the lake's write lock:

1. the files are staged under ``.staging`` (no lock needed);
2. the catalog records them ``pending`` at their final paths (the intent);
3. they are renamed into their table's folder under a hidden name
   (``.part-....parquet.pending``: Spark, Hive, Trino and ``*.parquet`` globs
   skip it);
4. one catalog transaction commits them (``publishing``: frlake's views read
   them at the hidden name) together with whatever the writer changes (new
   dumps, forgotten attempts, the files a compaction replaces, retired);
5. each is hard-linked at its final name and marked ``committed``; its hidden
   name is retired.

Retired files (replaced Parquet files, hidden names, raw bytes no dump refers
to) are deleted by a later writer once the grace period has passed, so a
reader that built its views before the switch can still read them.

:func:`recover` undoes step 2-3 of a dead writer and rolls step 5 forward.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import chain
from pathlib import Path

import pyarrow.parquet as pq

from frlake.catalog.store import Catalog
from frlake.storage.files import LakeFiles, LakeFileSpec
from frlake.storage.lake import Lake, hidden_path

log = logging.getLogger("frlake.publish")

# How long a retired file stays on disk: longer than any reader holds views
# (a server request, a report, a sandbox query under its time limit).
DEFAULT_GRACE_S = 3600.0


@dataclass
class Staged:
    """A Parquet file written under ``.staging``, to be published at ``spec.path``."""

    staged: Path
    spec: LakeFileSpec


def publish(lake: Lake, catalog: Catalog, run_id: int, files: Sequence[Staged],
            commit: Callable[[list[int]], None]) -> None:
    """Publish staged files; ``commit(ids)`` runs the one transaction that
    makes them visible (it runs :func:`frlake.storage.files.mark_publishing`
    on ``ids`` with its own changes). Only under the write lock."""
    records = LakeFiles(catalog)
    ids = records.add_pending(run_id, [f.spec for f in files]) if files else []
    try:
        for f in files:
            lake.publish(f.staged, f.spec.path)
        commit(ids)
    except BaseException:
        for f in files:
            lake.remove(hidden_path(f.spec.path))
        records.drop(ids)
        raise
    reveal(lake, catalog, list(zip(ids, (f.spec.path for f in files), strict=True)))


def reveal(lake: Lake, catalog: Catalog, files: Sequence[tuple[int, str]]) -> None:
    """Link committed files at their final names, then mark them committed."""
    if files:
        LakeFiles(catalog).mark_revealed([(i, path, lake.reveal(path)) for i, path in files])


def recover(lake: Lake, catalog: Catalog) -> int:
    """Under the write lock: undo the publications that dead writers left
    half-done (pending files), finish the ones they committed (publishing
    files get their final names), clear dead runs' staging folders, and
    index the stacks of a lake made before the catalog kept a stack index.
    Live runs are left alone. Returns the number of publications undone."""
    records = LakeFiles(catalog)
    dead = [(i, path) for i, path, run_id in records.pending() if not lake.run_alive(run_id)]
    for _, path in dead:
        lake.remove(hidden_path(path))
        lake.remove(path)  # a lake written by a frlake that renamed pending files to their final names
    records.drop([i for i, _ in dead])
    reveal(lake, catalog, records.publishing())
    lake.clear_dead_staging()
    stack_files = records.paths("stacks")
    if stack_files and catalog.dumps.stack_index_is_empty():
        catalog.dumps.index_stacks(chain.from_iterable(
            pq.read_table(lake.root / f, columns=["stack_id"]).column(0).to_pylist() for f in stack_files))
    return len(dead)


def sweep(lake: Lake, catalog: Catalog, grace_s: float = DEFAULT_GRACE_S) -> int:
    """Under the write lock: delete the retired files older than the grace
    period. Raw bytes that a dump refers to again (re-ingested since) stay.
    Returns how many files were deleted."""
    before = datetime.now(UTC) - timedelta(seconds=max(0.0, grace_s))
    records = LakeFiles(catalog)
    deleted = 0
    while True:
        expired = records.expired_retired(before)
        if not expired:
            return deleted
        wanted = records.referenced_shas([r.sha256 for r in expired if r.kind == "raw" and r.sha256])
        for r in expired:
            if r.kind == "raw" and r.sha256 in wanted:
                continue
            lake.remove(r.path)
            deleted += 1
        records.drop_retired([r.id for r in expired])
        log.debug("deleted %d retired files", deleted)
