"""Pieces every command shares: the global options, --format, output, errors."""

from __future__ import annotations

import functools
import gc
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from frlake.config import Settings

if TYPE_CHECKING:
    from frlake.session import Frlake
from frlake.errors import FrlakeError, UsageError
from frlake.values import csv_lines, ndjson_lines, plain, records

console = Console()
err_console = Console(stderr=True)


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    ndjson = "ndjson"


LakeOpt = Annotated[
    str | None,
    typer.Option("--lake", envvar="FRLAKE_LAKE", help="Lake folder (default ./frlake-lake).", show_default=False),
]
DbUrlOpt = Annotated[
    str | None,
    typer.Option("--db-url", envvar="FRLAKE_DB_URL", help="Catalog URL (default: SQLite inside the lake).",
                 show_default=False),
]
FormatOpt = Annotated[Format, typer.Option("--format", "-f", help="Output format: a table that fits the terminal, "
                                                                   "CSV, JSON, or NDJSON (one JSON object a line).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="The same as -f json.")]
OutputOpt = Annotated[Path | None, typer.Option("--output", "-o", help="Write the output to this file instead of "
                                                                        "the terminal (replaced when complete).",
                                                 dir_okay=False, show_default=False)]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only problems (for cron).")]
LockTimeoutOpt = Annotated[str, typer.Option(
    "--lock-timeout", help="How long to wait for another frlake writing the lake (e.g. 30s, 10m), then exit 1.")]
GraceOpt = Annotated[str, typer.Option(
    "--grace", help="Replaced files are deleted by a later run once retired this long (readers may still use "
                    "them), e.g. 1h, 0s.")]

NotifyOpt = Annotated[list[str] | None, typer.Option(
    "--notify", help="POST a JSON message (Slack-compatible 'text' beside the fields) to this URL for every new or "
                     "changed diagnosis that is not healthy (repeatable; docs/operations.md).", show_default=False)]
NotifyOnOpt = Annotated[list[str] | None, typer.Option(
    "--notify-on", help="Verdicts --notify announces, e.g. hang,mismatch (default: all but healthy).",
    show_default=False)]
NotifyJobsOpt = Annotated[list[str] | None, typer.Option(
    "--notify-jobs", help="Job patterns --notify announces, e.g. 'train-*' (repeatable; default: every job).",
    show_default=False)]
NotifySecretOpt = Annotated[str | None, typer.Option(
    "--notify-secret", envvar="FRLAKE_NOTIFY_SECRET", help="Sign each message: X-Frlake-Signature: sha256=<HMAC "
                                                           "of the body with this secret>.", show_default=False)]
PublicUrlOpt = Annotated[str | None, typer.Option(
    "--public-url", help="The server's address as people open it (https://frlake.example.com): messages link the "
                         "attempt's page.", show_default=False)]
ConfigOpt = Annotated[Path | None, typer.Option(
    "--config", envvar="FRLAKE_CONFIG", help="A TOML config file; its [notify] section holds url, on, jobs, secret, "
                                             "public_url (the command line wins).", dir_okay=False,
    show_default=False)]


def notify_settings(urls, on, jobs, secret, public_url, config_file):
    """The --notify settings (frlake.notify.config.NotifyConfig), or None when nothing names a receiver."""
    from frlake.notify.config import notify_config

    return notify_config(urls or (), on, jobs, secret, public_url, config_file)


def parse_duration(text: str) -> float:
    """Seconds in ``90d``, ``12h``, ``10m``, ``30s``, ``2w`` or plain seconds."""
    from frlake.query.window import duration_seconds

    try:
        return duration_seconds(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def parse_date(text: str):
    """A date or date-time in ISO form (UTC unless it names its zone)."""
    from datetime import UTC, datetime

    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"{text!r} is not a date; write e.g. 2026-11-30 or 2026-11-30T12:00") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def settings(ctx: typer.Context, lake: str | None, db_url: str | None) -> Settings:
    """The lake and catalog: given on the command line (after the command, else before it) wins over the
    environment (FRLAKE_LAKE, FRLAKE_DB_URL), which wins over the defaults."""
    _loaded()
    return Settings.resolve(global_option(ctx, "lake", lake), global_option(ctx, "db_url", db_url))


def global_option(ctx: typer.Context, name: str, value):
    """An option both the command and ``frlake`` itself take (``--lake``, ``--db-url``): an explicit flag
    wins wherever it stands, then the environment; ``value`` is the command's own."""
    contexts = [ctx, *_parents(ctx)]  # the command first, then the groups above it, ``frlake`` last
    for c in contexts:
        source = c.get_parameter_source(name) if name in c.params else None
        if source is not None and source.name == "COMMANDLINE":  # (typer's own copy of click's enum)
            return c.params[name]
    return value if value is not None else next(
        (c.params[name] for c in contexts if c.params.get(name) is not None), None)


def _parents(ctx: typer.Context):
    while ctx.parent is not None:
        ctx = ctx.parent
        yield ctx


def _loaded() -> None:
    """Where every command starts its work: with the cyclic garbage collector off since start-up
    (frlake.cli.launcher), load the session's modules (SQLAlchemy and the catalog), freeze what they made out
    of the collector's reach and turn it on."""
    if gc.isenabled():  # not started by frlake.cli.launcher (a test's runner), or already done
        return
    import frlake.session  # noqa: F401

    gc.freeze()
    gc.enable()


def show_log(level: int) -> None:
    """The library logs through ``logging`` (logger "frlake"); -v shows it on stderr."""
    import logging

    from rich.logging import RichHandler

    handler = RichHandler(console=err_console, show_path=False, markup=False, rich_tracebacks=False,
                          log_time_format="%Y-%m-%dT%H:%M:%S")  # ISO 8601, as every time frlake writes
    logger = logging.getLogger("frlake")
    logger.addHandler(handler)
    logger.setLevel(level)


@contextmanager
def open_session(ctx: typer.Context, lake: str | None, db_url: str | None, *,
                 must_exist: bool = False) -> Iterator[Frlake]:
    """The command's one session (closed when the command ends); frlake
    errors come out as one clear line. Read commands pass ``must_exist`` so
    that a mistyped --lake is an error, not a new empty lake."""
    from frlake.session import Frlake

    with user_errors():
        session = Frlake(settings(ctx, lake, db_url), must_exist=must_exist)
        try:
            yield session
        finally:
            session.close()


@contextmanager
def user_errors() -> Iterator[None]:
    """Print frlake errors as one clear line, without a traceback, and exit 1 (2: the command line's own
    mistake, as for every usage error)."""
    try:
        yield
    except FrlakeError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2 if isinstance(exc, UsageError) else 1) from None


def print_detail(text: str, lead: str = "", lead_style: str = "red") -> None:
    """A line of a report under its heading, wrapped at the terminal's width with a hanging indent and
    printed as it is (the user's names hold no markup); ``lead`` opens it in ``lead_style``."""
    import textwrap

    from rich.text import Text

    from frlake.cli._table import terminal_width

    body = textwrap.fill(lead + text, width=terminal_width(), initial_indent="  ", subsequent_indent="    ",
                         break_on_hyphens=False, break_long_words=False)
    line = Text(body)
    if lead:
        line.stylize(lead_style, 2, 2 + len(lead))
    console.print(line, highlight=False, soft_wrap=True)


def with_output_options(command: Callable) -> Callable:
    """``command`` with ``--json`` (``-f json``) and ``-o FILE`` (what it prints goes to FILE, which
    appears only complete: written beside it and moved in place, removed if the command fails)."""
    signature = inspect.signature(command, eval_str=True)
    extra = [inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=JsonOpt),
             inspect.Parameter("output", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=OutputOpt)]

    @functools.wraps(command)
    def run(*args, as_json: bool = False, output: Path | None = None, **kwargs):
        if as_json:
            kwargs["fmt"] = type(kwargs["fmt"])("json")
        if output is None:
            return command(*args, **kwargs)
        with written_to(output):
            return command(*args, **kwargs)

    run.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *extra])
    run.__annotations__ = {**{p.name: p.annotation for p in signature.parameters.values()},
                           "as_json": JsonOpt, "output": OutputOpt}
    return run


@contextmanager
def written_to(path: Path) -> Iterator[None]:
    """Standard output into ``path``, which appears only when the command did its work: not on an error
    or a usage error (exit 1, 2), but on the statuses that still report (ingest's 3 and 4)."""
    part = path.with_name(f".{path.name}.part")
    ok = False
    try:
        with open(part, "w", encoding="utf-8") as f, redirect_stdout(f):
            try:
                yield
                ok = True
            except typer.Exit as done:
                ok = done.exit_code not in (1, 2)
                raise
    finally:
        if ok:
            os.replace(part, path)
        else:
            part.unlink(missing_ok=True)


def emit_rows(columns: Sequence[str], rows: Sequence[Sequence], fmt: Format, title: str | None = None, *,
              max_shown: int | None = None, types: Sequence[str] = ()) -> None:
    """Rows in the chosen format: a table that fits the terminal (with
    ``max_shown``, the first and last rows of a longer result), CSV with a
    header even without rows, JSON (one list), or NDJSON (one object a line).
    Nested values are JSON in every format."""
    write = sys.stdout.write
    if fmt is Format.json:
        write(json.dumps(records(columns, rows), default=str, indent=2) + "\n")
    elif fmt is Format.ndjson:
        for line in ndjson_lines(columns, rows):
            write(line)
    elif fmt is Format.csv:
        for line in csv_lines(columns, rows):
            write(line)
    else:
        from frlake.cli._table import render

        write(render(columns, rows, max_rows=max_shown, title=title, types=types))


def emit_json(data: object, fmt: Format = Format.json) -> None:
    """A document as JSON; as NDJSON, a list is one line per item and anything else one line."""
    if fmt is Format.ndjson:
        for item in data if isinstance(data, list) else [data]:
            sys.stdout.write(json.dumps(item, default=plain) + "\n")
        return
    sys.stdout.write(json.dumps(data, default=plain, indent=2) + "\n")
