"""frlake query and frlake files: SQL over the lake, and what was ingested."""

from __future__ import annotations

from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, Format, FormatOpt, LakeOpt, emit_rows, err_console, open_session, user_errors


def query_command(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="One SELECT / WITH / EXPLAIN statement.")],
    fmt: FormatOpt = Format.table,
    timeout: Annotated[float, typer.Option(help="Seconds before the query is stopped.")] = 60.0,
    max_rows: Annotated[int, typer.Option(help="Rows returned at most.")] = 10_000,
    max_bytes: Annotated[int, typer.Option(help="Bytes returned at most (Arrow size).")] = 64 << 20,
    max_memory: Annotated[int, typer.Option(help="DuckDB memory limit in bytes; nothing spills to disk.")] = 1 << 30,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Run read-only SQL over the views entries, dumps, stacks, groups,
    pg_status, jobs, attempts, files and ingest_runs (docs/schema.md)."""
    from frlake.query.sandbox import QueryLimits, check_statement

    with user_errors():
        check_statement(sql)  # a refused statement is refused before anything is opened
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        result = session.query(sql, QueryLimits(timeout, max_rows, max_bytes, max_memory))
    emit_rows(result.columns, result.rows, fmt)
    if result.truncated:
        err_console.print(f"[yellow]only the first {len(result.rows):,} rows are shown (--max-rows, --max-bytes)[/]")


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
        records = session.catalog.files(status="rejected" if rejected else None, limit=limit)
    columns = ["path", "status", "reason", "detail", "job", "attempt", "host", "rank", "size", "sha256"]
    rows = [[getattr(r, c) for c in columns] for r in records]
    emit_rows(columns, rows, fmt)
