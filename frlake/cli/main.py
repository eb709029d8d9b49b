"""The `frlake` command: wires the command groups together."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from frlake.cli import db
from frlake.cli._common import DbUrlOpt, LakeOpt, show_log
from frlake.cli.compact import compact_command
from frlake.cli.diagnose import diagnose_command, rediagnose_command
from frlake.cli.entries import entries_command
from frlake.cli.forget import forget_command
from frlake.cli.ingest import ingest_command
from frlake.cli.query import files_command, query_command, query_help
from frlake.cli.report import report_command
from frlake.cli.serve import serve_command
from frlake.cli.trace import trace_command

app = typer.Typer(
    name="frlake",
    help="Store, diagnose and query PyTorch Flight Recorder dumps.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("frlake")
        except PackageNotFoundError:  # run from a source tree that was never installed
            number = "unknown"
        typer.echo(f"frlake {number}")
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
    ctx.obj = {"lake": lake, "db_url": db_url}
    if verbose:
        show_log(logging.DEBUG if verbose > 1 else logging.INFO)


app.command("ingest")(ingest_command)
app.command("query", help=query_help())(query_command)
app.command("files")(files_command)
app.command("diagnose")(diagnose_command)
app.command("rediagnose")(rediagnose_command)
app.command("entries")(entries_command)
app.command("report")(report_command)
app.command("forget")(forget_command)
app.command("compact")(compact_command)
app.command("trace")(trace_command)
app.command("serve")(serve_command)
app.add_typer(db.app, name="db")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
