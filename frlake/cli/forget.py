"""frlake forget: remove dumps from the lake, by job, attempt, path or age (retention)."""

from __future__ import annotations

from typing import Annotated

import typer

from frlake.cli._common import (
    DbUrlOpt,
    Format,
    FormatOpt,
    GraceOpt,
    LakeOpt,
    LockTimeoutOpt,
    QuietOpt,
    console,
    emit_json,
    open_session,
    parse_date,
    parse_duration,
    user_errors,
)
from frlake.errors import UsageError
from frlake.values import size_text

EXIT_OK = 0  # done, or nothing matched (a retention run with nothing old enough)
EXIT_ERROR = 1  # the lake busy past --lock-timeout, a catalog error (2: a usage error)


def forget_command(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Option(help="Forget this job (every attempt, or --attempt).")] = None,
    attempt: Annotated[int | None, typer.Option(help="Only this attempt of --job.", min=0)] = None,
    path: Annotated[str | None, typer.Option(help="The dumps ingested from this file, or from every file "
                                                  "under this folder (as ingest saw the path).")] = None,
    before: Annotated[str | None, typer.Option(help="Attempts whose last entry is older than this date "
                                                    "(e.g. 2026-09-01; UTC).")] = None,
    older_than: Annotated[str | None, typer.Option(help="Attempts whose last entry is older than this "
                                                        "(e.g. 90d): retention from cron.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Say what would be forgotten; change nothing.")] = False,
    grace: GraceOpt = "1h",
    lock_timeout: LockTimeoutOpt = "10m",
    fmt: FormatOpt = Format.table,
    quiet: QuietOpt = False,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Forget dumps: their rows in every table, their diagnoses and catalog
    records, and the original bytes no other dump refers to. Attempts that
    keep some dumps are rewritten and diagnosed again. Readers see each
    attempt whole or not at all; a crash leaves the lake consistent and the
    next run finishes the job. The forgotten files are remembered, so a cron
    ingest does not bring them back; ingest them with other identity options
    (or --force) to store them again.

    Exit status: 0 done (or nothing matched); 1 on errors; 2 on a usage error (nothing to forget)."""
    from datetime import UTC, datetime, timedelta

    from frlake.storage.forget import ForgetOptions
    from frlake.storage.forget_plan import ForgetSelector

    with user_errors():
        cutoff = parse_date(before) if before else None
        if older_than:
            age = datetime.now(UTC) - timedelta(seconds=parse_duration(older_than))
            cutoff = age if cutoff is None else min(cutoff, age)
        selector = ForgetSelector(job=job, attempt=attempt, path=path, before=cutoff)
        if selector.is_empty():
            raise UsageError("say what to forget: --job, --attempt with --job, --path, --before or --older-than")
        if attempt is not None and job is None:
            raise UsageError("an attempt is forgotten with its job: give --job too")
        options = ForgetOptions(dry_run=dry_run, retire_grace_s=parse_duration(grace),
                                lock_timeout_s=parse_duration(lock_timeout))
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        summary = session.forget(selector, options)
    if fmt is Format.json:
        emit_json(summary.to_dict())
        return
    if quiet:
        return
    verb = "would forget" if dry_run else "forgot"
    console.print(f"{verb} [bold]{summary.dumps}[/] dumps ({size_text(summary.bytes)} of original files) "
                  f"in {summary.seconds:.2f} s")
    for j, a in summary.attempts_removed[:50]:
        console.print(f"  {j} attempt {a}: {'would be ' if dry_run else ''}removed", highlight=False, markup=False)
    for j, a in summary.attempts_changed[:50]:
        console.print(f"  {j} attempt {a}: some dumps {'would go' if dry_run else 'gone, diagnosed again'}",
                      highlight=False, markup=False)
    if not dry_run and summary.files_retired:
        console.print(f"  {summary.files_retired} Parquet files retired; a later run deletes them after {grace}")
