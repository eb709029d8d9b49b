"""Forget dumps: by job, attempt, source path or age (retention).

Under the lake's write lock, in one catalog transaction (frlake.storage.publish):
the attempts that lose every dump lose their files, diagnoses and records;
an attempt that keeps some dumps gets its files rewritten without the others
(its summary files are retired, not rewritten) and its diagnosis becomes
pending: the session's new diagnosis writes its summary again. The files
that held forgotten dumps are remembered as ``forgotten`` (a cron ingest
with the same options does not bring them back; other identity options or
``--force`` do). Raw bytes that
no dump refers to any more are retired, and deleted with the replaced
Parquet files once the grace period is over. A crash before the transaction
changes nothing; after it, recovery finishes the publication.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field

from frlake.catalog.store import Catalog
from frlake.errors import FrlakeError
from frlake.schema import SUMMARY_TABLES
from frlake.storage.files import CommittedFile, LakeFiles
from frlake.storage.forget_plan import ForgetPlan, ForgetSelector, commit_forget, forget_plan
from frlake.storage.lake import Lake
from frlake.storage.publish import DEFAULT_GRACE_S, Staged, publish, recover, sweep
from frlake.storage.rewrite import rewrite, without_dumps

log = logging.getLogger("frlake.forget")


@dataclass(frozen=True)
class ForgetOptions:
    dry_run: bool = False  # say what would go, change nothing
    lock_timeout_s: float | None = 600.0
    retire_grace_s: float = DEFAULT_GRACE_S


@dataclass
class ForgetSummary:
    run_id: int | None = None
    dry_run: bool = False
    dumps: int = 0
    bytes: int = 0  # of the forgotten dumps' original files
    attempts_removed: list[tuple[str, int]] = field(default_factory=list)
    attempts_changed: list[tuple[str, int]] = field(default_factory=list)  # keep some dumps; rediagnosed
    files_rewritten: int = 0
    files_retired: int = 0
    deleted: int = 0  # retired files whose grace period was over
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def forget(catalog: Catalog, lake: Lake, selector: ForgetSelector,
           options: ForgetOptions = ForgetOptions()) -> ForgetSummary:
    """Forget what ``selector`` holds (see the module docstring)."""
    if selector.is_empty():
        raise FrlakeError("say what to forget: a job, an attempt, a source path or an age")
    if selector.attempt is not None and selector.job is None:
        raise FrlakeError("an attempt is forgotten with its job: give --job too")
    started = time.perf_counter()
    summary = ForgetSummary(dry_run=options.dry_run)
    with lake.write_lock(options.lock_timeout_s):
        recover(lake, catalog)
        plan = forget_plan(catalog, selector)
        summary.dumps = len(plan.dumps)
        summary.bytes = sum(d.size_bytes for d in plan.dumps)
        summary.attempts_removed = sorted(plan.whole)
        summary.attempts_changed = sorted(plan.partial)
        if not options.dry_run and plan.dumps:
            summary.run_id = catalog.runs.begin(json.dumps([]), json.dumps(_describe(selector)), kind="forget")
            try:
                with lake.run_staging(summary.run_id) as run_lake:
                    _apply(run_lake, catalog, summary, plan)
            except BaseException:
                catalog.runs.finish(summary.run_id, "failed", {})
                raise
            catalog.runs.finish(summary.run_id, "finished", {})
        if not options.dry_run:
            summary.deleted = sweep(lake, catalog, options.retire_grace_s)
    summary.seconds = round(time.perf_counter() - started, 3)
    log.info("forgot %d dumps: %d attempts removed, %d changed", summary.dumps, len(summary.attempts_removed),
             len(summary.attempts_changed))
    return summary


def _apply(lake: Lake, catalog: Catalog, summary: ForgetSummary, plan: ForgetPlan) -> None:
    records = LakeFiles(catalog)
    retire: list[CommittedFile] = []
    staged: list[Staged] = []
    for key in plan.whole:
        retire += records.committed(partition=key)
    for n, (key, dump_ids) in enumerate(sorted(plan.partial.items()), start=1):
        by_table: dict[str, list[CommittedFile]] = {}
        for f in records.committed(partition=key):
            by_table.setdefault(f.table, []).append(f)
        for table, files in sorted(by_table.items()):
            # a summary table is not rewritten but retired: the attempt's new diagnosis writes it again
            new = None if table in SUMMARY_TABLES else rewrite(lake, summary.run_id, n, table, files,
                                                               without_dumps(dump_ids))
            if new is not None:
                staged.append(new)
            retire += files
    summary.files_rewritten, summary.files_retired = len(staged), len(retire)
    try:
        publish(lake, catalog, summary.run_id, staged,
                lambda ids: commit_forget(catalog, summary.run_id, ids, plan, retire))
    finally:
        for s in staged:
            s.staged.unlink(missing_ok=True)


def _describe(selector: ForgetSelector) -> dict:
    return {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in asdict(selector).items() if v is not None}
