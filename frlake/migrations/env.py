"""Alembic environment: run from code by ``frlake db upgrade`` with the
connection handed in through ``config.attributes['connection']``."""

from alembic import context

from frlake.catalog.models import Base

config = context.config
target_metadata = Base.metadata


def run_migrations(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is None:
    from sqlalchemy import create_engine

    engine = create_engine(config.get_main_option("sqlalchemy.url"))
    with engine.begin() as conn:
        run_migrations(conn)
    engine.dispose()
else:
    run_migrations(connection)
