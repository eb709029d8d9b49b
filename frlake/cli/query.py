"""frlake query and frlake files: SQL over the lake, and what was ingested."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, Format, FormatOpt, LakeOpt, emit_rows, err_console, open_session, user_errors
from frlake.query.names import VIEW_NAMES

TABLE_ROWS = 40  # rows a terminal table shows (the first and last ones), as DuckDB's shell does


def query_help() -> str:
    kinds = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in VIEW_NAMES.items())
    return ("Run one read-only SELECT / WITH / EXPLAIN over the views (columns and their meaning in "
            f"docs/schema.md).\n\nViews: {kinds}.\n\n"
            "A terminal table shows the columns that fit and the first and last rows; -f csv, json or ndjson "
            "give every row and column.")


def query_command(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="One SELECT / WITH / EXPLAIN statement; - reads it from standard "
                                            "input.")],
    fmt: FormatOpt = Format.table,
    timeout: Annotated[float, typer.Option(help="Seconds before the query is stopped.")] = 60.0,
    max_rows: Annotated[int, typer.Option(help="Rows returned at most; 0 for no row limit (--max-bytes still "
                                               "applies).", min=0)] = 10_000,
    max_bytes: Annotated[int, typer.Option(help="Bytes returned at most (Arrow size).", min=1)] = 64 << 20,
    max_memory: Annotated[int, typer.Option(help="DuckDB memory limit in bytes; nothing spills to disk.",
                                            min=1)] = 1 << 30,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    from frlake.query.sandbox import UNLIMITED_ROWS, QueryLimits, check_statement

    if sql == "-":
        sql = sys.stdin.read()
    with user_errors():
        check_statement(sql)  # a refused statement is refused before anything is opened
        limits = QueryLimits(timeout, max_rows or UNLIMITED_ROWS, max_bytes, max_memory)
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        result = session.query(sql, limits)
    emit_rows(result.columns, result.rows, fmt, max_shown=TABLE_ROWS, types=result.types)
    if result.truncated:
        err_console.print(f"[yellow]only the first {len(result.rows):,} rows are returned (--max-rows, --max-bytes)[/]")


def files_command(
    ctx: typer.Context,
    rejected: Annotated[bool, typer.Option("--rejected", help="Only the files set aside, with why.")] = False,
    limit: Annotated[int | None, typer.Option(help="Show at most this many.")] = None,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """List the files seen: ingested, already present (duplicate) or rejected and why."""
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        records = session.files(status="rejected" if rejected else None, limit=limit)
    # The columns a person reads first come first: a narrow terminal keeps them.
    columns = ["path", "status", "reason", "job", "attempt", "rank", "host", "detail", "size", "sha256"]
    rows = [[getattr(r, c) for c in columns] for r in records]
    emit_rows(columns, rows, fmt)
