"""frlake jobs [PATTERN]: find a job's attempts, as the web UI's jobs page and its search box do."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, Format, FormatOpt, LakeOpt, emit_rows, err_console, open_session
from frlake.entities import VERDICTS

COLUMNS = ["job", "attempt", "verdict", "root_cause", "hosts", "started"]
VerdictName = Enum("VerdictName", {v: v for v in VERDICTS}, type=str)  # typer's choices


def jobs_command(
    ctx: typer.Context,
    pattern: Annotated[str | None, typer.Argument(
        help="A part of a job's or a host's name (any case), or a verdict (" + ", ".join(VERDICTS)
             + "); without it, every attempt.", show_default=False)] = None,
    verdict: Annotated[VerdictName | None, typer.Option(help="Only the attempts with this verdict.",
                                                        show_default=False)] = None,
    limit: Annotated[int, typer.Option(help="Show at most this many attempts, the newest.", min=1)] = 50,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """List the attempts whose job or host matches PATTERN, newest first, with their verdict, root cause,
    hosts and start: the web UI's jobs page searched for PATTERN (/?q=PATTERN). One attempt's diagnosis:
    frlake diagnose JOB --attempt N."""
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        total, rows = session.list_attempts(q=pattern, verdict=verdict and verdict.value, limit=limit)
    listed = fmt in (Format.json, Format.ndjson)  # hosts: a list in JSON, one text elsewhere
    table = [[a.job, a.attempt, a.verdict, _root(a), list(a.hosts) if listed else " ".join(a.hosts),
              _started(a.started_ns)] for a in rows]
    emit_rows(COLUMNS, table, fmt)
    if total > len(rows):  # on stderr: standard output stays the format's
        err_console.print(f"the newest {len(rows)} of {total} matching attempts (--limit)", highlight=False)
    elif not rows:
        err_console.print("no attempt matches" + (f" {pattern!r}" if pattern else ""), highlight=False,
                          markup=False)


def _root(a) -> str | None:
    if a.root_rank is None:
        return None
    return f"rank {a.root_rank} on {a.root_host or 'an unknown host'} ({a.root_reason})"


def _started(ns: int | None):
    from datetime import UTC, datetime

    return None if ns is None else datetime.fromtimestamp(ns / 1e9, tz=UTC)
