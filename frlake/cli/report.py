"""frlake report NAME: the fleet reports."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, Format, FormatOpt, LakeOpt, emit_json, emit_rows, open_session
from frlake.query.reports import REPORTS

DateOpt = Annotated[datetime | None, typer.Option(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"], show_default=False)]


# Typer needs the choices as an Enum: made from the one registry of reports.
ReportName = Enum("ReportName", {name: name for name in REPORTS}, type=str)


def report_command(
    ctx: typer.Context,
    name: Annotated[ReportName, typer.Argument(help="; ".join(f"{r.name}: {r.question}" for r in REPORTS.values()))],
    since: DateOpt = None,
    until: DateOpt = None,
    limit: Annotated[int | None, typer.Option(help="At most this many rows.")] = None,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Fleet questions over all history, each row with its evidence (jobs and
    attempts). --since/--until are dates (UTC, inclusive) of the attempts' start."""
    from frlake.query.reports import Window

    with open_session(ctx, lake, db_url, must_exist=True) as session:
        rows = session.report(name.value, Window(since, until), limit)
    if fmt is Format.json:
        emit_json(rows)
        return
    if not rows:
        emit_rows([], [], fmt)
        return
    columns = list(rows[0]) if fmt is Format.csv else list(REPORTS[name.value].columns)
    table = [[_cell(r[c], fmt) for c in columns] for r in rows]
    emit_rows(columns, table, fmt)


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
