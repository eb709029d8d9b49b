"""frlake db: the catalog's schema migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, LakeOpt, console, settings, user_errors

app = typer.Typer(help="The catalog's database schema: its Alembic migrations.", no_args_is_help=True)


@app.command("upgrade")
def upgrade(
    ctx: typer.Context,
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Apply the migrations up to REVISION (default: the latest)."""
    from frlake.catalog import db

    with user_errors():
        engine = db.make_engine(settings(ctx, lake, db_url).db_url)
        db.upgrade(engine, revision)
        console.print(f"catalog at revision {db.current_revision(engine)}")


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

    from frlake.catalog import db

    with user_errors():
        engine = db.make_engine(settings(ctx, lake, db_url).db_url)
        losses = [db.downgrade_loses(r) for r in db.reverted_by_downgrade(engine, revision)
                  if db.downgrade_loses(r)] if db.holds_data(engine) else []
        if losses and not yes:
            console.print("this downgrade deletes:\n" + "\n".join(f"  - {loss}" for loss in losses), highlight=False)
            if not sys.stdin.isatty():
                console.print("refused: run it again with --yes to confirm")
                raise typer.Exit(1)
            if not typer.confirm("downgrade anyway?", default=False):
                raise typer.Exit(1)
        db.downgrade(engine, revision)
        console.print(f"catalog at revision {db.current_revision(engine) or 'base'}")


@app.command("current")
def current(ctx: typer.Context, lake: LakeOpt = None, db_url: DbUrlOpt = None) -> None:
    """Show the catalog's revision and the one this frlake needs."""
    from frlake.catalog import db

    with user_errors():
        engine = db.make_engine(settings(ctx, lake, db_url).db_url)
        console.print(f"current {db.current_revision(engine) or 'none'}, head {db.head_revision()}")
