"""frlake report NAME: the fleet reports."""

from __future__ import annotations

from datetime import UTC, date, datetime
from enum import Enum
from typing import Annotated

import typer

from frlake.cli._common import (
    DbUrlOpt,
    Format,
    LakeOpt,
    emit_json,
    emit_rows,
    err_console,
    open_session,
    user_errors,
)
from frlake.errors import UsageError
from frlake.query.reports import REPORTS
from frlake.query.window import WHEN_HINT, parse_when

WhenOpt = Annotated[str | None, typer.Option(
    help="An ISO 8601 date (a whole day, UTC), a date-time with its offset, e.g. 2026-11-29 or "
         "2026-11-29T14:00:00+01:00 (without an offset: UTC), or a time back from now: 7d, 12h.",
    show_default=False)]


# Typer needs the choices as an Enum: made from the one registry of reports.
ReportName = Enum("ReportName", {name: name for name in REPORTS}, type=str)


def _report_name(text: str) -> ReportName:
    """The report a NAME names (a text argument checked here, so that the usage line reads ``NAME``, as
    click's own usage lines do, and the choices are listed below it)."""
    try:
        return ReportName(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not one of {', '.join(map(repr, REPORTS))}") from None
# The output formats of every command, and slurm: the drain list's hosts to exclude, as Slurm's --exclude takes them.
ReportFormat = Enum("ReportFormat", {**{f.name: f.value for f in Format}, "slurm": "slurm"}, type=str)


def _when(name: str, text: str | None) -> date | datetime | None:
    """An ISO 8601 date or date-time, or a duration back from now (7d, 12h: as forget --older-than)."""
    if text is None:
        return None
    try:
        return parse_when(text)
    except ValueError:
        raise UsageError(f"--{name} must be {WHEN_HINT}, not {text!r}") from None


def report_command(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(
        metavar="NAME", callback=_report_name,
        help="One of: " + "; ".join(f"{r.name}: {r.question}" for r in REPORTS.values()))],
    since: WhenOpt = None,
    until: WhenOpt = None,
    limit: Annotated[int | None, typer.Option(help="At most this many rows.", min=1)] = None,
    fmt: Annotated[ReportFormat, typer.Option("--format", "-f", help="Output format (slurm: drain only).")] = "table",
    explain: Annotated[str | None, typer.Option("--explain", metavar="HOST",
                                                help="drain: the evidence behind HOST and the arithmetic.")] = None,
    now: Annotated[str | None, typer.Option(help="drain: apply the policy as of this ISO 8601 time (default: now).",
                                            show_default=False)] = None,
    half_life_days: Annotated[float, typer.Option(help="drain: evidence halves every this many days.")] = 14.0,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Fleet questions over all history, each row with its evidence (jobs and
    attempts). --since/--until bound the attempts' start, both inclusive. A
    terminal table shows the report's main columns (those that fit); CSV,
    JSON and NDJSON carry every column, evidence included.

    drain: which hosts (and GPUs) to avoid or exclude now, by a repeat-offender
    policy (docs/reports.md): -f slurm prints the hosts to exclude as
    host1,host2; --explain HOST prints the evidence and the arithmetic."""
    from frlake.query.window import Window

    params = {}
    with user_errors():
        window = Window(_when("since", since), _when("until", until))
        if name.value == "drain":
            from frlake.query.drain import DrainPolicy

            when = _when("now", now)
            if isinstance(when, datetime) and when.tzinfo is None:
                when = when.replace(tzinfo=UTC)
            elif when is not None and not isinstance(when, datetime):
                when = datetime.combine(when, datetime.min.time(), tzinfo=UTC)
            params["policy"] = DrainPolicy(now=when, half_life_days=half_life_days)
        elif fmt.value == "slurm" or explain or now:
            raise UsageError("--format slurm, --explain and --now are for the drain report")
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        rows = session.report(name.value, window, limit, **params)
    if explain is not None:
        from frlake.query.drain import explain as explain_row

        row = next((r for r in rows if r["host"] == explain), None)
        if row is None:
            typer.echo(f"{explain}: no evidence against it in this window (it is not on the drain list)")
            return
        typer.echo(explain_row(row, params["policy"]))
        return
    if fmt.value == "slurm":
        from frlake.query.drain import slurm_exclude

        typer.echo(slurm_exclude(rows))
        return
    out = Format(fmt.value)
    if out in (Format.json, Format.ndjson):
        emit_json(list(rows), out)
    else:
        columns = list(rows.columns) if out is Format.csv else list(REPORTS[name.value].columns)
        table = [[r[c] if out is Format.csv else _cell(r[c]) for c in columns] for r in rows]
        emit_rows(columns, table, out, title=REPORTS[name.value].title if out is Format.table else None)
    if not rows:  # why, on stderr: what the report's page says (standard output stays the format's)
        err_console.print(REPORTS[name.value].empty, highlight=False, markup=False, soft_wrap=True)
    covered = getattr(rows, "coverage_words", lambda: None)()
    if covered:  # a report of hosts sees only the attempts whose hosts are known: said on stderr
        err_console.print(covered, highlight=False, markup=False, soft_wrap=True)


def _cell(value):
    """Evidence lists and maps, shortened for a table."""
    if isinstance(value, list):
        if value and isinstance(value[0], dict) and "gpu" in value[0]:
            return ", ".join(f"GPU {v['gpu']} {v['action']}" for v in value)
        if value and isinstance(value[0], dict):
            return "; ".join(f"{v.get('job', '')}#{v.get('attempt')}" for v in value)
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, datetime):
        return (value.strftime("%Y-%m-%d %H:%M") + (value.strftime(" %Z") if value.tzinfo else " UTC"))
    return value
