"""frlake diagnose and frlake rediagnose."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.panel import Panel

from frlake.cli._common import (
    DbUrlOpt,
    Format,
    FormatOpt,
    LakeOpt,
    console,
    emit_json,
    emit_rows,
    open_session,
    print_detail,
)
from frlake.diagnose.words import detail_text, role_text, stack_label, waiting_text, weaker_text
from frlake.entities import Kind

if TYPE_CHECKING:
    from frlake.entities import Diagnosis



def diagnose_command(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job to diagnose.")],
    attempt: Annotated[int | None, typer.Option(help="The attempt (default: the latest).", min=0)] = None,
    complete: Annotated[bool, typer.Option(
        "--complete", help="No more dumps of this attempt will come: diagnose an attempt that is "
                           "waiting for more dumps with the ones there are (kept with its diagnosis).")] = False,
    fresh: Annotated[bool, typer.Option(
        "--fresh", help="Compute the diagnosis again, even when the one stored is current (made from the "
                        "attempt's dumps as they are, by this frlake's algorithm), which it always equals.")] = False,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Say what went wrong in an attempt and who caused it, root cause first.

    An ingest diagnoses the attempts it touched and stores the result: this
    shows it when it is current, and computes (and stores) it otherwise."""
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        diag = session.mark_complete(job, session.diagnose(job, attempt, store=False).attempt) if complete \
            else session.diagnose(job, attempt, reuse=not fresh)
        others = [] if fmt is not Format.table else [
            a for a in session.list_attempts(job=job, limit=OTHER_ATTEMPTS + 2)[1] if a.attempt != diag.attempt]
    if fmt in (Format.json, Format.ndjson):
        emit_json(diag.to_dict(), fmt)
    elif fmt is Format.csv:
        emit_rows(*_culprit_rows(diag), fmt)
    else:
        render_report(diag)
        _print_other_attempts(job, others)


OTHER_ATTEMPTS = 10  # the job's other attempts a report lists, newest first


def _print_other_attempts(job: str, others) -> None:
    """The job's other attempts, one line each: an attempt that hung before this one is part of the story."""
    if not others:
        return
    console.print(f"\n[bold]Other attempts of {escape(job)}[/], newest first (each: --attempt N):",
                  highlight=False)
    for a in others[:OTHER_ATTEMPTS]:
        cause = (f": rank {a.root_rank} on {a.root_host or 'an unknown host'} ({a.root_reason})"
                 if a.root_rank is not None and a.verdict != "healthy" else "")
        print_detail(f"attempt {a.attempt}: {a.verdict or 'not diagnosed yet'}{cause}")
    if len(others) > OTHER_ATTEMPTS:
        console.print(f"  ... and more: frlake query \"SELECT attempt, verdict FROM incidents WHERE job = "
                      f"'{escape(job)}'\"", highlight=False)


def rediagnose_command(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Option(help="Only this job's attempts.")] = None,
    workers: Annotated[int, typer.Option(help="Diagnosing processes (batches of small attempts; 1: this one). "
                                              "More can help many small attempts on a machine with idle cores; "
                                              "one is best for large attempts (figures: bench/README.md).",
                                         min=1)] = 1,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Recompute and store the diagnosis of every attempt in the lake (after
    frlake's algorithm improved)."""
    if workers > 1:
        from frlake.ingest.pool import pool_context

        pool_context()  # the workers' forkserver imports what they need while this process opens the catalog
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        results = session.rediagnose(job, workers=workers)
    rows = [[d.job, d.attempt, d.verdict.value, d.root.rank if d.root else None, d.root.host if d.root else None,
             d.root.reason if d.root else None] for d in results]
    emit_rows(["job", "attempt", "verdict", "rank", "host", "reason"], rows, fmt)


def _culprit_rows(diag: Diagnosis):
    columns = ["job", "attempt", "verdict", "position", "rank", "host", "reason", "role", "pg", "pg_desc", "seq", "op",
               "lateness_ms", "waiters", "waiting_for", "waited_by"]
    rows = [[diag.job, diag.attempt, diag.verdict.value, i, c.rank, c.host, c.reason, c.role, c.pg, c.pg_desc, c.seq, c.op,
             c.lateness_ms, c.waiters, c.waiting_for, c.waited_by] for i, c in enumerate(diag.culprits)]
    return columns, rows


def render_report(diag: Diagnosis) -> None:
    """The diagnosis as a short incident report a person can act on."""
    from frlake.cli._table import render

    style = diag.verdict.style
    console.print(Panel(escape(diag.summary), title=f"[bold {style}]{diag.verdict.value.upper()}[/]  {escape(diag.job)} attempt {diag.attempt}",
                        expand=False))
    console.print(f"{len(diag.ranks_dumped)} of {diag.world_size} ranks dumped"
                  + (f"; no dump from rank(s) {', '.join(map(str, diag.ranks_missing_dump))}" if diag.ranks_missing_dump else ""),
                  highlight=False)
    for line in diag.world_inferred:
        print_detail(line, lead="world inferred: ", lead_style="yellow")
    if diag.kind is not None:
        print_detail(diag.kind_why or "", lead=f"kind: {Kind(diag.kind).label}: ", lead_style="bold")
    if diag.waiting_for_dumps:
        console.print("Waiting for more dumps: ingest the other ranks' dumps, or run "
                      f"`frlake diagnose {diag.job} --attempt {diag.attempt} --complete` if no more will come.",
                      highlight=False)
    root = diag.root
    if root is None:
        return
    title = "Suspect (not a proven cause)" if root.role == "suspect" else "Root cause"
    inferred = (f" (host inferred from the ranks beside it: a {root.host_placement or 'weak'} placement)"
                if root.host_inferred else
                f" (its dump is in the folders of {', '.join(root.hosts_claimed)})" if root.hosts_claimed else "")
    console.print(f"\n[bold]{title}[/]: rank {root.rank} on [bold]{escape(root.host or 'an unknown host')}[/]{inferred} "
                  f"({root.reason})", highlight=False)
    if root.pg is not None:
        print_detail(f"where: process group {root.pg} ({root.pg_desc}), sequence id {root.seq}"
                     + (f", {root.op}" if root.op else ""))
    if root.waited_by:
        print_detail(f"waiting for it: {waiting_text(root.to_dict())}")
    if root.expected is not None:
        print_detail(f"expected {root.expected}, found {root.found}")
    weaker, extra = weaker_text(root.to_dict()), detail_text(root.to_dict())
    if root.lateness_ms is not None:  # the straggler's p-value is in its detail, said once
        console.print(f"  typically {root.lateness_ms:.1f} ms late"
                      + (f" (p = {root.p_value:.2g}, {root.effect_size:g} sd above the others)"
                         if root.p_value is not None and not extra else ""))
    if extra:  # the straggler's evidence, a suspect's reason, a weaker kind of evidence (labelled once)
        print_detail(extra, lead=f"{weaker}: " if weaker else "", lead_style="yellow")
    elif weaker:
        print_detail("", lead=weaker, lead_style="yellow")
    if root.stack:
        print_detail(f"FR stack of {stack_label(root.to_dict())} (innermost first, its own code first):")
        _print_frames(root.stack)
    if root.live_stack:
        live = root.live_stack
        console.print(f"  live stack from the debug server ({live.get('source')}, thread {live.get('thread')}, "
                      f"{format_ns(live.get('snapshot_ns'))}; innermost first):", highlight=False, markup=False)
        _print_frames(live.get("frames") or [])
    if len(diag.culprits) > 1:
        rows = [[c.rank, (c.host or "unknown") + (" (inferred)" if c.host_inferred else ""), role_text(c.to_dict()), waiting_text(c.to_dict()),
                 f"{c.pg_desc or ''} {c.pg or ''}".strip(), c.seq, c.op] for c in diag.culprits[1:20]]
        console.file.write("\n" + render(["rank", "host", "role", "waited for by", "group", "seq", "op"], rows,
                                         title="Also involved"))
        if len(diag.culprits) > 20:
            console.print(f"  ... and {len(diag.culprits) - 20} more (-f json lists them all)")
    behind = [g for g in diag.groups if g["behind"]]
    if behind:
        rows = [[f"{g['pg_desc'] or ''} {g['pg']}", len(g["ranks"]), g["frontier"],
                 ", ".join(f"{r}@{_seq(g['last_enqueued'][str(r)])}" for r in g["behind"][:16])] for g in behind[:20]]
        console.file.write("\n" + render(["group", "members", "furthest seq", "behind (rank@last seq)"], rows,
                                         title="Process groups that did not finish together"))


def _print_frames(frames: list[dict]) -> None:
    """The user's frames, then how many of torch's and Python's there are (-f json lists them)."""
    from frlake.entities import user_frames_first

    own, library = user_frames_first(frames)
    for f in (own or library)[:12]:
        short = "/".join(str(f.get("filename") or "").split("/")[-3:])
        console.print(f"    {f.get('name')}  {short}:{f.get('line')}", highlight=False, soft_wrap=True, markup=False)
    if own and library:
        console.print(f"    ... and {len(library)} frames of torch and Python (-f json lists them)", highlight=False)


def format_ns(ns: int | None) -> str:
    from datetime import UTC, datetime

    return "time unknown" if ns is None else datetime.fromtimestamp(ns / 1e9, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _seq(value: int | None) -> str:
    return "none" if value is None else str(value)
