"""frlake db: the catalog's schema migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, LakeOpt, console, open_session

app = typer.Typer(help="The catalog's database schema: its Alembic migrations.", no_args_is_help=True,
                  rich_markup_mode=None)


@app.command("upgrade")
def upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Apply the migrations up to REVISION (default: the latest)."""
    with open_session(ctx, lake, db_url) as session:
        console.print(f"catalog at revision {session.migrations.upgrade(revision)}")


@app.command("downgrade", short_help="Revert the migrations down to REVISION (asks before losing data).")
def downgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision, e.g. base.")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask, even when data would be lost.")] = False,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Revert the migrations down to REVISION. A downgrade that throws data
    away says what and asks first (--yes: do not ask; without a terminal
    it refuses instead of asking)."""
    import sys

    with open_session(ctx, lake, db_url) as session:
        losses = session.migrations.losses(revision)
        if losses and not yes:
            console.print("this downgrade deletes:\n" + "\n".join(f"  - {loss}" for loss in losses), highlight=False)
            if not sys.stdin.isatty():
                console.print("refused: run it again with --yes to confirm")
                raise typer.Exit(1)
            if not typer.confirm("downgrade anyway?", default=False):
                raise typer.Exit(1)
        console.print(f"catalog at revision {session.migrations.downgrade(revision) or 'base'}")


@app.command("current")
def current(ctx: typer.Context, lake: LakeOpt = None, db_url: DbUrlOpt = None) -> None:
    """Show the catalog's revision and the one this frlake needs."""
    with open_session(ctx, lake, db_url) as session:
        console.print(f"current {session.migrations.current() or 'none'}, head {session.migrations.head()}")
