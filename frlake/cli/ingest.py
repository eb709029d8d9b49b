"""frlake ingest: files, folders and archives into the lake."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from frlake.cli._common import (
    ConfigOpt,
    DbUrlOpt,
    Format,
    FormatOpt,
    LakeOpt,
    LockTimeoutOpt,
    NotifyJobsOpt,
    NotifyOnOpt,
    NotifyOpt,
    NotifySecretOpt,
    PublicUrlOpt,
    QuietOpt,
    console,
    emit_json,
    emit_rows,
    err_console,
    notify_settings,
    open_session,
    parse_duration,
    user_errors,
)
from frlake.ingest.identity import DEFAULT_LAYOUT, IdentityOptions, load_hosts
from frlake.ingest.pool import pool_context
from frlake.values import size_text

if TYPE_CHECKING:
    from frlake.entities import Brief
    from frlake.ingest.pipeline import Step

# Exit statuses a cron job can act on (README "Commands", docs/security.md).
EXIT_OK = 0  # every file found was ingested, already present or unchanged
EXIT_ERROR = 1  # the run itself stopped: bad options, the lake locked, a catalog error
EXIT_SOME_REJECTED = 3  # some files were rejected, the others were ingested
EXIT_ALL_REJECTED = 4  # files were found but every one was rejected: nothing could be read


def exit_status(summary) -> int:
    """The exit status of an ingest that ran to its end (EXIT_* above)."""
    if not summary.rejected:
        return EXIT_OK
    if summary.ingested or summary.already_present or summary.unchanged or summary.host_maps:
        return EXIT_SOME_REJECTED
    return EXIT_ALL_REJECTED


def ingest_command(
    ctx: typer.Context,
    paths: Annotated[list[str], typer.Argument(help="Dump files, folders (recursive) and .tar/.tar.gz archives.")],
    layout: Annotated[str | None, typer.Option(help="Path template with the placeholders {job} {attempt} {host} "
                                                    f"{{rank}} and {{*}}; default: {DEFAULT_LAYOUT}")] = None,
    job: Annotated[str | None, typer.Option(help="Job of every dump (wins over everything else).")] = None,
    attempt: Annotated[int | None, typer.Option(help="Attempt of every dump.", min=0)] = None,
    host: Annotated[str | None, typer.Option(help="Host of every dump.")] = None,
    rank: Annotated[int | None, typer.Option(help="Rank of the dump (for a single file).", min=0)] = None,
    hosts: Annotated[str | None, typer.Option("--hosts", help="CSV file of 'rank,host' lines.")] = None,
    workers: Annotated[int, typer.Option(help="Parser processes.", min=1)] = min(4, os.cpu_count() or 1),
    force: Annotated[bool, typer.Option(help="Re-read files even when size and mtime are unchanged.")] = False,
    batch_files: Annotated[int, typer.Option(help="Files per commit to the lake.", min=1)] = 32,
    retry_rejected: Annotated[bool, typer.Option(
        help="Read every rejected file again (by default a rejection is retried only when this run could "
             "judge it differently: other identity options, a newer frlake, an unreadable file).")] = False,
    lock_timeout: LockTimeoutOpt = "10m",
    notify: NotifyOpt = None,
    notify_on: NotifyOnOpt = None,
    notify_jobs: NotifyJobsOpt = None,
    notify_secret: NotifySecretOpt = None,
    public_url: PublicUrlOpt = None,
    config_file: ConfigOpt = None,
    fmt: FormatOpt = Format.table,
    quiet: QuietOpt = False,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Ingest Flight Recorder dumps (pickle or JSON). Safe to re-run: unchanged
    files are skipped without reading them, and the same bytes are never
    ingested twice. A file that cannot be read is rejected with its reason
    and the run goes on.

    Exit status: 0 all good; 3 some files were rejected (the rest were
    ingested); 4 every file was rejected or no path could be read; 1 on
    errors (among them: another frlake kept the lake busy past
    --lock-timeout).

    With --notify URL (or a config file's [notify] section), the incidents
    this run found are posted to URL after it; a message that could not be
    delivered waits in the catalog for the next run (docs/operations.md)."""
    pool_context()  # its imports overlap ours
    from frlake.ingest.pipeline import IngestOptions

    with user_errors():
        wait = parse_duration(lock_timeout)
        alerts = notify_settings(notify, notify_on, notify_jobs, notify_secret, public_url, config_file)
    with open_session(ctx, lake, db_url) as session:
        notifier = session.notifier(alerts) if alerts else None
        if notifier is not None:
            notifier.start()  # before the run: what the lake held before is not announced to a new receiver
        identity = IdentityOptions(job=job, attempt=attempt, host=host, rank=rank, layout=layout,
                                   hosts=load_hosts(hosts) if hosts else None)
        options = IngestOptions(identity=identity, workers=workers, force=force, chunk_files=batch_files, isolate=True,
                                retry_rejected=retry_rejected, lock_timeout_s=wait)
        if quiet or fmt is not Format.table:
            summary = session.ingest(paths, options)
        else:
            with Progress(SpinnerColumn(), TextColumn("{task.description:<11}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("{task.fields[unit]}"), TimeRemainingColumn(), TimeElapsedColumn(),
                          console=console, transient=True, disable=not console.is_terminal) as bar:
                task = bar.add_task("scanning", total=None, unit="files")
                summary = session.ingest(paths, options, lambda step: _show(bar, task, step))
        if notifier is not None:
            sent = notifier.run()
            if sent.failed:
                err_console.print(f"notify: {sent.sent} sent, {sent.failed} failed ({sent.errors[0]}); the "
                                  "messages wait in the catalog for the next run", highlight=False, markup=False)
            elif not quiet and fmt is Format.table:
                console.print(f"notify: {sent.queued} queued, {sent.sent} sent", highlight=False)
    if fmt in (Format.json, Format.ndjson):
        emit_json(summary.to_dict(), fmt)
        raise typer.Exit(exit_status(summary))
    if fmt is Format.csv:  # one row: the run's counts (frlake files -f csv lists the files)
        columns = ["run_id", "ingested", "already_present", "unchanged", "rejected", "entries", "seconds",
                   "rejected_by_reason", "diagnosed"]
        emit_rows(columns, [[summary.run_id, summary.ingested, summary.already_present, summary.unchanged,
                             summary.rejected, summary.entries, round(summary.seconds, 3), summary.rejected_by_reason,
                             [{"job": d.job, "attempt": d.attempt, "verdict": d.verdict}
                              for d in summary.diagnosed]]], fmt)
        raise typer.Exit(exit_status(summary))
    if not quiet:
        _print_summary(summary)
    for reason, count in sorted(summary.rejected_by_reason.items()):
        console.print(f"  rejected {count} as {reason}")
    for f in summary.rejected_files[:20]:
        console.print(f"    {f['path']}: {f['detail']}", highlight=False, markup=False)
    if summary.rejected > 20:
        console.print("    ... see `frlake files --rejected`")
    if not quiet:
        for c in summary.conflicts[:20]:
            console.print(f"  {c['job']} attempt {c['attempt']} rank {c['rank']}: {c['dumps']} different dumps "
                          "(the newest is read; see the dump_conflicts view)", highlight=False, markup=False)
    raise typer.Exit(exit_status(summary))


UNITS = {"scanning": "files found", "reading": "files", "compacting": "partitions", "diagnosing": "attempts"}


def _show(bar: Progress, task, step: Step) -> None:
    """One bar for the whole run: its phase, how far, and the time left where the total is known."""
    unit = UNITS.get(step.phase, "")
    if step.phase == "reading" and step.bytes:
        unit += f", {size_text(step.bytes)} read"
    bar.update(task, description=step.phase, completed=step.done, total=step.total, unit=unit)


def _print_summary(summary) -> None:
    console.print(f"ingested [bold]{summary.ingested}[/] dumps ({summary.entries:,} entries) in "
                  f"{summary.seconds:.2f} s (run {summary.run_id})", highlight=False)
    if summary.phases:
        console.print("  " + ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in summary.phases.items()),
                      highlight=False)
    console.print(f"  already present {summary.already_present}, unchanged {summary.unchanged}, "
                  f"rejected [bold]{summary.rejected}[/]", highlight=False)
    if summary.host_maps:
        console.print(f"  {summary.host_maps} host map(s) read beside the dumps (frlake files lists what each holds)",
                      highlight=False)
    if summary.skipped_rejected:
        console.print(f"  {summary.skipped_rejected} files rejected before were skipped unread (unchanged, and "
                      "nothing this run would judge differently); retry them with --retry-rejected")
    if summary.skipped_forgotten:
        console.print(f"  {summary.skipped_forgotten} files whose dumps were forgotten were skipped; other identity "
                      "options or --force ingest them again")
    if summary.compacted:
        console.print(f"  compacted {summary.compacted} small Parquet files")
    if summary.diagnosed:
        _print_diagnosed(summary.diagnosed)


UNHEALTHY_SHOWN = 50  # attempts with a fault an ingest summary lists; the rest are a query away


def _print_diagnosed(diagnosed: list[Brief]) -> None:
    """The attempts this run diagnosed: how many of each verdict, then every one that is not healthy, with
    its root cause or its suspects when the data cannot tell (the summary keeps an attempt's first culprits
    only: a third is "and more"); past UNHEALTHY_SHOWN, the query that lists them all."""
    from collections import Counter

    from frlake.cli._table import render

    counts = Counter(d.verdict for d in diagnosed)
    order = sorted(counts, key=lambda v: (v == "healthy", -counts[v], v))
    console.print(f"diagnosed {len(diagnosed)} attempt{'s' if len(diagnosed) != 1 else ''}: "
                  + ", ".join(f"{counts[v]} {v}" for v in order), highlight=False)
    faults = sorted((d for d in diagnosed if d.verdict != "healthy"), key=lambda d: (d.job, d.attempt))
    if not faults:
        return
    rows = []
    for d in faults[:UNHEALTHY_SHOWN]:
        roots = [c for c in d.culprits if c.role == "root"]
        suspects = [] if roots else [c for c in d.culprits if c.role == "suspect"]
        roots = roots or suspects
        cause = ", ".join(f"rank {c.rank} on {c.host or ' or '.join(c.hosts_claimed or ['an unknown host'])}"
                          f"{' (inferred)' if c.host_inferred else ''}"
                          for c in roots[:2])
        if suspects:
            cause = f"suspect{'s' if len(suspects) > 1 else ''}: {cause}"
        rows.append([d.job, d.attempt, d.verdict, cause + (" and more" if len(roots) > 2 else "")])
    sys.stdout.write(render(["job", "attempt", "verdict", "root cause"], rows))
    if len(faults) > UNHEALTHY_SHOWN:
        console.print(f"  {len(faults) - UNHEALTHY_SHOWN} more: frlake query \"SELECT job, attempt, verdict, summary "
                      "FROM incidents WHERE verdict <> 'healthy' ORDER BY started DESC\"", highlight=False)
    console.print("  the evidence of each: frlake diagnose JOB --attempt N", highlight=False)
