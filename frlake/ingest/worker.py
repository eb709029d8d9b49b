"""Turn a chunk of candidate files into staged Parquet files and catalog records.

Runs in worker processes (or in-process with one worker). It never makes
anything visible: it writes original bytes (content-addressed, idempotent) and
staged Parquet files; the parent publishes and commits (see pipeline.py).
"""

from __future__ import annotations

import gc
import hashlib
import math
import os
import resource
import select
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from frlake import schema
from frlake.catalog.dumps import DumpRecord
from frlake.catalog.seen import CLAIMED_TWICE, FileRecord
from frlake.catalog.store import Catalog
from frlake.errors import DumpRejected, safe_text
from frlake.ingest import hostmaps, livestacks
from frlake.ingest.identity import Identity, IdentityOptions, IdentityResolver, name_time_interval, name_time_ns
from frlake.ingest.parse import Limits, ParsedDump, parse_bytes
from frlake.ingest.sources import Source, read_regular_file
from frlake.storage.lake import Lake, compress_raw, new_part_name


@dataclass(frozen=True)
class WorkerContext:
    lake_root: str
    db_url: str
    run_id: int
    identity: IdentityOptions
    limits: Limits = Limits()
    staging: str | None = None  # the run's own staging folder
    roots: tuple[str, ...] = ()  # the folders the ingest was given: host maps are read inside them only
    # Unique to the run (its run_id is not: a lake deleted and made again at the same path counts from 1).
    token: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass
class StagedFile:
    table: str
    staged: str
    rel_path: str
    job: str | None
    attempt: int | None
    rows: int
    bytes: int


@dataclass
class ChunkResult:
    staged: list[StagedFile] = field(default_factory=list)
    dumps: list[DumpRecord] = field(default_factory=list)
    files: list[FileRecord] = field(default_factory=list)
    stacks: dict[int, list[dict]] = field(default_factory=dict)
    input_bytes: int = 0
    touched: set[tuple[str, int]] = field(default_factory=set)  # attempts that got rows but no dump (live stacks)
    # what the host maps beside the new dumps say: (job, attempt, rank, host, source, precedence, path)
    claims: set[tuple] = field(default_factory=set)
    failures: dict[tuple[str, int, int, str], hostmaps.Failure] = field(default_factory=dict)  # (job, attempt, rank, path)
    maps_seen: set[tuple[str, int, str]] = field(default_factory=set)  # (job, attempt, host map) read into claims
    batch: int = 0
    synced: bool = True  # False: the staged files are written but not yet synced (a worker process' chunk)
    # In-process only: the Parquet files still being written, (table, path in the lake, job, attempt, future).
    pending: list[tuple] = field(default_factory=list)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a dump is decoded.

    Unpickling allocates hundreds of thousands of containers, and CPython's
    collector would walk them again and again (two thirds of plain
    ``pickle.load``'s time on a 2,000-entry dump). A dump holds no reference
    cycles worth collecting; whatever a hostile one makes is collected when
    the collector resumes.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_in_worker_process = False


def worker_ready() -> bool:
    """An empty task: a worker that runs it could start."""
    return True


def enter_worker_process(session_pid: int | None = None) -> None:
    """Pool initializer: from now on each dump runs under a CPU and a memory
    budget, and a worker the kernel stops leaves no core file behind. Arrow
    allocates with the system allocator, whose failures under the memory
    limit surface as MemoryError (its default pools reserve address space).
    With ``session_pid``, the worker exits when that process does."""
    global _in_worker_process
    _in_worker_process = True
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    pa.set_memory_pool(pa.system_memory_pool())
    if session_pid is not None:
        threading.Thread(target=_exit_with, args=(session_pid,), name="frlake-session-watch", daemon=True).start()


def _exit_with(pid: int) -> None:
    """Exit once process ``pid`` has ended. A pool's worker waits for its
    next batch forever, and a session kept its workers between runs
    (frlake.ingest.pool): killed without its exit hooks (SIGKILL, the OOM
    killer), it would leave them idle for good, their memory held. What a
    batch had staged goes with the run's staging folder."""
    try:
        handle = os.pidfd_open(pid)
    except (AttributeError, OSError):  # not Linux 5.3 or later: ask every second
        while True:
            time.sleep(1.0)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:
                pass
    else:
        select.select([handle], [], [])
    os._exit(0)


def data_size() -> int:
    """Bytes of this process' data segment (VmData: heap and private
    writable mappings), what RLIMIT_DATA limits."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmData in /proc/self/status")


@contextmanager
def memory_budget(nbytes: int | None) -> Iterator[None]:
    """In a worker process, let at most ``nbytes`` more of memory be
    allocated in this block (RLIMIT_DATA above what the process holds now):
    beyond, allocations fail and Python raises MemoryError, which rejects
    the dump being read (``over_memory_budget``) while the worker lives on.
    In-process ingest is not limited, nor a system without RLIMIT_DATA."""
    if not _in_worker_process or nbytes is None or not hasattr(resource, "RLIMIT_DATA"):
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    try:
        limit = data_size() + nbytes
    except OSError:
        yield
        return
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


@contextmanager
def cpu_budget(seconds: float) -> Iterator[None]:
    """In a worker process, let the kernel kill the process (SIGXCPU) if this
    block burns more than ``seconds`` of CPU time. A pickle can make the C
    unpickler hash a dict key of shared nested tuples for hours, inside C,
    where no Python-level timeout reaches; the parent then isolates the file
    (see pipeline._Run._execute_parallel). In-process ingest is not limited."""
    if not _in_worker_process:
        yield
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    limit = math.ceil(usage.ru_utime + usage.ru_stime + seconds)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def dump_id_of(sha256: str, job: str, attempt: int) -> int:
    """A stable 63-bit id for a dump, from its content and its attempt (the
    same bytes found in two attempts are two dumps, with two ids)."""
    key = hashlib.sha256(f"{sha256}\0{job}\0{attempt}".encode("utf-8", "surrogatepass")).hexdigest()
    return int(key[:16], 16) >> 1


_worker_state: dict[str, tuple[str, Catalog]] = {}


def _catalog(ctx: WorkerContext) -> Catalog:
    """The run's catalog, opened once per process and run. A process that runs several ingests (one worker
    runs in the session's own process) never asks one run's questions of another run's connection: a lake
    deleted and made again at the same path has the same URL and a new catalog file, and the old
    connection would still read the deleted one (every dump "already present", nothing ingested)."""
    held = _worker_state.get("catalog")
    if held is None or held[0] != ctx.token:
        release_catalog()
        held = _worker_state["catalog"] = (ctx.token, Catalog(ctx.db_url, check=False))
    return held[1]


def release_catalog() -> None:
    """Close the catalog :func:`_catalog` holds, if any (the end of an in-process run)."""
    held = _worker_state.pop("catalog", None)
    if held is not None:
        held[1].close()


@dataclass
class _Dump:
    """One dump read whole: its identity and its rows as Arrow tables."""

    ident: Identity
    parsed: ParsedDump | None  # None: the attempt holds these bytes already
    encoding: str | None
    tables: dict[str, pa.Table]
    key: str  # the dump's key in the catalog and under raw/: see dump_key


def process_chunk(ctx: WorkerContext, batch: int, sources: list[Source],
                  io: ThreadPoolExecutor | None = None) -> ChunkResult:
    """Every file of the chunk is either ingested, a duplicate or rejected
    with a reason: whatever one file holds, the others go on.

    ``io``: the threads of an in-process worker, which outlive the chunk. The
    chunk's Parquet files are then still being written when this returns, so
    that the next chunk is read meanwhile; :func:`finish_chunk` waits for them."""
    lake = Lake(ctx.lake_root, ctx.staging)
    resolver = IdentityResolver(ctx.identity, _run_hostmaps(ctx))
    result = ChunkResult(batch=batch)
    loaded: list[tuple[Source, bytes | None, str | None]] = []
    for src in sources:
        data, sha = _read(src, ctx.limits, result)
        loaded.append((src, data, sha))
    # a snapshot's key: its bytes and the time its name carries (a stuck rank's periodic dumps are
    # byte-identical, and each is a snapshot of its own)
    loaded = [(src, data, None if sha is None else snapshot_key(sha, src.key, data)) for src, data, sha in loaded]
    known = _catalog(ctx).dumps.known([sha for _, data, sha in loaded if data is not None])
    flat = FlatAttempts(_catalog(ctx), [resolver.flat_guess(src.key) for src, data, _ in loaded if data is not None])
    per_partition: dict[tuple[str, int], dict[str, list[pa.Table]]] = {}
    # Raw copies are compressed and written while the next dump is read, and the batch's Parquet files side
    # by side: zstd, Parquet and fsync let go of the GIL, so they take no time from the parsing.
    with nullcontext(io) if io is not None else ThreadPoolExecutor(max_workers=2) as threads:
        writes = [threads.submit(_keep_raw, lake, key, data)
                  for key, data in _ingest_loaded(ctx, lake, resolver, flat, loaded, known, result,
                                                  per_partition)]
        _wait_all(writes)  # a raw copy that cannot be written fails the batch, as before: nothing is committed
        result.pending = [(name, lake.part_path(name, new_part_name(ctx.run_id, batch), job, attempt), job, attempt,
                           threads.submit(_stage, lake, parts, io is not None))
                          for (job, attempt), tables in per_partition.items() for name, parts in tables.items()]
        if io is None:  # the session syncs them before it publishes them, while this worker reads on
            result.synced = False
            finish_chunk(result)
    return result


def finish_chunk(result: ChunkResult) -> ChunkResult:
    """Wait for the chunk's Parquet files and list them as staged (each one
    written, whatever became of the others, before an error is raised)."""
    pending, result.pending = result.pending, []
    _wait_all([stage for *_, stage in pending])
    for name, rel, job, attempt, stage in pending:
        staged, rows, size = stage.result()
        result.staged.append(StagedFile(name, str(staged), rel, job, attempt, rows, size))
    return result


def _wait_all(futures: list[Future]) -> None:
    """Wait until every future is done, then raise the first one's error, if any."""
    wait(futures)
    for f in futures:
        f.result()


def _keep_raw(lake: Lake, key: str, data: bytes) -> int:
    return lake.put_raw(key, compress_raw(data))


def _stage(lake: Lake, parts: list[pa.Table], synced: bool) -> tuple[Path, int, int]:
    table = pa.concat_tables(parts)  # one schema per table: cannot fail on a value
    staged, size = lake.stage_table(table, synced=synced)
    return staged, table.num_rows, size


def _ingest_loaded(ctx: WorkerContext, lake: Lake, resolver: IdentityResolver, flat: FlatAttempts, loaded: list,
                   known: dict, result: ChunkResult, per_partition: dict) -> Iterator[tuple[str, bytes]]:
    """Read each loaded file; yield (key, bytes) of every raw copy to write (once per key)."""
    live_seen: set[str] = set()  # debug-server files of this chunk (their identity is the path's)
    queued: set[str] = set()  # raw copies already yielded

    def raw_copy(key: str, data: bytes) -> Iterator[tuple[str, bytes]]:
        if key not in queued and not lake.raw_path(key).exists():
            queued.add(key)
            yield key, data

    now = datetime.now(UTC)
    for src, data, sha in loaded:
        if data is None:
            continue
        kind = livestacks.debug_server_kind(src.key)
        try:
            map_kind = hostmaps.kind_of(src.key)
            if map_kind is not None:  # a host map, read with the dumps beside it (frlake.ingest.hostmaps)
                found = hostmaps.read(src.key, data, map_kind)
                result.files.append(FileRecord(src.key, src.size, src.mtime_ns, sha, "host_map", None,
                                               safe_text(found.summary())))
                continue
            if kind is not None:
                if sha in live_seen:
                    result.files.append(FileRecord(src.key, src.size, src.mtime_ns, sha, "duplicate"))
                    continue
                job, attempt, table = _read_live_stacks(resolver, src, data, sha, kind)
                per_partition.setdefault((job, attempt), {}).setdefault("live_stacks", []).append(table)
                result.touched.add((job, attempt))
                result.files.append(FileRecord(src.key, src.size, src.mtime_ns, sha, "ingested", None, None, job,
                                               attempt, None, None))
                live_seen.add(sha)
                yield from raw_copy(sha, data)
                continue
            dump = _read_dump(ctx, resolver, flat, src, data, sha, now, known.setdefault(sha, {}))
        except DumpRejected as exc:
            reason, detail = exc.reason, exc.message
        except MemoryError:
            reason, detail = "over_memory_budget", (
                f"reading it needs more than the memory budget of {ctx.limits.memory_bytes:,} bytes per worker")
        except RecursionError:
            reason, detail = "too_deep", "it is nested too deeply to read"
        except Exception as exc:  # a failure frlake did not foresee: this file only, never the batch
            reason, detail = "internal_error", (
                f"frlake failed on this file ({type(exc).__module__}.{type(exc).__name__}); please report it")
        else:
            key = dump.key  # the bytes' sha256, or with their identity or name time (dump_key, snapshot_key)
            ident, parsed = dump.ident, dump.parsed
            if parsed is None:
                rank, host = known.get(key, {}).get((ident.job, ident.attempt), (None, None))
                if rank is None:
                    rank, host = holders_of(ctx, key)[(ident.job, ident.attempt)]
                detail = (f"the same bytes are already in the lake as job {ident.job!r} attempt {ident.attempt} "
                          f"rank {rank} host {host!r}")
                moved = (ident.rank, ident.host) != (rank, host)  # a copy in another rank's or host's place
                if moved:
                    detail += (f", and this file's place says rank {ident.rank} host {ident.host!r}: which is true "
                               "the bytes cannot tell")
                    rank, host = ident.rank, ident.host  # the file's row: the identity its own place names
                result.files.append(FileRecord(src.key, src.size, src.mtime_ns, key, "duplicate",
                                               CLAIMED_TWICE if moved else None, detail, ident.job, ident.attempt,
                                               host, rank))
                continue
            known.setdefault(key, {})[(ident.job, ident.attempt)] = (ident.rank, ident.host)
            _host_claims(resolver, src.key, ident, result)
            yield from raw_copy(key, data)
            tables = per_partition.setdefault((ident.job, ident.attempt), {})
            for name, table in dump.tables.items():
                tables.setdefault(name, []).append(table)
            result.stacks.update(parsed.stacks)
            result.dumps.append(
                DumpRecord(key, dump_id_of(key, ident.job, ident.attempt), ident.job, ident.attempt, ident.rank,
                           ident.host, parsed.version,
                           dump.encoding, len(data), parsed.n_entries, parsed.stats["first_time_created_ns"],
                           parsed.stats["last_time_created_ns"], parsed.stats["first_record_id"])
            )
            result.files.append(
                FileRecord(src.key, src.size, src.mtime_ns, key, "ingested", None, None, ident.job, ident.attempt,
                           ident.host, ident.rank)
            )
            continue
        result.files.append(FileRecord(src.key, src.size, src.mtime_ns, sha, "rejected", reason, safe_text(detail)))


_hostmaps_of_run: tuple[str, hostmaps.HostMaps] | None = None  # this process' current run's (token, maps)


def _run_hostmaps(ctx: WorkerContext) -> hostmaps.HostMaps | None:
    """The host maps of the run, kept from chunk to chunk (each folder's read once a run, not once a chunk:
    a 16,384-rank job's hosts.csv would be parsed for every chunk of its dumps)."""
    global _hostmaps_of_run
    if not ctx.roots:
        return None
    if _hostmaps_of_run is None or _hostmaps_of_run[0] != ctx.token:
        _hostmaps_of_run = (ctx.token, hostmaps.HostMaps(list(ctx.roots)))
    return _hostmaps_of_run[1]


def _host_claims(resolver: IdentityResolver, path: str, ident: Identity, result: ChunkResult) -> None:
    """What the host maps beside a new dump say of its attempt's ranks (every rank each names: a rank that
    left no dump has a host too), and the launcher's failures they hold; each map once per attempt."""
    if resolver.hostmaps is None:
        return
    for found in resolver.hostmaps.maps(path):
        seen = (ident.job, ident.attempt, found.path)
        if seen in result.maps_seen:
            continue
        result.maps_seen.add(seen)
        for rank, host in found.hosts.items():
            result.claims.add((ident.job, ident.attempt, rank, host, found.kind, found.precedence, found.path))
        for f in found.failures:
            result.failures[(ident.job, ident.attempt, f.rank, found.path)] = f


def _read_live_stacks(resolver: IdentityResolver, src: Source, data: bytes, sha: str,
                      kind: str) -> tuple[str, int, pa.Table]:
    """A debug server text file: live stacks (``stacks_*``, ``pyspy_dump_*``)
    become rows of ``live_stacks``; the other handlers' files are skipped."""
    if kind in livestacks.SKIPPED:
        raise DumpRejected(
            "debug_server_text",
            f"a torch debug server {kind}_<time>.txt report: not read"
            + (" (text tables derived from the per-rank dumps; ingest those dumps instead)" if kind == "fr_trace" else ""))
    job, attempt = resolver.resolve_attempt(src.key)
    snapshot = name_time_ns(src.key)
    if snapshot is None:
        snapshot = src.mtime_ns if src.mtime_is_written and src.mtime_ns and src.mtime_ns > 0 else None
    rows = livestacks.rows(livestacks.parse(data, kind), kind, snapshot, src.key, sha)
    return job, attempt, _convert("live stacks", pa.Table.from_pylist, rows, schema.LIVE_STACKS)


def _read_dump(ctx: WorkerContext, resolver: IdentityResolver, flat: FlatAttempts, src: Source, data: bytes,
               sha: str, now: datetime, holders: dict[tuple[str, int], tuple[int, str]]) -> _Dump:
    """Decode, parse, resolve and convert one dump to Arrow tables, under its
    CPU and memory budgets: every conversion that a value can fail happens
    here, per file, so none can fail the batch or the parent's commit.

    ``holders``: the attempts that hold these bytes already. A dump in one of
    them is a duplicate (no tables); known bytes are read only as far as
    their identity, and not at all when the options name the job and attempt."""
    o = ctx.identity
    if holders and o.job is not None and o.attempt is not None and (o.job, o.attempt) in holders:
        rank, host = holders[(o.job, o.attempt)]
        return _Dump(Identity(o.job, o.attempt, host, rank), None, None, {}, sha)
    limits = ctx.limits
    with cpu_budget(limits.cpu_budget(len(data))), memory_budget(limits.memory_bytes), gc_paused():
        parsed, encoding = parse_bytes(data, limits)
        ident = resolver.resolve(src.key, parsed.identity)
        if ident.attempt_inferred:
            ident = replace(ident, attempt=flat.attempt_of(ident, parsed.stats))
        _check_world(ident, parsed)
        key = dump_key(sha, data, parsed, ident)
        if key != sha:  # an entry-less dump is its bytes and its identity: its holders are looked up by that key
            holders = _catalog(ctx).dumps.known([key]).get(key, {})
        if (ident.job, ident.attempt) in holders:
            return _Dump(ident, None, None, {}, key)
        dump_id = dump_id_of(key, ident.job, ident.attempt)
        tables = _dump_tables(parsed, dump_id, key, ident, encoding, src, len(data), ctx.run_id, now)
        unconverted = {k: v for k, v in parsed.stacks.items() if k not in _converted_stacks}
        if unconverted:  # the parent builds the table of new stacks: it must not fail on a value
            _convert("stacks", stacks_table, unconverted)
            if len(_converted_stacks) > 1 << 16:
                _converted_stacks.clear()
            _converted_stacks.update(unconverted)
    return _Dump(ident, parsed, encoding, tables, key)


class FlatAttempts:
    """The attempts of a chunk's dumps in folders that name none, the catalog read once per job for the ranks
    their paths give (``guesses``: (job, rank) or None per file) and again only for a rank a dump's own keys
    gave otherwise."""

    def __init__(self, catalog: Catalog, guesses: list[tuple[str, int] | None]):
        self.catalog = catalog
        self.jobs: dict[str, tuple[int | None, dict[int, tuple[int, int | None, int | None]]]] = {}
        wanted: dict[str, set[int]] = {}
        for guess in guesses:
            if guess is not None:
                wanted.setdefault(guess[0], set()).add(guess[1])
        self.read = wanted  # the ranks read per job
        for job, ranks in wanted.items():
            self.jobs[job] = catalog.dumps.newest_of_ranks(job, ranks)

    def attempt_of(self, ident: Identity, stats: dict) -> int:
        """The attempt of a dump in a folder that names none: the attempt of the rank's newest stored dump
        when this one comes from the same process (a later snapshot), the next one when a new process wrote
        it (a restarted job rewrites its files in place), else the job's newest (a rank that had not dumped
        yet).

        A process' record ids only grow: a dump whose first entry has a lower record id than the stored
        one's, or the same record id at another time, is another process'. One whose ids start higher may be
        either (its ring buffer turned over meanwhile) and is taken as the same process, a snapshot, as
        torch's own repeated dumps of a running job are. Dumps of one chunk are weighed against the catalog
        as the chunk began (a flat folder holds one file per rank)."""
        if ident.rank not in self.read.get(ident.job, ()):
            newest, latest = self.catalog.dumps.newest_of_ranks(ident.job, [ident.rank])
            self.read.setdefault(ident.job, set()).add(ident.rank)
            self.jobs[ident.job] = (newest, {**self.jobs.get(ident.job, (None, {}))[1], **latest})
        newest, latest = self.jobs[ident.job]
        previous = latest.get(ident.rank)
        if previous is None:
            return newest or 0
        attempt, first_id, first_ns = previous
        mine_id, mine_ns = stats.get("first_record_id"), stats.get("first_time_created_ns")
        if first_id is None or mine_id is None:
            return attempt
        restarted = mine_id < first_id or (mine_id == first_id and first_ns is not None and mine_ns != first_ns)
        return attempt + 1 if restarted else attempt


_converted_stacks: set[int] = set()  # the stacks this process has converted to Arrow once, by id


def holders_of(ctx: WorkerContext, key: str) -> dict[tuple[str, int], tuple[int, str]]:
    """The attempts that hold a dump's key already (the catalog's word)."""
    return _catalog(ctx).dumps.known([key]).get(key, {})


def snapshot_key(sha: str, path: str, data: bytes) -> str:
    """The key of a file's bytes: their sha256, or, when its name carries a
    time (``trace_rank_3_1730000000``), the sha256 of the bytes and that time."""
    named = name_time_ns(path)
    if named is None:
        return sha
    return hashlib.sha256(data + f"\0frlake-snapshot\0{named}".encode()).hexdigest()


def dump_key(sha: str, data: bytes, parsed: ParsedDump, ident: Identity) -> str:
    """A dump's key: the sha256 of its bytes (with its name's time, see
    :func:`snapshot_key`). A dump without entries (taken
    with includeCollectives=False, or onlyActive with nothing active) holds
    nothing of its writer, so every rank of a job may write the same bytes:
    its key is the sha256 of the bytes and its identity, so that each rank's
    copy is kept (``raw/`` keeps the bytes under that key)."""
    if parsed.n_entries:
        return sha
    who = f"\0frlake-identity\0{sha}\0{ident.job}\0{ident.attempt}\0{ident.host}\0{ident.rank}".encode("utf-8", "surrogateescape")
    return hashlib.sha256(data + who).hexdigest()


def _check_world(ident: Identity, parsed: ParsedDump) -> None:
    """A rank outside the groups its own entries recorded in is refused: a name that gave a wrong number
    (a timestamp, a step) must not be stored. Only such a group can say so: a pg_config entry that no
    entry of the dump names (gloo's one entry keyed ``''``, which holds whichever group torch registered
    last, ``'[0, 1]'`` in every rank's dump since torch 2.14) describes no group of this rank's, and the
    diagnosis weighs it as evidence (frlake.diagnose.evidence)."""
    if not parsed.n_entries:
        return
    used = set(parsed.entries["pg_name"].unique().to_pylist())
    ranks = [r for g in parsed.groups if g["ranks"] and g["pg_name"] in used for r in g["ranks"]]
    if ranks and ident.rank > max(ranks):
        raise DumpRejected(
            "rank_outside_world",
            f"rank {ident.rank} is outside the world of {max(ranks) + 1} ranks its pg_config describes; "
            "give the rank with --rank or a --layout with {rank}")


def _convert(what: str, build, *args) -> pa.Table:
    """``build(*args)``, with a value Arrow cannot store made a rejection."""
    try:
        return build(*args)
    except UnicodeError:
        raise DumpRejected("bad_text", f"a value of its {what} is not storable text (an unpaired surrogate)") from None
    except OverflowError:
        raise DumpRejected("out_of_range", f"a number of its {what} is out of range") from None
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        raise DumpRejected("bad_value", f"a value of its {what} cannot be stored") from None


def _read(src: Source, limits: Limits, result: ChunkResult) -> tuple[bytes | None, str | None]:
    """The bytes of one source and their sha256, or (None, None) once its
    rejection is recorded. Only regular files are opened (sources.read_regular_file)."""
    try:
        if src.problem is not None:
            raise DumpRejected(*src.problem)
        data = src.data if src.data is not None else read_regular_file(src.fs_path, limits.max_file_bytes)
        if len(data) > limits.max_file_bytes:  # bytes handed over in memory
            raise DumpRejected("too_large", f"the file is {len(data):,} bytes, over the {limits.max_file_bytes:,}-byte limit")
    except DumpRejected as exc:
        result.files.append(FileRecord(src.key, src.size, src.mtime_ns, None, "rejected", exc.reason, exc.message))
        return None, None
    result.input_bytes += len(data)
    return data, hashlib.sha256(data).hexdigest()


def _const(value, n: int, typ: pa.DataType) -> pa.Array:
    return pa.repeat(pa.scalar(value, typ), n)


def _entries_table(parsed: ParsedDump, dump_id: int, ident: Identity) -> pa.Table:
    n = parsed.n_entries
    columns = dict(parsed.entries)
    columns["dump_id"] = _const(dump_id, n, pa.int64())
    columns["rank"] = _const(ident.rank, n, pa.int32())
    columns["host"] = _const(ident.host, n, pa.string())
    return pa.Table.from_arrays([columns[f.name] for f in schema.ENTRIES], schema=schema.ENTRIES)


def _dump_tables(parsed: ParsedDump, dump_id, sha, ident, encoding, src: Source, size, run_id, now) -> dict[str, pa.Table]:
    """The rows of one dump in every table, as Arrow tables of the lake's schemas."""
    tables = {"entries": _convert("entries", _entries_table, parsed, dump_id, ident)}
    ident_cols = {"dump_id": dump_id, "rank": ident.rank, "host": ident.host}
    if parsed.groups:
        rows = [{**ident_cols, **g} for g in parsed.groups]
        tables["groups"] = _convert("pg_config", pa.Table.from_pylist, rows, schema.GROUPS)
        runs = [r for r in rows if r["rank_runs"] is not None]
        if runs:
            tables["group_runs"] = _convert("pg_config", pa.Table.from_pylist, runs, schema.GROUP_RUNS)
    if parsed.pg_status:
        rows = [{**ident_cols, **p} for p in parsed.pg_status]
        tables["pg_status"] = _convert("pg_status", pa.Table.from_pylist, rows, schema.PG_STATUS)
    dump_row = {
        **ident_cols,
        "sha256": sha,
        "fr_version": parsed.version,
        "encoding": encoding,
        "comm_lib_version": parsed.comm_lib_version,
        "size_bytes": size,
        "n_entries": parsed.n_entries,
        "n_groups": len(parsed.groups),
        **parsed.stats,
        "source_path": src.key,
        "source_mtime_ns": src.mtime_ns,
        "ingested_at": now,
        "run_id": run_id,
        "extra": parsed.extra,
    }
    tables["dumps"] = _convert("dump record", pa.Table.from_pylist, [dump_row], schema.DUMPS)
    snapshot = snapshot_row(parsed, src)
    tables["snapshots"] = _convert("snapshot", pa.Table.from_pylist, [{**ident_cols, **snapshot}], schema.SNAPSHOTS)
    if parsed.health:
        rows = [{**ident_cols, "snapshot_ns": snapshot["snapshot_ns"], **h} for h in parsed.health]
        tables["health"] = _convert("health_check_results", pa.Table.from_pylist, rows, schema.HEALTH)
    return tables


def snapshot_row(parsed: ParsedDump, src: Source) -> dict:
    """When the dump was written (a time in its file name, else the file's
    mtime), the moment it shows (the name's time, else its newest entry, else
    the mtime), and its pending collectives against their timeouts then."""
    import pyarrow.compute as pc

    mtime = src.mtime_ns if src.mtime_is_written and src.mtime_ns and src.mtime_ns > 0 else None
    named, width = name_time_interval(src.key) or (None, 0)
    if named is not None and mtime is not None and named <= mtime < named + width:
        named, width = mtime, 0  # the mtime lies in the interval the name stands for: the exact time
    written, written_from = (named, "file_name") if named is not None else (mtime, "mtime" if mtime else None)
    cols = parsed.entries
    newest = None
    for name in ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns"):
        top = pc.max(cols[name]).as_py() if len(cols[name]) else None
        if top is not None and (newest is None or top > newest):
            newest = top
    if named is not None:
        snapshot, snapshot_from = named, "file_name"
    elif newest is not None:
        snapshot, snapshot_from = newest, "newest_entry"
    else:
        snapshot, snapshot_from = mtime, "mtime" if mtime else None
    last_completed = {}  # the recorder's own counter, else the completed entries
    for p in parsed.pg_status:
        if p["last_completed_collective"] is not None:
            last_completed[p["pg_id"]] = p["last_completed_collective"]
    n_pending, oldest, overdue, timeout_max = 0, None, False, None
    if parsed.n_entries:
        timeout_max = pc.max(cols["timeout_ms"]).as_py()
        completed = pc.fill_null(pc.equal(cols["state"], "completed"), False)
        collective = pc.invert(pc.fill_null(cols["is_p2p"], False))
        seq, pg_name = cols["collective_seq_id"], cols["pg_name"]
        from_entries = not last_completed
        if from_entries:  # per group, the largest sequence id of its completed collectives
            done = pa.table({"pg": pc.fill_null(pg_name, ""), "seq": seq}).filter(pc.and_(completed, collective))
            for row in done.group_by("pg").aggregate([("seq", "max")]).to_pylist():
                if row["seq_max"] is not None:
                    last_completed[row["pg"]] = row["seq_max"]
        # The collectives not completed, one by one: few in a dump (the ones a hang left behind).
        open_ = pc.indices_nonzero(pc.and_(pc.invert(completed), collective))
        if len(open_):
            names, seqs = pg_name.take(open_).to_pylist(), seq.take(open_).to_pylist()
            pg_ids = cols["pg_id"].take(open_).to_pylist()
            created, timeouts = cols["time_created_ns"].take(open_).to_pylist(), cols["timeout_ms"].take(open_).to_pylist()
            # an op of a coalesced block whose end marker (same group and sequence id) completed is not pending
            same_seq = pc.and_(completed, pc.is_in(seq, value_set=pa.array(list(set(seqs)), pa.int64())))
            ended = set(zip(pg_name.filter(same_seq).to_pylist(), seq.filter(same_seq).to_pylist()))
            for name, q, pg_id, c, t_ms in zip(names, seqs, pg_ids, created, timeouts):
                if (name, q) in ended:
                    continue
                bound = last_completed.get(str(pg_id)) if not from_entries else None
                if bound is not None and q is not None and q <= bound:
                    continue  # gloo: its state stays "scheduled", pg_status counts what completed
                n_pending += 1
                if c is not None:
                    oldest = c if oldest is None else min(oldest, c)
                    if t_ms is not None and written is not None and overdue is not True:
                        # the name's time is the start of its interval: overdue at its start is overdue; overdue
                        # only within its width is not known either way (None), and never in flight
                        if written - c > t_ms * 1_000_000:
                            overdue = True
                        elif written + width - c > t_ms * 1_000_000:
                            overdue = None
    return {
        "written_ns": written, "written_from": written_from, "snapshot_ns": snapshot, "snapshot_from": snapshot_from,
        "has_entries": parsed.has_entries, "n_pending": n_pending, "oldest_pending_ns": oldest,
        "timeout_ms": timeout_max, "overdue": overdue,
        "last_completed": [{"pg": k, "seq": v} for k, v in sorted(last_completed.items())],
    }


def stacks_table(stacks: dict[int, list[dict]]) -> pa.Table:
    ids = sorted(stacks)
    return pa.table(
        {
            "stack_id": pa.array(ids, pa.int64()),
            "depth": pa.array([len(stacks[i]) for i in ids], pa.int32()),
            "frames": pa.array([stacks[i] for i in ids], schema.STACKS.field("frames").type),
        },
        schema=schema.STACKS,
    )


def cleanup_staged(result: ChunkResult) -> None:
    for s in result.staged:
        try:
            os.unlink(s.staged)
        except FileNotFoundError:
            pass
