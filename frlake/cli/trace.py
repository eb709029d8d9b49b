"""frlake trace: a window of one attempt as a Chrome/Perfetto trace file."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, LakeOpt, err_console, open_session
from frlake.cli.entries import _ranks


def trace_command(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="The job.")],
    attempt: Annotated[int | None, typer.Option(help="The attempt (default: the latest).", min=0)] = None,
    ranks: Annotated[str | None, typer.Option(help="Only these ranks, e.g. 0,1,8-15 (default: the culprits and "
                                                   "the members of the hung group nearest them).")] = None,
    pg: Annotated[list[str] | None, typer.Option("--pg", help="Only this process group (name or description); "
                                                             "repeat for more.")] = None,
    around: Annotated[int | None, typer.Option(help="Only N collectives of the hung group on each side of the "
                                                    "hang (default: the whole time line).", min=0)] = None,
    max_events: Annotated[int, typer.Option("--max-events", help="At most this many trace events (those "
                                                                  "nearest the hang are kept).", min=1)] = 100_000,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write the trace here (default: stdout).",
                                                dir_okay=False)] = None,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Write a window of one attempt as Chrome trace JSON (open it in
    ui.perfetto.dev or chrome://tracing): one process per rank, one track
    per process group, the hang and the culprit marked, flows from the
    waiters to the rank they wait for. Each event's args.dur_source says
    where its duration comes from."""
    import json

    from frlake.query.trace import TraceWindow

    window = TraceWindow(ranks=_ranks(ranks), pgs=tuple(pg) if pg else None, around=around, max_events=max_events)
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        pieces = session.trace(job, attempt, window)
        head = next(pieces)
        out = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
        try:
            out.write(head)
            for piece in pieces:
                out.write(piece)
        finally:
            if output:
                out.close()
    info = json.loads(head[head.index('"otherData": ') + 13:head.index(', "traceEvents"')])["frlake"]
    note = " (truncated: narrow with --ranks, --pg or --around, or raise --max-events)" if info["truncated"] else ""
    err_console.print(f"{info['entries_shown']:,} of {info['entries_in_window']:,} entries in the window, "
                      f"{len(info['ranks']):,} of {info['ranks_total']:,} ranks{note}"
                      + (f" -> {output}" if output else ""), highlight=False)
