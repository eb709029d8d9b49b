"""frlake hosts: host maps attached to attempts already in the lake, and undone."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, Format, FormatOpt, LakeOpt, console, emit_rows, open_session

app = typer.Typer(help="Hosts of ranks the dumps do not name: host maps attached after the fact.",
                  no_args_is_help=True, rich_markup_mode=None)
KINDS = ("table", "torchrun", "hostfile", "slurm")


@app.command("attach")
def attach(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="The host map: hosts.csv/json, a hostfile, a torchrun log, "
                                              "slurm.env, scontrol or sacct --json output.")],
    job: Annotated[str, typer.Option(help="The job it maps.")],
    attempt: Annotated[int | None, typer.Option(help="Only this attempt (default: every attempt of --job).",
                                                min=0)] = None,
    kind: Annotated[str | None, typer.Option(help=f"What it is, when its name does not say: {', '.join(KINDS)}.")] = None,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Attach a host map to a job's attempts without reading a dump again: the hosts their dumps do not
    name are taken from it, and they are diagnosed again (reports, drain and causes follow). Attaching the
    same map twice is once; `frlake hosts detach ID` undoes it."""
    if kind is not None and kind not in KINDS:
        raise typer.BadParameter(f"--kind must be one of {', '.join(KINDS)}")
    with open_session(ctx, lake, db_url) as session:
        attach_id, diagnoses = session.attach_hosts(path, job, attempt, kind)
        console.print(f"attached {path} as {attach_id} to {len(diagnoses)} attempt(s) of {job}")
        for d in diagnoses:
            console.print(f"  attempt {d.attempt}: {d.summary} (hosts known for {d.hosts_known.get('known', 0)} "
                          f"of {d.hosts_known.get('ranks', 0)} dumped ranks)", markup=False)


@app.command("detach")
def detach(
    ctx: typer.Context,
    attach_id: Annotated[str, typer.Argument(help="The id `frlake hosts attach` printed (`frlake hosts list`).")],
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Undo one attach: its hosts go, and the attempts it was on are diagnosed again."""
    with open_session(ctx, lake, db_url) as session:
        diagnoses = session.detach_hosts(attach_id)
        console.print(f"detached {attach_id} from {len(diagnoses)} attempt(s)")
        for d in diagnoses:
            console.print(f"  {d.job} attempt {d.attempt}: {d.summary}", markup=False)


@app.command("list")
def list_command(
    ctx: typer.Context,
    job: Annotated[str | None, typer.Option(help="Only this job's.")] = None,
    fmt: FormatOpt = Format.table,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """The host maps attached, oldest first."""
    with open_session(ctx, lake, db_url) as session:
        rows = [[a["attach_id"], a["job"], ",".join(map(str, a["attempts"])), a["ranks"], a["hosts"], a["path"]]
                for a in session.catalog.dumps.attached(job)]
    emit_rows(["id", "job", "attempts", "ranks", "hosts", "path"], rows, fmt)
