"""The `frlake` command: wires the command groups together."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from frlake.cli import db
from frlake.cli._common import DbUrlOpt, LakeOpt, show_log, with_output_options
from frlake.cli.compact import compact_command
from frlake.cli.diagnose import diagnose_command, rediagnose_command
from frlake.cli.entries import entries_command
from frlake.cli.forget import forget_command
from frlake.cli.ingest import ingest_command
from frlake.cli.jobs import jobs_command
from frlake.cli.query import files_command, query_command, query_help
from frlake.cli.report import report_command
from frlake.cli.serve import serve_command
from frlake.cli.trace import trace_command

app = typer.Typer(
    name="frlake",
    help="Store, diagnose and query PyTorch Flight Recorder dumps.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's help: it wraps at any width and never cuts a default short
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("frlake")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "unknown"
        from importlib.util import find_spec

        compiled = all(find_spec(f"frlake.ingest.{name}") is not None for name in ("_speedups", "_fastpickle"))
        typer.echo(f"frlake {number} ({'compiled parser' if compiled else 'parser in Python: built without a C compiler'})")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True,
                                         help="Show what frlake does (-v), and more (-vv), on stderr.")] = 0,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print frlake's version and exit.")] = False,
) -> None:
    """Global options; every command also accepts them after its name."""
    ctx.obj = {}  # the global options are read from the contexts (_common.global_option)
    if verbose:
        show_log(logging.DEBUG if verbose > 1 else logging.INFO)


app.command("ingest", short_help="Ingest dump files, folders and archives; safe to re-run.")(with_output_options(ingest_command))
app.command("query", help=query_help(), short_help="Run one read-only SQL query over the lake's views.")(with_output_options(query_command))
app.command("files", short_help="List the files seen: ingested, duplicate or rejected, and why.")(with_output_options(files_command))
app.command("jobs", short_help="List the attempts whose job or host matches, newest first.")(with_output_options(jobs_command))
app.command("diagnose", short_help="Say what went wrong in an attempt and who caused it.")(with_output_options(diagnose_command))
app.command("rediagnose", short_help="Diagnose every attempt again (after frlake's algorithm changed).")(with_output_options(rediagnose_command))
app.command("entries", short_help="One attempt's collectives with its ranks side by side.")(with_output_options(entries_command))
app.command("report", short_help="Fleet questions over all history: drain, flaky hosts, hangs...")(with_output_options(report_command))
app.command("forget", short_help="Forget dumps: their rows, diagnoses and original bytes.")(with_output_options(forget_command))
app.command("compact", short_help="Merge each partition's small Parquet files into few large ones.")(with_output_options(compact_command))
app.command("trace", short_help="Write a window of an attempt as Chrome/Perfetto trace JSON.")(trace_command)
app.command("serve", short_help="Serve the web UI and the JSON API.")(serve_command)
app.add_typer(db.app, name="db")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
