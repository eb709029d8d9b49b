"""frlake report NAME: the fleet reports."""

from __future__ import annotations

from datetime import date, datetime
from enum import Enum
from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, Format, FormatOpt, LakeOpt, emit_json, emit_rows, open_session, user_errors
from frlake.errors import FrlakeError
from frlake.query.reports import REPORTS, parse_when

WhenOpt = Annotated[str | None, typer.Option(
    help="An ISO 8601 date (a whole day, UTC) or date-time with its offset, e.g. 2026-11-29 or "
         "2026-11-29T14:00:00+01:00 (without an offset: UTC).", show_default=False)]


# Typer needs the choices as an Enum: made from the one registry of reports.
ReportName = Enum("ReportName", {name: name for name in REPORTS}, type=str)


def _when(name: str, text: str | None) -> date | datetime | None:
    if text is None:
        return None
    try:
        return parse_when(text)
    except ValueError:
        raise FrlakeError(f"--{name} must be an ISO 8601 date or date-time such as 2026-11-29 or "
                          f"2026-11-29T14:00:00+01:00, not {text!r}") from None


def report_command(
    ctx: typer.Context,
    name: Annotated[ReportName, typer.Argument(help="; ".join(f"{r.name}: {r.question}" for r in REPORTS.values()))],
    since: WhenOpt = None,
    until: WhenOpt = None,
    limit: Annotated[int | None, typer.Option(help="At most this many rows.", min=1)] = None,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Fleet questions over all history, each row with its evidence (jobs and
    attempts). --since/--until bound the attempts' start, both inclusive. A
    terminal table shows the report's main columns (those that fit); CSV,
    JSON and NDJSON carry every column, evidence included."""
    from frlake.query.reports import Window

    with user_errors():
        window = Window(_when("since", since), _when("until", until))
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        rows = session.report(name.value, window, limit)
    if fmt in (Format.json, Format.ndjson):
        emit_json(list(rows), fmt)
        return
    columns = list(rows.columns) if fmt is Format.csv else list(REPORTS[name.value].columns)
    table = [[r[c] if fmt is Format.csv else _cell(r[c]) for c in columns] for r in rows]
    emit_rows(columns, table, fmt, title=REPORTS[name.value].title if fmt is Format.table else None)


def _cell(value):
    """Evidence lists and maps, shortened for a table."""
    if isinstance(value, list):
        if value and isinstance(value[0], dict):
            return "; ".join(f"{v.get('job', '')}#{v.get('attempt')}" for v in value)
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, datetime):
        return (value.strftime("%Y-%m-%d %H:%M") + (value.strftime(" %Z") if value.tzinfo else " UTC"))
    return value
