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
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterator

import pyarrow as pa

from frlake import schema
from frlake.catalog.store import Catalog, DumpRecord, FileRecord
from frlake.errors import DumpRejected
from frlake.ingest.identity import IdentityOptions, IdentityResolver
from frlake.ingest.parse import Limits, ParsedDump, parse_dump
from frlake.ingest.safeload import decode
from frlake.ingest.sources import Source, read_regular_file
from frlake.lake import Lake, new_part_name


@dataclass(frozen=True)
class WorkerContext:
    lake_root: str
    db_url: str
    run_id: int
    identity: IdentityOptions
    limits: Limits = Limits()


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


def enter_worker_process() -> None:
    """Pool initializer: from now on each dump runs under a CPU budget, and a
    worker the kernel stops leaves no core file behind."""
    global _in_worker_process
    _in_worker_process = True
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


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


def process_chunk(ctx: WorkerContext, batch: int, sources: list[Source]) -> ChunkResult:
    lake = Lake(ctx.lake_root)
    resolver = IdentityResolver(ctx.identity)
    result = ChunkResult()
    loaded: list[tuple[Source, bytes | None, str | None]] = []
    for src in sources:
        data, sha = _read(src, ctx.limits, result)
        loaded.append((src, data, sha))
    known = _catalog(ctx).known_dumps([sha for _, data, sha in loaded if data is not None])
    now = datetime.now(timezone.utc)
    per_partition: dict[tuple[str, int], dict[str, list]] = {}  # entries: Arrow tables; others: rows
    seen: set[str] = set()
    for src, data, sha in loaded:
        if data is None:
            continue
        if sha in known or sha in seen:
            result.files.append(FileRecord(src.key, src.size, src.mtime_ns, sha, "duplicate"))
            continue
        try:
            with cpu_budget(ctx.limits.cpu_budget(len(data))), gc_paused():
                obj, encoding = decode(data, ctx.limits.max_file_bytes)
                parsed = parse_dump(obj, encoding, len(data), ctx.limits)
                del obj
            ident = resolver.resolve(src.key, parsed.identity)
        except DumpRejected as exc:
            result.files.append(FileRecord(src.key, src.size, src.mtime_ns, sha, "rejected", exc.reason, exc.message))
            continue
        seen.add(sha)
        lake.store_raw(sha, data)
        dump_id = dump_id_of(sha)
        tables = per_partition.setdefault((ident.job, ident.attempt), {})
        _add_tables(tables, parsed, dump_id, sha, ident, encoding, src, len(data), ctx.run_id, now)
        result.stacks.update(parsed.stacks)
        result.dumps.append(
            DumpRecord(sha, dump_id, ident.job, ident.attempt, ident.rank, ident.host, parsed.version, encoding,
                       len(data), parsed.n_entries, parsed.stats["first_time_created_ns"],
                       parsed.stats["last_time_created_ns"])
        )
        result.files.append(
            FileRecord(src.key, src.size, src.mtime_ns, sha, "ingested", None, None, ident.job, ident.attempt,
                       ident.host, ident.rank)
        )
    for (job, attempt), tables in per_partition.items():
        for name, parts in tables.items():
            table = pa.concat_tables(parts) if name == "entries" else pa.Table.from_pylist(parts, schema=schema.TABLES[name])
            rel = lake.part_path(name, new_part_name(ctx.run_id, batch), job, attempt)
            staged, size = lake.stage_table(table)
            result.staged.append(StagedFile(name, str(staged), rel, job, attempt, table.num_rows, size))
    return result


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


def _add_tables(tables, parsed: ParsedDump, dump_id, sha, ident, encoding, src: Source, size, run_id, now) -> None:
    n = parsed.n_entries
    columns = dict(parsed.entries)
    columns["dump_id"] = _const(dump_id, n, pa.int64())
    columns["rank"] = _const(ident.rank, n, pa.int32())
    columns["host"] = _const(ident.host, n, pa.string())
    tables.setdefault("entries", []).append(
        pa.Table.from_arrays([columns[f.name] for f in schema.ENTRIES], schema=schema.ENTRIES)
    )
    ident_cols = {"dump_id": dump_id, "rank": ident.rank, "host": ident.host}
    if parsed.groups:
        tables.setdefault("groups", []).extend({**ident_cols, **g} for g in parsed.groups)
    if parsed.pg_status:
        tables.setdefault("pg_status", []).extend({**ident_cols, **p} for p in parsed.pg_status)
    dump_row = {
        **ident_cols,
        "sha256": sha,
        "fr_version": parsed.version,
        "encoding": encoding,
        "comm_lib_version": parsed.comm_lib_version,
        "size_bytes": size,
        "n_entries": n,
        "n_groups": len(parsed.groups),
        **parsed.stats,
        "source_path": src.key,
        "source_mtime_ns": src.mtime_ns,
        "ingested_at": now,
        "run_id": run_id,
        "extra": parsed.extra,
    }
    tables.setdefault("dumps", []).append(dump_row)


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
