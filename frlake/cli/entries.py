"""frlake entries: one attempt's collectives, ranks side by side (torch's -j,
--selected-ranks, --pg-filters), and where the ranks stand at the hang."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

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
from frlake.diagnose.words import hosts_text, ranks_text

if TYPE_CHECKING:
    from frlake.query.side_by_side import Cell

_STATE = {"completed": "C", "started": "S", "scheduled": "Q"}
HUNG_REASONS = ("missing", "no_dump")  # a root cause at a collective that never completed


def entries_command(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job.")],
    attempt: Annotated[int | None, typer.Option(help="The attempt (default: the latest).", min=0)] = None,
    ranks: Annotated[str | None, typer.Option(help="Only these ranks, e.g. 0,1,8-15.")] = None,
    pg: Annotated[list[str] | None, typer.Option("--pg", help="Only this process group (name or description); "
                                                             "repeat for more.")] = None,
    seq: Annotated[str | None, typer.Option(help="A window of sequence ids: A:B, A: or :B.")] = None,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Each collective with the chosen ranks side by side: C completed, S
    started, Q scheduled, and how late each rank arrived (ms after the
    first); '-' where a member has no entry, blank where the rank is not a
    member of the group. Then, at the hang, which ranks
    stand at another frame than the rest.

    Without --ranks, an attempt of more than 32 ranks shows the culprits and
    the hung group's members nearest them, in that group's collectives (the
    last 2,000 at most)."""
    from frlake.query.side_by_side import EntryFilter, state_legend

    with open_session(ctx, lake, db_url, must_exist=True) as session:
        lo, hi = _seq(seq)
        flt = EntryFilter(ranks=_ranks(ranks), pgs=tuple(pg) if pg else None, seq_from=lo, seq_to=hi)
        view = session.entries(job, attempt, flt)
        diff = session.stack_diff(job, view.attempt)
        root = session.stored_diagnosis(job, view.attempt).root
    at = (root.pg, root.seq) if root is not None and root.reason in HUNG_REASONS else None
    if fmt is Format.json:
        emit_json({**view.to_dict(), "stacks": [g.to_dict() for g in diff]})
        return
    ranks_shown = [r.rank for r in view.ranks]
    table = fmt is Format.table  # a person reads "op 2 of 2" beside the op; a program gets a column "part"
    columns = ["pg", "seq", *([] if table else ["part"]), "op", "agree", *[f"r{r}" for r in ranks_shown]]
    rows = []
    for c in view.collectives:
        cells = [_cell(c.cells.get(r), fmt) if r in c.members else "" for r in ranks_shown]
        agree = "HANG" if (c.pg, c.seq) == at else "yes" if c.agree and not c.missing else "NO"
        rows.append([f"{c.pg_desc or ''} {c.pg}".strip(), c.seq, *([c.label] if table else [c.part, c.op]), agree,
                     *cells])
    count = len({(c.pg, c.seq) for c in view.collectives})
    emit_rows(columns, rows, fmt, title=f"{view.job} attempt {view.attempt}: {count} collectives")
    if fmt is Format.table:
        if view.truncated:
            console.print(f"[yellow]only the last {len(rows)} collectives (those nearest the hang) are shown: "
                          "narrow with --seq, --pg or --ranks[/]")
        if view.ranks_truncated:
            groups = f" in group {', '.join(view.pgs)}" if view.pgs and not pg else ""
            console.print(f"[yellow]ranks: {len(ranks_shown)} of {view.ranks_total}, the culprits and the ranks "
                          f"nearest them{escape(groups)}: choose others with --ranks and --pg[/]")
        console.print(f"A cell: the rank's state ({state_legend(view)}) and when it arrived, in ms "
                      "after the group's first member; - no entry (it never joined); blank: not a member. "
                      "agree: HANG is the collective the diagnosis says hangs; NO, the members disagree on op, "
                      "sizes or dtypes, or one is missing.", highlight=False)
        console.print("\n[bold]Where the ranks stand[/] (first unfinished entry, else the last), by stack, op and group:")
        for g in diff[:20]:
            print_detail(f"rank{'s' if len(g.ranks) > 1 else ''} {ranks_text(g.ranks)} "
                         f"({hosts_text(g.hosts) or 'unknown host'}): "
                         f"{g.op or '?'} in {g.pg_desc or ''} {g.pg or ''} at {g.top_frame or 'no stack'}",
                         lead="another frame than the rest: " if g.odd_one_out else "")
        if len(diff) > 20:
            console.print(f"  ... and {len(diff) - 20} more stacks (-f json lists them all)")


def _cell(cell: Cell | None, fmt: Format) -> str:
    if cell is None:
        return "-"
    if fmt is Format.table:
        return f"{_STATE.get(cell.state, '?')}{cell.late_ms:+.1f}"
    return f"{cell.state} {cell.late_ms} {cell.sizes}"


def _ranks(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())):
            raise typer.BadParameter(f"ranks are like 0,1,8-15, not {text!r}", param_hint="--ranks")
        out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return tuple(sorted(set(out)))


def _seq(text: str | None) -> tuple[int | None, int | None]:
    from frlake.query.side_by_side import EntryFilter

    try:
        return EntryFilter.parse_seq(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--seq") from None


