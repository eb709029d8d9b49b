"""Run untrusted SQL: one query that only reads (frlake.query.statements), on
a DuckDB database that can open no file and whose configuration is locked,
with a time limit, a memory limit and a cap on the rows and bytes returned.

Layers, each enough on its own against writing into the lake:
1. ``check_statement``: DuckDB's parser must see a query, also under EXPLAIN
   ANALYZE (which runs what it explains), with no function that runs SQL text
   or changes state.
2. ``lock_down``: external access off and no directory allowed (the lake's
   tables are read through Arrow datasets, see ``create_views(sealed=True)``),
   no temp directory (DuckDB lets SQL write into it), locked configuration.
3. ``Sandbox.run``: each query runs on its own cursor, closed afterwards, so
   temporary tables, views, macros and variables vanish with it; the shared
   catalog is compared before and after, and a sandbox whose views changed is
   closed and never used again (a ``single_use`` sandbox is closed after its
   one query)."""

from __future__ import annotations

import resource
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from frlake.errors import QueryError, ResultTooLarge
from frlake.query.statements import check_statement

GiB = 1 << 30
MiB = 1 << 20
UNLIMITED_ROWS = 1 << 62  # max_rows without a row limit (the byte cap still holds)
_BATCH_ROWS = 1024  # rows per Arrow batch: how far a result may overshoot max_bytes

__all__ = ["UNLIMITED_ROWS", "QueryLimits", "QueryResult", "Sandbox", "check_statement", "lock_down", "run_limited"]


@dataclass(frozen=True)
class QueryLimits:
    timeout_s: float = 30.0
    max_rows: int = 10_000
    max_bytes: int = 64 * MiB  # of the result, measured as Arrow record batches
    max_memory: int = 1 * GiB  # DuckDB's memory_limit for the sandbox; nothing spills to disk

    def __post_init__(self):
        for name in ("timeout_s", "max_rows", "max_bytes", "max_memory"):
            if not getattr(self, name) > 0:
                raise ValueError(f"QueryLimits.{name} must be positive, not {getattr(self, name)!r}")


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    truncated: bool
    seconds: float
    bytes: int = 0  # Arrow size of the record batches read
    types: list[str] = field(default_factory=list)  # each column's SQL type (BIGINT, VARCHAR[], ...)


def lock_down(con: duckdb.DuckDBPyConnection, limits: QueryLimits = QueryLimits()) -> None:
    """After the views exist: no file of any folder (the lake's tables
    included), no temp directory, no extensions, no Python objects, a memory
    limit, and no way to change any of it back."""
    # No spilling: DuckDB lets SQL write files into its temp directory even with
    # external access off, so there is none and memory_limit is the whole budget.
    con.execute("SET temp_directory = ''")
    con.execute("SET allowed_directories = []")
    con.execute("SET allowed_paths = []")
    con.execute("SET enable_external_access = false")
    con.execute(f"SET memory_limit = '{int(limits.max_memory)}B'")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET allow_community_extensions = false")
    con.execute("SET python_enable_replacements = false")
    con.execute("SET lock_configuration = true")


class Sandbox:
    """A locked-down DuckDB database over the lake's views, for untrusted SQL.

    Built by ``frlake.query.open_sandbox``; holds the connection that owns the
    views and the Python objects they read (registered again on each query's
    cursor). Not for use by two threads at once."""

    def __init__(self, con: duckdb.DuckDBPyConnection, sources: dict[str, object], limits: QueryLimits, *,
                 single_use: bool = False):
        self.con = con
        self.limits = limits
        self._sources = sources
        # A sandbox for one query is closed after it: what it might change, no other query sees, so its
        # views need no comparing (listing DuckDB's catalog costs about 20 ms).
        self._baseline = None if single_use else catalog_state(con)
        self.closed = False

    def run(self, sql: str, limits: QueryLimits | None = None, offset: int = 0) -> QueryResult:
        """Check ``sql`` and run it with the time limit and the caps, from its row ``offset`` on (the
        next page of a result cut at a cap: the rows before it are computed and dropped as they stream)."""
        check_statement(sql)
        return self.run_unchecked(sql, limits, offset)

    def run_unchecked(self, sql: str, limits: QueryLimits | None = None, offset: int = 0) -> QueryResult:
        """Run ``sql`` without the parser check: the sandbox's other layers
        alone (tests use it to show they hold without the check)."""
        if self.closed:
            raise QueryError("this sandbox was closed; open a new one")
        limits = limits or self.limits
        if limits.max_memory != self.limits.max_memory:
            raise QueryError("the memory limit is set when the sandbox is opened; open one with these limits")
        cur = self.con.cursor()
        try:
            for name, obj in self._sources.items():
                cur.register(name, obj)
            return _fetch_limited(cur, sql, limits, offset)
        finally:
            cur.close()
            if self._baseline is None:
                self.close()
            elif catalog_state(self.con) != self._baseline:
                self.close()
                raise QueryError("the query changed the sandbox's views; the sandbox was closed")

    def close(self) -> None:
        self.closed = True
        self.con.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        if not self.closed:
            self.close()


def catalog_state(con: duckdb.DuckDBPyConnection) -> list[tuple]:
    """Everything a query could create or replace that another query sees:
    databases, schemas, tables, views, sequences, types and macros."""
    return con.execute("""
        SELECT 'database', database_name, '', path FROM duckdb_databases()
        UNION ALL SELECT 'schema', database_name, schema_name, '' FROM duckdb_schemas()
        UNION ALL SELECT 'table', database_name, schema_name || '.' || table_name, sql FROM duckdb_tables()
        UNION ALL SELECT 'view', database_name, schema_name || '.' || view_name, sql FROM duckdb_views()
        UNION ALL SELECT 'sequence', database_name, schema_name || '.' || sequence_name, sql FROM duckdb_sequences()
        UNION ALL SELECT 'type', database_name, schema_name || '.' || type_name, '' FROM duckdb_types() WHERE NOT internal
        UNION ALL SELECT 'macro', database_name, schema_name || '.' || function_name, macro_definition
            FROM duckdb_functions() WHERE NOT internal
        ORDER BY ALL
    """).fetchall()


def run_limited(con: duckdb.DuckDBPyConnection, sql: str, limits: QueryLimits) -> QueryResult:
    """Check ``sql`` and run it on ``con`` itself with the time limit and the
    row and byte caps (a ``Sandbox`` adds a cursor per query and the catalog
    check; prefer it)."""
    check_statement(sql)
    return _fetch_limited(con, sql, limits)


def _fetch_limited(cur: duckdb.DuckDBPyConnection, sql: str, limits: QueryLimits, offset: int = 0) -> QueryResult:
    """The query's result under its limits, the process' memory bound (:class:`ProcessMemory`) held while it
    is computed and converted to rows."""
    with PROCESS_MEMORY.bound(limits.max_memory):
        try:
            return _fetch_bounded(cur, sql, limits, offset)
        except MemoryError:  # Python's or Arrow's own allocation at the bound
            raise QueryError(_memory_message(limits)) from None


def _fetch_bounded(cur: duckdb.DuckDBPyConnection, sql: str, limits: QueryLimits, offset: int) -> QueryResult:
    timer = threading.Timer(limits.timeout_s, cur.interrupt)
    started = time.perf_counter()
    timer.start()
    try:
        relation = cur.sql(sql)  # streams: rows past the caps are never computed
        columns = list(relation.columns) if relation is not None else []
        types = [str(t) for t in relation.types] if relation is not None else []
        batches, size, truncated = _read_capped(relation, limits, offset) if relation is not None else ([], 0, False)
    except duckdb.InterruptException:
        raise QueryError(_timeout_message(limits)) from None
    except (duckdb.OutOfMemoryException, MemoryError):
        raise QueryError(_memory_message(limits)) from None
    except duckdb.Error as exc:
        if time.perf_counter() - started >= limits.timeout_s:
            raise QueryError(_timeout_message(limits)) from None
        raise QueryError(_clean(exc)) from None
    except (OSError, pa.ArrowException) as exc:  # DuckDB's errors, as Arrow's reader of its batches raises them
        if _TOO_LARGE in str(exc):
            raise ResultTooLarge(_too_large_message(limits)) from None
        if "ArrowBuffer" in str(exc):  # the result's own batches could not be allocated within the bound
            raise ResultTooLarge(_too_large_message(limits, "its batches need more than the "
                                                    f"{_size(limits.max_memory)} memory limit")) from None
        if "Out of Memory" in str(exc) or isinstance(exc, pa.ArrowMemoryError):
            raise QueryError(_memory_message(limits)) from None
        raise QueryError(_clean(exc)) from None
    finally:
        timer.cancel()
    rows = _rows(batches, len(columns))
    if len(rows) > limits.max_rows:
        rows, truncated = rows[: limits.max_rows], True
    return QueryResult(columns, rows, truncated, time.perf_counter() - started, size, types)


def _read_capped(relation: duckdb.DuckDBPyRelation, limits: QueryLimits,
                 skip: int = 0) -> tuple[list[pa.RecordBatch], int, bool]:
    """Arrow batches up to max_rows + 1 rows and max_bytes bytes, after the first ``skip`` rows (dropped,
    never held); the reader is closed there, so the rest of the result is never computed."""
    reader = relation.to_arrow_reader(_BATCH_ROWS)
    batches, rows, size = [], 0, 0
    try:
        for batch in reader:
            if skip:
                dropped = min(skip, batch.num_rows)
                skip -= dropped
                batch = batch.slice(dropped)
                if not batch.num_rows:
                    continue
            if batch.nbytes > limits.max_bytes - size:
                keep = _rows_that_fit(batch, limits.max_bytes - size)
                if keep:
                    batches.append(batch.slice(0, keep))
                    size += batches[-1].nbytes
                return batches, size, True
            batches.append(batch)
            rows += batch.num_rows
            size += batch.nbytes
            if rows > limits.max_rows:
                return batches, size, False  # the extra row marks the truncation
        return batches, size, False
    finally:
        reader.close()


def _rows_that_fit(batch: pa.RecordBatch, room: int) -> int:
    lo, hi = 0, batch.num_rows  # the most leading rows whose slice fits in room bytes
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if batch.slice(0, mid).nbytes <= room:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _rows(batches: list[pa.RecordBatch], width: int) -> list[tuple]:
    if not batches or width == 0:
        return []
    table = pa.Table.from_batches(batches)
    return list(zip(*(column.to_pylist() for column in table.columns)))


def _memory_message(limits: QueryLimits) -> str:
    return (f"the query went over the {_size(limits.max_memory)} memory limit and was stopped "
            "(aggregate or filter more, or select fewer columns)")


# What a process may hold beyond its queries' budgets while they run: with its own base (about 200 MB)
# within 256 MiB over the budget.
MARGIN = 128 * MiB


class ProcessMemory:
    """The bound on what users' queries make the process hold. DuckDB's memory_limit bounds its buffer pool,
    not the values a query makes (``repeat('x', 1000000000)`` is 1 GiB that no pool holds: 3.1 GB resident
    under a 1 GiB limit), so while queries run the process' data segment (RLIMIT_DATA: its heap and private
    mappings, what becomes resident) is held to what it was when the first began, plus each running query's
    budget, plus MARGIN; an allocation beyond fails, and DuckDB and Arrow stop the query with an
    out-of-memory error. The limit is the process', so every thread of it is bound while queries run: a
    server runs at most ``--max-queries`` of them at once. Without RLIMIT_DATA (not Linux) DuckDB's
    memory_limit is the only bound."""

    def __init__(self):
        self._lock = threading.Lock()
        self._budgets: list[int] = []
        self._base = 0
        self._saved: tuple[int, int] | None = None

    @contextmanager
    def bound(self, budget: int):
        with self._lock:
            if not self._budgets:
                self._base, self._saved = _data_bytes(), _get_data_limit()
            self._budgets.append(budget)
            self._apply()
        try:
            yield
        finally:
            with self._lock:
                self._budgets.remove(budget)
                if self._budgets:
                    self._apply()
                elif self._saved is not None:
                    _set_data_limit(self._saved)

    def _apply(self) -> None:
        if self._saved is None or self._base is None:
            return
        soft, hard = self._saved
        wanted = self._base + sum(self._budgets) + MARGIN
        if soft != resource.RLIM_INFINITY:
            wanted = min(wanted, soft)  # never above what the process was given
        if hard != resource.RLIM_INFINITY:
            wanted = min(wanted, hard)
        _set_data_limit((wanted, hard))


def _data_bytes() -> int | None:
    """The process' data segment (VmData), or None where /proc does not say."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _get_data_limit() -> tuple[int, int] | None:
    try:
        return resource.getrlimit(resource.RLIMIT_DATA)
    except (AttributeError, OSError, ValueError):
        return None


def _set_data_limit(limit: tuple[int, int]) -> None:
    try:
        resource.setrlimit(resource.RLIMIT_DATA, limit)
    except (OSError, ValueError):
        pass


PROCESS_MEMORY = ProcessMemory()

# DuckDB's Arrow appender refuses a batch whose text is over 2 GiB (one column of _BATCH_ROWS rows).
_TOO_LARGE = "maximum total string size"


def _too_large_message(limits: QueryLimits, why: str = "") -> str:
    why = why or f"over 2 GiB of text in one batch of {_BATCH_ROWS:,} rows"
    return (f"result_too_large: the result is too large to return ({why}), where at most "
            f"{_size(limits.max_bytes)} is returned (--max-bytes); aggregate it (count(*), length(s), "
            "left(s, 100)) or select fewer rows")


def _timeout_message(limits: QueryLimits) -> str:
    return f"the query ran longer than the {limits.timeout_s:g} s limit and was stopped"


def _size(n: int) -> str:
    return f"{n / GiB:g} GiB" if n >= GiB else f"{n / MiB:g} MiB"


def _clean(exc: Exception) -> str:
    """DuckDB's message whole, with its hints ("Did you mean ...", the
    candidate bindings, the line with a caret under the error), without the
    blank lines and the stack trace some builds append."""
    text = str(exc).strip()
    lowered = text.lower()
    if "external access" in lowered or "allowed_directories" in lowered or "Permission Error" in text:
        return ("the sandbox opens no file: query the views instead (access outside the lake's "
                f"tables is not allowed: {text.splitlines()[0]})")
    lines = [line.rstrip() for line in text.split("\n")]
    if "Stack Trace" in text:
        lines = lines[: next(i for i, line in enumerate(lines) if "Stack Trace" in line)]
    lines = [line for line in lines if line.strip()][:12]
    return "\n".join(lines) if lines else type(exc).__name__
