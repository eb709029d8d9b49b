"""Run untrusted SQL: one read-only statement, no files outside the lake's
tables, a time limit and a row cap."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import duckdb

from frlake.errors import QueryError

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


@dataclass(frozen=True)
class QueryLimits:
    timeout_s: float = 30.0
    max_rows: int = 10_000


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple]
    truncated: bool
    seconds: float


def check_statement(sql: str) -> None:
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"the SQL does not parse: {exc}") from None
    if len(statements) != 1:
        raise QueryError(f"give exactly one statement, not {len(statements)}")
    kind = statements[0].type
    if kind not in ALLOWED:
        name = getattr(kind, "name", str(kind))
        raise QueryError(f"only SELECT, WITH and EXPLAIN queries are allowed; this is a {name} statement")


def lock_down(con: duckdb.DuckDBPyConnection, allowed_dirs: list[str]) -> None:
    """After the views exist: no file access but the lake's tables, no
    extensions, no Python objects, and no way to change this back."""
    listing = "[" + ", ".join("'" + d.replace("'", "''") + "'" for d in allowed_dirs) + "]"
    con.execute(f"SET allowed_directories = {listing}")
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET python_enable_replacements = false")
    con.execute("SET lock_configuration = true")


def run_limited(con: duckdb.DuckDBPyConnection, sql: str, limits: QueryLimits) -> QueryResult:
    """Run one checked statement with the time limit and row cap."""
    check_statement(sql)
    timer = threading.Timer(limits.timeout_s, con.interrupt)
    started = time.perf_counter()
    timer.start()
    try:
        cur = con.execute(sql)
        columns = [d[0] for d in cur.description] if cur.description else []
        rows = cur.fetchmany(limits.max_rows + 1)
    except duckdb.InterruptException:
        raise QueryError(f"the query ran longer than the {limits.timeout_s:g} s limit and was stopped") from None
    except duckdb.Error as exc:
        if time.perf_counter() - started >= limits.timeout_s:
            raise QueryError(f"the query ran longer than the {limits.timeout_s:g} s limit and was stopped") from None
        raise QueryError(_clean(exc)) from None
    finally:
        timer.cancel()
    truncated = len(rows) > limits.max_rows
    return QueryResult(columns, rows[: limits.max_rows], truncated, time.perf_counter() - started)


def _clean(exc: Exception) -> str:
    text = str(exc).strip()
    if "external access" in text.lower() or "allowed_directories" in text.lower() or "Permission Error" in text:
        return f"access outside the lake's tables is not allowed ({text.splitlines()[0]})"
    return text.splitlines()[0] if text else type(exc).__name__
