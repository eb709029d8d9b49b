"""frlake diagnose and frlake rediagnose."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.panel import Panel
from rich.table import Table

from frlake.cli._common import DbUrlOpt, Format, FormatOpt, LakeOpt, console, emit_json, emit_rows, open_session

if TYPE_CHECKING:
    from frlake.diagnose import Diagnosis



def diagnose_command(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job to diagnose.")],
    attempt: Annotated[int | None, typer.Option(help="The attempt (default: the latest).", min=0)] = None,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Say what went wrong in an attempt and who caused it, root cause first."""
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        diag = session.diagnose(job, attempt)
    if fmt is Format.json:
        emit_json(diag.to_dict())
    elif fmt is Format.csv:
        emit_rows(*_culprit_rows(diag), fmt)
    else:
        render_report(diag)


def rediagnose_command(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Option(help="Only this job's attempts.")] = None,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Recompute and store the diagnosis of every attempt in the lake (after
    frlake's algorithm improved)."""
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        results = session.rediagnose(job)
    rows = [[d.job, d.attempt, d.verdict.value, d.root.rank if d.root else None, d.root.host if d.root else None,
             d.root.reason if d.root else None] for d in results]
    emit_rows(["job", "attempt", "verdict", "rank", "host", "reason"], rows, fmt)


def _culprit_rows(diag: Diagnosis):
    columns = ["job", "attempt", "verdict", "position", "rank", "host", "reason", "role", "pg", "pg_desc", "seq", "op",
               "lateness_ms"]
    rows = [[diag.job, diag.attempt, diag.verdict.value, i, c.rank, c.host, c.reason, c.role, c.pg, c.pg_desc, c.seq, c.op,
             c.lateness_ms] for i, c in enumerate(diag.culprits)]
    return columns, rows


def render_report(diag: Diagnosis) -> None:
    """The diagnosis as a short incident report a person can act on."""
    style = diag.verdict.style
    console.print(Panel(diag.summary, title=f"[bold {style}]{diag.verdict.value.upper()}[/]  {diag.job} attempt {diag.attempt}",
                        expand=False))
    console.print(f"{len(diag.ranks_dumped)} of {diag.world_size} ranks dumped"
                  + (f"; no dump from rank(s) {', '.join(map(str, diag.ranks_missing_dump))}" if diag.ranks_missing_dump else ""))
    root = diag.root
    if root is None:
        return
    title = "Suspect (the data cannot tell which member changed)" if root.role == "suspect" else "Root cause"
    console.print(f"\n[bold]{title}[/]: rank {root.rank} on [bold]{root.host or 'unknown host'}[/] ({root.reason})")
    if root.pg is not None:
        console.print(f"  where: process group {root.pg} ({root.pg_desc}), sequence id {root.seq}, {root.op}")
    if root.expected is not None:
        console.print(f"  expected {root.expected}, found {root.found}")
    if root.lateness_ms is not None:
        console.print(f"  typically {root.lateness_ms:.1f} ms late"
                      + (f" (p = {root.p_value:.2g}, {root.effect_size:g} sd above the others)"
                         if root.p_value is not None else ""))
    if root.stack:
        console.print("  stack (innermost first):")
        for f in root.stack[:12]:
            short = "/".join(str(f.get("filename") or "").split("/")[-3:])
            console.print(f"    {f.get('name')}  {short}:{f.get('line')}", highlight=False, soft_wrap=True)
    if len(diag.culprits) > 1:
        table = Table(title="Also involved", title_justify="left")
        for col in ("rank", "host", "reason", "role", "group", "seq", "op"):
            table.add_column(col)
        for c in diag.culprits[1:20]:
            table.add_row(str(c.rank), c.host or "?", c.reason, c.role, f"{c.pg_desc or ''} {c.pg or ''}",
                          "" if c.seq is None else str(c.seq), c.op or "")
        console.print(table)
    behind = [g for g in diag.groups if g["behind"]]
    if behind:
        table = Table(title="Process groups that did not finish together", title_justify="left")
        for col in ("group", "members", "furthest seq", "behind"):
            table.add_column(col)
        for g in behind[:20]:
            table.add_row(f"{g['pg_desc'] or ''} {g['pg']}", str(len(g["ranks"])), str(g["frontier"]),
                          ", ".join(f"{r}@{_seq(g['last_enqueued'][str(r)])}" for r in g["behind"][:16]))
        console.print(table)


def _seq(value: int | None) -> str:
    return "none" if value is None else str(value)
