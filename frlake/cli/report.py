"""frlake report NAME: the fleet reports."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, Format, FormatOpt, LakeOpt, emit_json, emit_rows, settings, user_errors

DateOpt = Annotated[datetime | None, typer.Option(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"], show_default=False)]


class ReportName(str, Enum):
    flaky_hosts = "flaky-hosts"
    slow_ranks = "slow-ranks"
    hangs = "hangs"


def report_command(
    ctx: typer.Context,
    name: Annotated[ReportName, typer.Argument(help="flaky-hosts, slow-ranks or hangs.")],
    since: DateOpt = None,
    until: DateOpt = None,
    limit: Annotated[int | None, typer.Option(help="At most this many rows.")] = None,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Fleet questions over all history, each row with its evidence (jobs and
    attempts). --since/--until are dates (UTC, inclusive) of the attempts' start."""
    from frlake.query.reports import Window, run

    with user_errors():
        rows = run(settings(ctx, lake, db_url), name.value, Window(since, until), limit)
    if fmt is Format.json:
        emit_json(rows)
        return
    if not rows:
        emit_rows([], [], fmt)
        return
    columns = list(rows[0]) if fmt is Format.csv else TABLE_COLUMNS[name.value]
    table = [[_cell(r[c], fmt) for c in columns] for r in rows]
    emit_rows(columns, table, fmt)


# The columns a person reads in a terminal; csv and json carry all, evidence included.
TABLE_COLUMNS = {
    "flaky-hosts": ["host", "score", "attempts", "culprit_attempts", "rate", "by_reason"],
    "slow-ranks": ["job", "rank", "host", "lateness_ms", "p90_ms", "last_share", "straggler_attempts", "attempts_affected"],
    "hangs": ["attempts", "jobs", "reason", "op", "pg_desc", "hosts", "top_frame", "last_seen"],
}


def _cell(value, fmt: Format):
    """Evidence lists and maps, shortened for a table; whole for CSV."""
    if isinstance(value, list):
        if value and isinstance(value[0], dict):
            text = "; ".join(f"{v.get('job', '')}#{v.get('attempt')}" for v in value)
        else:
            text = ", ".join(map(str, value))
        return text if fmt is Format.csv or len(text) < 80 else text[:77] + "..."
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, datetime) and fmt is Format.table:
        return value.strftime("%Y-%m-%d %H:%M")
    return value
