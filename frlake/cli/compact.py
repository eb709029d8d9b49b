"""frlake compact: merge small Parquet files into few large ones."""

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
    parse_duration,
    user_errors,
)

EXIT_OK = 0  # done, or nothing to merge
EXIT_ERROR = 1  # bad options, the lake busy past --lock-timeout, a catalog error


def compact_command(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Option(help="Only this job's partitions.")] = None,
    attempt: Annotated[int | None, typer.Option(help="Only this attempt of --job.", min=0)] = None,
    min_files: Annotated[int, typer.Option(help="Merge a partition with at least this many small files.",
                                           min=2)] = 2,
    target_mb: Annotated[int, typer.Option(help="Files this large are left alone; merged files are about "
                                                "this size.", min=1)] = 128,
    dry_run: Annotated[bool, typer.Option(help="Say what would be merged; change nothing.")] = False,
    grace: GraceOpt = "1h",
    lock_timeout: LockTimeoutOpt = "10m",
    fmt: FormatOpt = Format.table,
    quiet: QuietOpt = False,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Merge each partition's small Parquet files (per table and attempt, and
    the stacks table) into few large ones, in the current schema. Each
    partition switches in one catalog transaction; the replaced files are
    deleted by a later run after the grace period. Ingest compacts the
    attempts it touched on its own past 16 files.

    Exit status: 0 done (or nothing to merge); 1 on errors."""
    from frlake.storage.compact import CompactOptions

    with user_errors():
        if attempt is not None and job is None:
            from frlake.errors import UsageError

            raise UsageError("--attempt needs --job")
        options = CompactOptions(min_files=min_files, target_bytes=target_mb << 20, dry_run=dry_run,
                                 retire_grace_s=parse_duration(grace), lock_timeout_s=parse_duration(lock_timeout))
    with open_session(ctx, lake, db_url, must_exist=True) as session:
        partitions = None
        if job is not None:
            partitions = [k for k in session.attempt_keys(job) if attempt is None or k[1] == attempt]
        summary = session.compact(partitions, options)
    if fmt is Format.json:
        emit_json(summary.to_dict())
        return
    if quiet:
        return
    verb = "would merge" if dry_run else "merged"
    console.print(f"{verb} {summary.files_before} files of {summary.partitions} partitions"
                  + ("" if dry_run else f" into {summary.files_after}")
                  + (f" ({summary.old_schema_files} of an older schema, rewritten in the current one)"
                     if summary.old_schema_files else "") + f" in {summary.seconds:.2f} s")
