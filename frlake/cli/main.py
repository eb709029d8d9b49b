"""The `frlake` command: wires the command groups together."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, MutableMapping
from importlib import import_module
from typing import Annotated

import typer
from typer.core import TyperGroup

from frlake.cli import db, hosts
from frlake.cli._common import DbUrlOpt, LakeOpt, show_log, with_output_options

# The commands, in the order --help lists them: (module, function, short help, with --json and -o). Each
# module is imported when its command runs (or --help lists them all), so a command loads only its own:
# `frlake query` does not import what ingest or serve need.
COMMANDS = {
    "ingest": ("ingest", "ingest_command", "Ingest dump files, folders and archives; safe to re-run.", True),
    "query": ("query", "query_command", "Run one read-only SQL query over the lake's views.", True),
    "files": ("query", "files_command", "List the files seen: ingested, duplicate or rejected, and why.", True),
    "jobs": ("jobs", "jobs_command", "List the attempts whose job or host matches, newest first.", True),
    "diagnose": ("diagnose", "diagnose_command", "Say what went wrong in an attempt and who caused it.", True),
    "rediagnose": ("diagnose", "rediagnose_command", "Diagnose every attempt again (after frlake's algorithm "
                   "changed).", True),
    "entries": ("entries", "entries_command", "One attempt's collectives with its ranks side by side.", True),
    "report": ("report", "report_command", "Fleet questions over all history: drain, flaky hosts, hangs...", True),
    "forget": ("forget", "forget_command", "Forget dumps: their rows, diagnoses and original bytes.", True),
    "compact": ("compact", "compact_command", "Merge each partition's small Parquet files into few large ones.",
                True),
    "trace": ("trace", "trace_command", "Write a window of an attempt as Chrome/Perfetto trace JSON.", False),
    "serve": ("serve", "serve_command", "Serve the web UI and the JSON API.", False),
}


def _command(name: str):
    """The click command of one of ``COMMANDS``, made as ``app.command`` would make it."""
    module, function, short_help, output_options = COMMANDS[name]
    module = import_module(f"frlake.cli.{module}")
    run = getattr(module, function)
    one = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)
    help_text = module.query_help() if name == "query" else None
    one.command(name, help=help_text, short_help=short_help)(with_output_options(run) if output_options else run)
    return typer.main.get_command(one)


class _Commands(MutableMapping):
    """The group's commands by name: ``COMMANDS`` made on first use, then the eager ones (``db``)."""

    def __init__(self, eager: Mapping):
        self._made: dict = {}
        self._eager = dict(eager)

    def __getitem__(self, name: str):
        if name in self._eager:
            return self._eager[name]
        if name not in COMMANDS:
            raise KeyError(name)
        if name not in self._made:
            self._made[name] = _command(name)
        return self._made[name]

    def __setitem__(self, name: str, command) -> None:
        self._eager[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("frlake's commands are fixed")

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._eager if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(name not in COMMANDS for name in self._eager)


class _LazyGroup(TyperGroup):
    """The ``frlake`` group, whose commands are imported when they run (``_Commands``)."""

    def __init__(self, *, commands=None, **attrs):
        super().__init__(commands=_Commands(commands or {}), **attrs)


app = typer.Typer(
    name="frlake",
    cls=_LazyGroup,
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


app.add_typer(db.app, name="db")
app.add_typer(hosts.app, name="hosts")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
