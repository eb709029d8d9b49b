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
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa

from frlake import schema
from frlake.catalog.store import Catalog, DumpRecord, FileRecord
from frlake.errors import DumpRejected, safe_text
from frlake.ingest.identity import Identity, IdentityOptions, IdentityResolver
from frlake.ingest.parse import Limits, ParsedDump, parse_dump
from frlake.ingest.safeload import decode
from frlake.ingest.sources import Source, read_regular_file
from frlake.lake import Lake, compress_raw, new_part_name


@dataclass(frozen=True)
class WorkerContext:
    lake_root: str
    db_url: str
    run_id: int
    identity: IdentityOptions
    limits: Limits = Limits()
    staging: str | None = None  # the run's own staging folder


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


def enter_worker_process() -> None:
    """Pool initializer: from now on each dump runs under a CPU and a memory
    budget, and a worker the kernel stops leaves no core file behind. Arrow
    allocates with the system allocator, whose failures under the memory
    limit surface as MemoryError (its default pools reserve address space)."""
    global _in_worker_process
    _in_worker_process = True
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    pa.set_memory_pool(pa.system_memory_pool())


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


def dump_id_of(sha256: str) -> int:
    """A stable 63-bit id for a dump, from its content."""
    return int(sha256[:16], 16) >> 1


_worker_state: dict[str, object] = {}


def _catalog(ctx: WorkerContext) -> Catalog:
    cat = _worker_state.get(ctx.db_url)
    if cat is None:
        cat = _worker_state[ctx.db_url] = Catalog(ctx.db_url, check=False)
    return cat  # type: ignore[return-value]


@dataclass
class _Dump:
    """One dump read whole: its identity and its rows as Arrow tables."""

    ident: Identity
    parsed: ParsedDump
    encoding: str
    tables: dict[str, pa.Table]


def process_chunk(ctx: WorkerContext, batch: int, sources: list[Source]) -> ChunkResult:
    """Every file of the chunk is either ingested, a duplicate or rejected
    with a reason: whatever one file holds, the others go on."""
    lake = Lake(ctx.lake_root, ctx.staging)
    resolver = IdentityResolver(ctx.identity)
    result = ChunkResult()
    loaded: list[tuple[Source, bytes | None, str | None]] = []
    for src in sources:
        data, sha = _read(src, ctx.limits, result)
        loaded.append((src, data, sha))
    known = _catalog(ctx).known_dumps([sha for _, data, sha in loaded if data is not None])
    per_partition: dict[tuple[str, int], dict[str, list[pa.Table]]] = {}
    with ThreadPoolExecutor(max_workers=1) as io:  # raw copies written while the next dump is read
        writes = [io.submit(lake.put_raw, sha, blob) for sha, blob in _ingest_loaded(ctx, lake, resolver, loaded,
                                                                                    known, result, per_partition)]
        for w in writes:
            w.result()  # a raw copy that cannot be written fails the batch, as before: nothing is committed
    for (job, attempt), tables in per_partition.items():
        for name, parts in tables.items():
            table = pa.concat_tables(parts)  # one schema per table: cannot fail on a value
            rel = lake.part_path(name, new_part_name(ctx.run_id, batch), job, attempt)
            staged, size = lake.stage_table(table)
            result.staged.append(StagedFile(name, str(staged), rel, job, attempt, table.num_rows, size))
    return result


def _ingest_loaded(ctx: WorkerContext, lake: Lake, resolver: IdentityResolver, loaded: list, known: set[str],
                   result: ChunkResult, per_partition: dict) -> Iterator[tuple[str, bytes]]:
    """Read each loaded file; yield (sha256, compressed bytes) of every raw copy to write."""
    now = datetime.now(UTC)
    seen: set[str] = set()
    for src, data, sha in loaded:
        if data is None:
            continue
        if sha in known or sha in seen:
            result.files.append(FileRecord(src.key, src.size, src.mtime_ns, sha, "duplicate"))
            continue
        try:
            dump = _read_dump(ctx, resolver, src, data, sha, now)
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
            seen.add(sha)
            if not lake.raw_path(sha).exists():
                yield sha, compress_raw(data)
            ident, parsed = dump.ident, dump.parsed
            tables = per_partition.setdefault((ident.job, ident.attempt), {})
            for name, table in dump.tables.items():
                tables.setdefault(name, []).append(table)
            result.stacks.update(parsed.stacks)
            result.dumps.append(
                DumpRecord(sha, dump_id_of(sha), ident.job, ident.attempt, ident.rank, ident.host, parsed.version,
                           dump.encoding, len(data), parsed.n_entries, parsed.stats["first_time_created_ns"],
                           parsed.stats["last_time_created_ns"])
            )
            result.files.append(
                FileRecord(src.key, src.size, src.mtime_ns, sha, "ingested", None, None, ident.job, ident.attempt,
                           ident.host, ident.rank)
            )
            continue
        result.files.append(FileRecord(src.key, src.size, src.mtime_ns, sha, "rejected", reason, safe_text(detail)))


def _read_dump(ctx: WorkerContext, resolver: IdentityResolver, src: Source, data: bytes, sha: str,
               now: datetime) -> _Dump:
    """Decode, parse, resolve and convert one dump to Arrow tables, under its
    CPU and memory budgets: every conversion that a value can fail happens
    here, per file, so none can fail the batch or the parent's commit."""
    limits = ctx.limits
    with cpu_budget(limits.cpu_budget(len(data))), memory_budget(limits.memory_bytes), gc_paused():
        obj, encoding = decode(data, limits.max_file_bytes)
        parsed = parse_dump(obj, encoding, len(data), limits)
        del obj
        ident = resolver.resolve(src.key, parsed.identity)
        tables = _dump_tables(parsed, dump_id_of(sha), sha, ident, encoding, src, len(data), ctx.run_id, now)
        if parsed.stacks:
            _convert("stacks", stacks_table, parsed.stacks)  # the parent builds the table of new stacks
    return _Dump(ident, parsed, encoding, tables)


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
    return tables


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
