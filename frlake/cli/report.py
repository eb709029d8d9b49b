"""frlake report NAME: the fleet reports."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, Format, LakeOpt, emit_json, emit_rows, open_session
from frlake.query.reports import REPORTS

DateOpt = Annotated[datetime | None, typer.Option(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"], show_default=False)]


# Typer needs the choices as an Enum: made from the one registry of reports.
ReportName = Enum("ReportName", {name: name for name in REPORTS}, type=str)


class ReportFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    slurm = "slurm"  # drain only: the hosts to exclude, as Slurm's --exclude takes them


def report_command(
    ctx: typer.Context,
    name: Annotated[ReportName, typer.Argument(help="; ".join(f"{r.name}: {r.question}" for r in REPORTS.values()))],
    since: DateOpt = None,
    until: DateOpt = None,
    limit: Annotated[int | None, typer.Option(help="At most this many rows.")] = None,
    fmt: Annotated[ReportFormat, typer.Option("--format", "-f", help="Output format (slurm: drain only).")] = ReportFormat.table,
    explain: Annotated[str | None, typer.Option("--explain", metavar="HOST",
                                                help="drain: the evidence behind HOST and the arithmetic.")] = None,
    now: Annotated[datetime | None, typer.Option(help="drain: apply the policy as of this time (default: now).",
                                                 formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"],
                                                 show_default=False)] = None,
    half_life_days: Annotated[float, typer.Option(help="drain: evidence halves every this many days.")] = 14.0,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Fleet questions over all history, each row with its evidence (jobs and
    attempts). --since/--until are dates (UTC, inclusive) of the attempts' start.

    drain: which hosts (and GPUs) to avoid or exclude now, by a repeat-offender
    policy (docs/reports.md): -f slurm prints the hosts to exclude as
    host1,host2; --explain HOST prints the evidence and the arithmetic."""
    from frlake.query.reports import Window

    params = {}
    if name.value == "drain":
        from frlake.query.drain import DrainPolicy

        if now is not None and now.tzinfo is None:
            now = now.replace(tzinfo=UTC)
        params["policy"] = DrainPolicy(now=now, half_life_days=half_life_days)
    elif fmt is ReportFormat.slurm or explain:
        raise typer.BadParameter("--format slurm and --explain are for the drain report", param_hint="--format")
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        rows = session.report(name.value, Window(since, until), limit, **params)
    if explain is not None:
        from frlake.query.drain import explain as explain_row

        row = next((r for r in rows if r["host"] == explain), None)
        if row is None:
            typer.echo(f"{explain}: no evidence against it in this window (it is not on the drain list)")
            return
        typer.echo(explain_row(row, params["policy"]))
        return
    if fmt is ReportFormat.slurm:
        from frlake.query.drain import slurm_exclude

        typer.echo(slurm_exclude(rows))
        return
    fmt = Format(fmt.value)
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
        if value and isinstance(value[0], dict) and "gpu" in value[0]:
            text = ", ".join(f"GPU {v['gpu']} {v['action']}" for v in value)
        elif value and isinstance(value[0], dict):
            text = "; ".join(f"{v.get('job', '')}#{v.get('attempt')}" for v in value)
        else:
            text = ", ".join(map(str, value))
        return text if fmt is Format.csv or len(text) < 80 else text[:77] + "..."
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, datetime) and fmt is Format.table:
        return value.strftime("%Y-%m-%d %H:%M")
    return value
