"""The ingest run: scan, skip what is unchanged, parse in workers, publish.

Each chunk of files is published under the lake's write lock through
frlake.storage.publish (staged -> pending -> hidden name -> one catalog transaction
-> final name); a crash leaves pending rows that the next run's recovery
removes before it starts, and then re-ingests those dumps.

A file whose size and mtime did not change is not read again, unless a
later run could judge it differently: a rejection is retried under other
identity options or a newer frlake (``frlake.errors.RETRY_WHEN``), or always
with ``retry_rejected``; a forgotten file under other identity options.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field, replace
from itertools import chain
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from frlake.catalog.seen import FileRecord, FileState
from frlake.catalog.store import Catalog
from frlake.entities import Brief
from frlake.errors import RETRY_WHEN, FrlakeError, WorkersCannotStart
from frlake.ingest.identity import IdentityOptions, IdentityResolver
from frlake.ingest.parse import Limits
from frlake.ingest.pool import keep_pool, new_pool, pool_context, take_pool
from frlake.ingest.sources import NOT_STATTED, ArchiveLimits, Source, archive_members, is_archive, walk
from frlake.ingest.worker import (
    ChunkResult,
    StagedFile,
    WorkerContext,
    cleanup_staged,
    enter_worker_process,
    finish_chunk,
    process_chunk,
    release_catalog,
    stacks_table,
    worker_ready,
)
from frlake.storage.files import LakeFileSpec, mark_publishing
from frlake.storage.lake import Lake, new_part_name, sync
from frlake.storage.publish import DEFAULT_GRACE_S, Staged, publish, recover, sweep
from frlake.version import __version__

MAX_REPORTED_REJECTS = 1000
log = logging.getLogger("frlake.ingest")


@dataclass(frozen=True)
class IngestOptions:
    identity: IdentityOptions = IdentityOptions()
    workers: int = 1
    isolate: bool = False  # parse in a worker process (under a CPU budget per dump) even with one worker
    force: bool = False  # re-read files whose size and mtime did not change
    limits: Limits = Limits()
    chunk_files: int = 32
    diagnose: bool = True  # diagnose the attempts that received new dumps
    chunk_bytes: int = 256 << 20
    archive: ArchiveLimits = ArchiveLimits(max_member_bytes=2 << 30, max_total_bytes=64 << 30)
    lock_timeout_s: float | None = 600.0  # how long a batch waits for another writer to release the lake
    retry_rejected: bool = False  # read every rejected file again, whatever it was rejected for
    retire_grace_s: float = DEFAULT_GRACE_S  # retired files older than this are deleted (frlake.storage.publish.sweep)
    compact_min_files: int | None = 16  # the session compacts a touched partition with this many files (None: never)


@dataclass
class IngestSummary:
    run_id: int = 0
    ingested: int = 0
    already_present: int = 0
    host_maps: int = 0  # files read as host maps (frlake.ingest.hostmaps), not dumps
    unchanged: int = 0
    rejected: int = 0
    skipped_rejected: int = 0  # files rejected before and unchanged since, not read (retry: retry_rejected)
    skipped_forgotten: int = 0  # files whose dumps were forgotten, not read (other identity options read them)
    entries: int = 0
    input_bytes: int = 0
    seconds: float = 0.0  # the whole run: scanning, reading, compacting and diagnosing
    phases: dict[str, float] = field(default_factory=dict)  # seconds of each phase, in the order they ran
    rejected_by_reason: dict[str, int] = field(default_factory=dict)
    rejected_files: list[dict] = field(default_factory=list)
    ingested_files: list[dict] = field(default_factory=list)
    diagnosed: list[Brief] = field(default_factory=list)  # the attempts the session diagnosed after the run
    conflicts: list[dict] = field(default_factory=list)  # ranks of touched attempts claimed by several dumps
    touched: list[tuple[str, int]] = field(default_factory=list)  # the attempts that received dumps
    compacted: int = 0  # Parquet files merged by the compaction after the run

    def to_dict(self) -> dict:
        return asdict(self) | {"diagnosed": [b.to_dict() for b in self.diagnosed]}


@dataclass(frozen=True)
class Step:
    """Where a run stands: its phase (scanning, reading, compacting, diagnosing), how many of its items
    (files, partitions, attempts) are done of how many (None while the files are still being counted), and
    the bytes read so far."""

    phase: str
    done: int
    total: int | None = None
    bytes: int = 0


Progress = Callable[[Step], None]


def ingest(
    catalog: Catalog,
    lake: Lake,
    paths: Iterable[str | Path] = (),
    options: IngestOptions = IngestOptions(),
    progress: Progress | None = None,
    *,
    keep_file_list: bool = False,
    sources: Iterable[Source] = (),
    only: Iterable[str] | None = None,
) -> IngestSummary:
    """Ingest files, folders and tar archives into the lake. Idempotent.

    ``sources`` adds candidates that carry their bytes or live elsewhere on
    disk (uploads). ``only``: the files to look at, found changed under
    ``paths`` by the caller (a watch's folder cursors,
    frlake.ingest.changes): ``paths`` are not walked, and still bound the
    run (its host maps are read inside them). Parsing runs without the lake's write lock (untrusted
    input never holds up other writers); each batch takes it only to publish.
    This only ingests: the session (:class:`frlake.Frlake`) diagnoses what it
    committed."""
    roots = [Path(p).expanduser().absolute() for p in paths]
    IdentityResolver(options.identity)  # validate the layout before touching anything
    context = pool_context() if options.workers > 1 or options.isolate else None
    lake.create()
    started = time.perf_counter()
    summary = IngestSummary()
    with lake.write_lock(options.lock_timeout_s):
        recover(lake, catalog)
        sweep(lake, catalog, options.retire_grace_s)
    opts = {k: v for k, v in asdict(options.identity).items() if v is not None}
    summary.run_id = catalog.runs.begin(json.dumps([str(r) for r in roots]), json.dumps(opts, default=str))
    with lake.run_staging(summary.run_id) as run_lake:
        run = _Run(run_lake, catalog, options, summary, progress, keep_file_list, context)
        try:
            run.execute(roots, sources, None if only is None else [Path(p) for p in only])
        except BaseException:
            catalog.runs.finish(summary.run_id, "failed", _counts(summary))
            raise
        catalog.runs.finish(summary.run_id, "finished", _counts(summary))
    summary.conflicts = [{"job": j, "attempt": a, "rank": r, "dumps": n}
                         for j, a, r, n in catalog.dumps.rank_conflicts(run.touched)]
    summary.touched = sorted(run.touched)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary


def _counts(s: IngestSummary) -> dict[str, int]:
    return {"ingested": s.ingested, "duplicate": s.already_present, "rejected": s.rejected, "unchanged": s.unchanged}


class _Run:
    def __init__(self, lake: Lake, catalog: Catalog, options: IngestOptions, summary: IngestSummary,
                 progress: Progress | None, keep_file_list: bool, pool_context=None):
        self.lake, self.catalog, self.options, self.summary = lake, catalog, options, summary
        self.pool_context = pool_context
        self.progress = progress
        self.keep_file_list = keep_file_list
        # The memory budget and the file-size cap made concrete for this machine and worker count.
        self.ctx = WorkerContext(str(lake.root), catalog.url, summary.run_id, options.identity,
                                 options.limits.resolved(max(1, options.workers)), str(lake.staging))
        self.batch = 0
        self.files_done = 0  # read, or skipped unread (unchanged)
        self.total = 0  # the files found: the archives' members as they are unpacked
        self.archives: list[FileRecord] = []
        self.reasons: Counter[str] = Counter()
        self.touched: set[tuple[str, int]] = set()
        # a member larger than a worker may read is refused before it is unpacked
        self.archive_limits = replace(options.archive, max_member_bytes=min(options.archive.max_member_bytes,
                                                                            self.ctx.limits.max_file_bytes))
        self.spill_dir = lake.staging / "members"  # archive members, unpacked one at a time
        self.spilled: set[str] = set()  # spill files not yet released
        self.options_key = options.identity.key()
        # the host maps whose claims this run committed, (job, attempt, path): a later chunk of the same
        # attempt finds them again, and they are not sent (nor checked against the catalog) twice
        self.maps_committed: set[tuple[str, int, str]] = set()

    # -- scanning -------------------------------------------------------------
    def execute(self, roots: list[Path], extra: Iterable[Source] = (), only: list[Path] | None = None) -> None:
        started = time.perf_counter()
        self.ctx = replace(self.ctx, roots=tuple(str(Path(r).absolute()) for r in roots if Path(r).is_dir()))
        listed = list(self._walk(roots if only is None else only))  # counted first, so that progress has a total
        self.total = len(listed)
        self.summary.phases["scanning"] = round(time.perf_counter() - started, 3)
        self._tell()
        chunks = self._chunks(self._changed(chain(self._counted(extra), self._sources(listed))))
        workers = max(1, self.options.workers)
        try:
            if workers == 1 and not self.options.isolate:
                self._execute_here(chunks)
            else:
                self._execute_parallel(chunks, workers)
        finally:
            self._release_all()
        if self.archives:
            self._record(self.archives)
        self.summary.rejected_by_reason = dict(self.reasons)
        self.summary.phases["reading"] = round(time.perf_counter() - started - self.summary.phases["scanning"], 3)

    def _execute_here(self, chunks: Iterator[list[Source]]) -> None:
        """Batches in this process, committed in order. A batch's Parquet files
        are written (by threads, without the GIL) while the next batch is read,
        and it is committed once that read ends, however it ends: a failure
        leaves committed what ran before it, as batches run one after another
        would. (What a failed run staged goes with its staging folder.)"""
        held: tuple[ChunkResult, list[Source]] | None = None  # read, not committed yet
        try:
            with ThreadPoolExecutor(max_workers=2) as io:
                while True:
                    try:
                        chunk = next(chunks, None)
                        if chunk is not None:
                            self.batch += 1
                            read = (process_chunk(self.ctx, self.batch, chunk, io), chunk)
                    finally:
                        if held is not None:
                            done, held = held, None
                            self._commit_read(*done)
                    if chunk is None:
                        return
                    held = read
        finally:
            release_catalog()  # the in-process worker's connection goes with the run

    def _commit_read(self, result: ChunkResult, chunk: list[Source]) -> None:
        self._commit(finish_chunk(result))
        self._release(chunk)

    def _execute_parallel(self, chunks: Iterator[list[Source]], workers: int) -> None:
        """Batches in worker processes. If a worker dies (a dump over its CPU
        budget, or the out-of-memory killer), each file of the batches it took
        down is tried again on its own; the one that kills its worker again is
        rejected, and the other batches go on in a new pool."""
        lost = self._run_pool(chunks, workers)
        while lost:
            self._check_workers_start()
            for src in (src for chunk in lost for src in chunk):
                if self._run_pool(iter([[src]]), 1):
                    self._reject(src, "worker_killed",
                                 f"its worker was stopped while reading it: over the CPU budget of "
                                 f"{self.options.limits.cpu_budget(src.size):.0f} s (a hash bomb?), or out of memory")
                    self._release([src])
            lost = self._run_pool(chunks, workers)

    def _check_workers_start(self) -> None:
        """A worker that dies is a verdict on the file it read only if a
        worker can start at all. When even an empty task dies, the
        environment is at fault (most often a script without an ``if
        __name__ == "__main__":`` guard, which Python's multiprocessing runs
        again in every worker): stop with what happened, and record nothing
        against the files."""
        with new_pool(1, self.pool_context, enter_worker_process) as pool:
            try:
                pool.submit(worker_ready).result()
                return
            except BrokenProcessPool:
                pass
        raise WorkersCannotStart(
            "frlake's ingest workers die as they start, so no file was judged. If frlake runs from a Python "
            "script, put the code that calls it under `if __name__ == \"__main__\":` (Python re-runs the script "
            "in each worker process), or use IngestOptions(workers=1); otherwise see the workers' error above.")

    def _run_pool(self, chunks: Iterator[list[Source]], workers: int) -> list[list[Source]]:
        """Run batches in a pool until they run out or a worker dies; then
        return the batches that died with it. The pool is an earlier run's,
        if this process kept one, and is kept for the next run if none of
        its workers died (frlake.ingest.pool)."""
        in_flight: dict[Future, list[Source]] = {}
        lost: list[list[Source]] = []
        pool = take_pool(workers, self.pool_context, enter_worker_process)
        try:
            for chunk in chunks:
                self.batch += 1
                in_flight[pool.submit(process_chunk, self.ctx, self.batch, chunk)] = chunk
                if len(in_flight) >= 2 * workers:
                    lost += self._collect(in_flight, FIRST_COMPLETED)
                    if lost:
                        break
            while in_flight and not lost:  # each committed as it ends, while the others run
                lost += self._collect(in_flight, FIRST_COMPLETED)
            lost += self._collect(in_flight, ALL_COMPLETED)
        except BaseException:
            for fut in in_flight:
                fut.cancel()
            pool.shutdown(wait=True)
            raise
        if lost:
            pool.shutdown(wait=True)
        else:
            keep_pool(pool, workers, self.pool_context)
        return lost

    def _collect(self, in_flight: dict[Future, list[Source]], when: str) -> list[list[Source]]:
        done, _ = wait(in_flight, return_when=when)
        lost = []
        for fut in done:
            chunk = in_flight.pop(fut)
            try:
                result = fut.result()
            except BrokenProcessPool:
                lost.append(chunk)
                continue
            self._commit(result)
            self._release(chunk)
        return lost

    def _reject(self, src: Source, reason: str, detail: str) -> None:
        record = FileRecord(src.key, src.size, src.mtime_ns, None, "rejected", reason, detail)
        self._record([record])
        self._tally(ChunkResult(files=[record]))

    def _record(self, files: list[FileRecord]) -> None:
        """Record files outside a batch (archives, killed workers), under the
        write lock like every record of a path (two runs never race on one)."""
        with self.lake.write_lock(self.options.lock_timeout_s):
            self.catalog.dumps.commit(self.summary.run_id, [], self._stamped(files))

    def _stamped(self, files: list[FileRecord]) -> list[FileRecord]:
        """The records with how they were judged (options and frlake version)."""
        return [replace(f, options_key=self.options_key, frlake_version=__version__) for f in files]

    def _unchanged(self, src: Source, known: FileState | None) -> bool:
        """Whether ``src`` need not be read: same size and mtime as the catalog
        knows, and nothing this run could judge differently (module docstring).
        Counts what it skips."""
        if (self.options.force or known is None or src.mtime_ns == NOT_STATTED
                or (known.size, known.mtime_ns) != (src.size, src.mtime_ns)):
            return False
        if known.status == "rejected":
            when = RETRY_WHEN.get(known.reason or "", "version")
            if (self.options.retry_rejected or when == "always" or known.frlake_version != __version__
                    or (when == "options" and known.options_key != self.options_key)):
                return False
            self.summary.skipped_rejected += 1
        elif known.status == "forgotten":
            if known.options_key != self.options_key:
                return False
            self.summary.skipped_forgotten += 1
        else:
            self.summary.unchanged += 1
        return True

    def _walk(self, roots: list[Path]) -> Iterator[Source]:
        for n, src in enumerate(walk(roots, exclude=self.lake.root), 1):
            if self.progress and n % 1000 == 0:
                self.progress(Step("scanning", n))
            yield src

    def _sources(self, listed: list[Source]) -> Iterator[Source]:
        for src in listed:
            if src.problem is None and is_archive(Path(src.fs_path)):
                self.total -= 1  # the archive counts as its members
                for member in self._archive(src):
                    self.total += 1
                    yield member
            else:
                yield src

    def _counted(self, given: Iterable[Source]) -> Iterator[Source]:
        """Sources a caller hands over (uploads), counted as they come: they may hold their bytes."""
        for src in given:
            self.total += 1
            yield src

    def _tell(self) -> None:
        if self.progress:
            self.progress(Step("reading", self.files_done, self.total, self.summary.input_bytes))

    def _archive(self, archive: Source) -> Iterator[Source]:
        key = archive.key
        if self._unchanged(archive, self.catalog.files.current([key]).get(key)):
            return
        status, reason, detail = "archive", None, None
        try:
            for member in archive_members(archive.fs_path, key, self.archive_limits, self.spill_dir):
                if member.path is not None:
                    self.spilled.add(member.path)
                yield member
        except FrlakeError as exc:
            status, reason, detail = "rejected", "bad_archive", str(exc)
            self._count_reject(key, reason, detail)
        self.archives.append(FileRecord(key, archive.size, archive.mtime_ns, None, status, reason, detail))

    def _release(self, sources: Iterable[Source]) -> None:
        """Delete the spill files of sources that are done with."""
        for src in sources:
            if src.path in self.spilled:
                self.spilled.discard(src.path)
                Path(src.path).unlink(missing_ok=True)

    def _release_all(self) -> None:
        for path in list(self.spilled):
            Path(path).unlink(missing_ok=True)
        self.spilled.clear()

    def _changed(self, sources: Iterator[Source]) -> Iterator[Source]:
        """Drop files whose size and mtime match the catalog, without reading
        them. A path that could not even be stat'ed is reported every time."""
        pending: list[Source] = []

        def flush() -> Iterator[Source]:
            known = {} if self.options.force else self.catalog.files.current([s.key for s in pending])
            skipped = 0
            for s in pending:
                if self._unchanged(s, known.get(s.key)):
                    self._release([s])
                    skipped += 1
                else:
                    yield s
            pending.clear()
            if skipped:
                self.files_done += skipped
                self._tell()

        for src in sources:
            pending.append(src)
            if len(pending) >= 1000 or src.data is not None or src.path in self.spilled:
                yield from flush()
        yield from flush()

    def _chunks(self, sources: Iterator[Source]) -> Iterator[list[Source]]:
        """Chunks of ``chunk_files`` files (or ``chunk_bytes``), read a few
        chunks ahead. With several workers, the workers should finish at about
        the same time: an input that fits in the look-ahead is cut at once
        into equal chunks, as many for each worker, and no smaller than it must
        be (each chunk has a fixed cost); a longer one, once it runs out, has
        what is left cut into smaller chunks (down to a quarter of one). One
        worker has nobody to wait for: its chunks stay whole, and so does the
        number of files each run adds to a partition (fewer files, no
        compaction of what it just wrote)."""
        opts, workers = self.options, max(1, self.options.workers)
        ahead: deque[Source] = deque()
        held = 0  # bytes that look-ahead sources hold in memory (uploads) or in spill files (archive members)
        exhausted = False
        first = True
        while True:
            # one source past the look-ahead, so that an input that just fits is known whole
            while not exhausted and len(ahead) <= 4 * workers * opts.chunk_files and held < 2 * opts.chunk_bytes:
                src = next(sources, None)
                if src is None:
                    exhausted = True
                    break
                ahead.append(src)
                held += self._held(src)
            if not ahead:
                return
            if first and exhausted and workers > 1:
                first = False
                yield from self._equal_chunks(ahead, workers)  # leaves in ahead what the limits did not place
                continue
            first = False
            most = opts.chunk_files
            if exhausted and workers > 1:  # half a worker's share of what is left, down to a quarter chunk
                most = max(1, opts.chunk_files // 4, min(most, -(-len(ahead) // (2 * workers))))
            chunk: list[Source] = []
            size = 0
            while ahead and len(chunk) < most and size < opts.chunk_bytes:
                src = ahead.popleft()
                chunk.append(src)
                size += src.size
                held -= self._held(src)
            yield chunk

    def _equal_chunks(self, sources: deque[Source], workers: int) -> Iterator[list[Source]]:
        """The whole input, known before any chunk is read, in a multiple of
        ``workers`` chunks of about the same bytes, within ``chunk_files``
        and ``chunk_bytes``; taken from ``sources``, which keeps what files
        of very unequal sizes left over."""
        opts = self.options
        total = sum(src.size for src in sources)
        each = max(-(-len(sources) // (workers * opts.chunk_files)), -(-total // (workers * opts.chunk_bytes)))
        count = min(len(sources), workers * each)
        done = 0  # bytes in the chunks yielded so far
        for k in range(count, 0, -1):
            target = (total - done) / k  # an equal share of what is left
            chunk: list[Source] = []
            size = 0
            while sources and len(sources) > k - 1 and (not chunk or (
                    len(chunk) < opts.chunk_files and size + sources[0].size / 2 <= target
                    and size + sources[0].size <= opts.chunk_bytes)):
                src = sources.popleft()
                chunk.append(src)
                size += src.size
            done += size
            yield chunk

    def _held(self, src: Source) -> int:
        return len(src.data) if src.data is not None else src.size if src.path in self.spilled else 0

    # -- publishing -----------------------------------------------------------
    def _commit(self, result: ChunkResult) -> None:
        try:
            if not result.synced:
                sync(Path(s.staged) for s in result.staged)
            with self.lake.write_lock(self.options.lock_timeout_s):
                self._publish(result)
        finally:
            cleanup_staged(result)
        self._tally(result)

    def _publish(self, result: ChunkResult) -> None:
        """Under the write lock: what other runs committed meanwhile is a
        duplicate; the rest is published and committed in one transaction."""
        self._drop_known(result)
        new_stacks = self.catalog.dumps.new_stack_ids(result.stacks) if result.dumps else set()
        if new_stacks:
            table = stacks_table({k: result.stacks[k] for k in new_stacks})
            rel = self.lake.part_path("stacks", new_part_name(self.summary.run_id, result.batch), None, None)
            staged, size = self.lake.stage_table(table)
            result.staged.append(StagedFile("stacks", str(staged), rel, None, None, table.num_rows, size))
        files = [Staged(Path(s.staged), LakeFileSpec(s.table, s.rel_path, s.job, s.attempt, s.rows, s.bytes))
                 for s in result.staged]
        records = self._stamped(result.files)
        claims = sorted((c for c in result.claims if (c[0], c[1], c[6]) not in self.maps_committed), key=repr)
        failures = {k: f for k, f in result.failures.items() if (k[0], k[1], k[3]) not in self.maps_committed}
        publish(self.lake, self.catalog, self.summary.run_id, files,
                lambda ids: self.catalog.dumps.commit(self.summary.run_id, result.dumps, records, sorted(new_stacks),
                                                      sorted(result.touched), also=lambda s: mark_publishing(s, ids),
                                                      claims=claims, failures=failures))
        self.maps_committed.update(result.maps_seen)
        self.touched.update((d.job, d.attempt) for d in result.dumps)
        self.touched.update(result.touched)
        log.debug("batch %d: %d dumps, %d Parquet files committed", result.batch, len(result.dumps), len(result.staged))

    def _drop_known(self, result: ChunkResult) -> None:
        """Bytes another chunk committed to the same attempt meanwhile are
        duplicates: take them out. So are dumps whose raw bytes a forget
        deleted after the worker found them stored: those files are left
        unrecorded, and the next run reads them again."""
        known = self.catalog.dumps.known([d.sha256 for d in result.dumps])
        dup = {(d.sha256, d.job, d.attempt) for d in result.dumps if (d.job, d.attempt) in known.get(d.sha256, {})}
        lost = {(d.sha256, d.job, d.attempt) for d in result.dumps
                if (d.sha256, d.job, d.attempt) not in dup and not self.lake.raw_path(d.sha256).exists()}
        if not dup and not lost:
            return
        if lost:
            log.warning("%d dumps lost their raw bytes to a concurrent forget; the next run reads them again", len(lost))
        dropped = {d.dump_id for d in result.dumps if (d.sha256, d.job, d.attempt) in dup | lost}
        result.dumps = [d for d in result.dumps if d.dump_id not in dropped]
        files = []
        for f in result.files:
            key = (f.sha256, f.job, f.attempt)
            if f.status == "ingested" and key in lost:
                continue
            files.append(replace(f, status="duplicate") if f.status == "ingested" and key in dup else f)
        result.files = files
        kept = []
        for s in result.staged:
            table = pq.read_table(s.staged)
            if "dump_id" not in table.column_names:  # live stacks: not a dump
                kept.append(s)
                continue
            table = table.filter(pc.invert(pc.is_in(table["dump_id"], value_set=pa.array(list(dropped), pa.int64()))))
            if table.num_rows:
                restaged, size = self.lake.stage_table(table)
                Path(s.staged).unlink()
                s.staged, s.rows, s.bytes = str(restaged), table.num_rows, size
                kept.append(s)
            else:
                Path(s.staged).unlink()
        result.staged = kept

    def _tally(self, result: ChunkResult) -> None:
        s = self.summary
        for f in result.files:
            if f.status == "ingested":
                s.ingested += 1
                if self.keep_file_list:
                    s.ingested_files.append({"path": f.path, "job": f.job, "attempt": f.attempt, "host": f.host, "rank": f.rank})
            elif f.status == "duplicate":
                s.already_present += 1
            elif f.status == "host_map":
                s.host_maps += 1
            else:
                self._count_reject(f.path, f.reason, f.detail)
        s.entries += sum(d.n_entries for d in result.dumps)
        s.input_bytes += result.input_bytes
        self.files_done += len(result.files)
        self._tell()

    def _count_reject(self, path: str, reason: str | None, detail: str | None) -> None:
        log.info("rejected %s (%s): %s", path, reason, detail)
        self.summary.rejected += 1
        self.reasons[reason or "unknown"] += 1
        if len(self.summary.rejected_files) < MAX_REPORTED_REJECTS:
            self.summary.rejected_files.append({"path": path, "reason": reason, "detail": detail})
