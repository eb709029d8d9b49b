"""Engine, migrations and the one session helper of the catalog."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from frlake.catalog.revisions import head_revision, migration_files
from frlake.errors import CatalogError, StaleCatalog

WRITE = "frlake_write"  # execution option of a session that will write
_CHUNK = 500


def downgrade_loses(revision: str) -> str | None:
    """What reverting ``revision`` throws away: its migration's ``LOSES`` (read from its text, so that
    Alembic is not imported to ask)."""
    import ast

    path = migration_files().get(revision)
    if path is None:
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "LOSES" for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def make_engine(url: str) -> Engine:
    """An engine for the catalog; SQLite gets WAL, a busy timeout and foreign keys."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record):  # pragma: no cover - exercised by every sqlite test
            # Let SQLAlchemy, not the sqlite3 module, open transactions: the module
            # would commit before every CREATE TABLE, so a migration killed half
            # way would leave a catalog with some tables and no revision.
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):  # pragma: no cover - exercised by every sqlite test
            # A transaction that will write takes the write lock up front (IMMEDIATE, waiting up to
            # the busy timeout): a deferred one that reads and then writes fails at once, without
            # waiting, when another connection wrote in between (SQLITE_BUSY_SNAPSHOT). Readers
            # stay deferred and never wait for writers (WAL).
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(WRITE) else "BEGIN")

        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    return create_engine(url, pool_pre_ping=True)


def alembic_config(engine: Engine):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", "frlake:migrations")
    cfg.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return cfg


def current_revision(engine: Engine) -> str | None:
    if "alembic_version" not in inspect(engine).get_table_names():
        return None
    with engine.connect() as conn:
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def reverted_by_downgrade(engine: Engine, target: str) -> list[str]:
    """The revisions a downgrade from the catalog's current one to ``target`` reverts, newest first."""
    from alembic.script import ScriptDirectory

    current = current_revision(engine)
    if current is None:
        return []
    script = ScriptDirectory.from_config(alembic_config(engine))
    stop = None if target == "base" else target
    out = []
    for rev in script.iterate_revisions(current, stop or "base"):
        if rev.revision == stop:
            break
        out.append(rev.revision)
    return out


def holds_data(engine: Engine) -> bool:
    """Whether the catalog records anything (a run of any kind): a downgrade of an empty one loses nothing."""
    if "ingest_runs" not in inspect(engine).get_table_names():
        return False
    with engine.connect() as conn:
        return conn.execute(text("SELECT 1 FROM ingest_runs LIMIT 1")).first() is not None


def upgrade(engine: Engine, revision: str = "head") -> None:
    _run(engine, "upgrade", revision)


def downgrade(engine: Engine, revision: str) -> None:
    _run(engine, "downgrade", revision)


# Any fixed 64-bit number: the PostgreSQL advisory lock that serialises
# migrations of one catalog (two first ingests racing to create it).
_MIGRATION_LOCK = 0x66726C616B65


@contextmanager
def _migration_connection(engine: Engine) -> Iterator[Connection]:
    """One connection, in one transaction that holds the catalog's write lock
    for the whole migration, so concurrent processes take turns.

    SQLite: foreign keys are off while migrating. A batch migration (any
    column change) copies a table, drops the old one and renames the copy;
    with foreign keys on, dropping ``incidents`` would cascade into every
    culprit row. The pragma only works outside a transaction, so it is set on
    the raw connection before SQLAlchemy begins one (as Prefect does)."""
    with engine.connect() as conn:
        sqlite = engine.dialect.name == "sqlite"
        if sqlite:
            conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.execution_options(**{WRITE: True}).begin():
                if engine.dialect.name == "postgresql":
                    conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
                yield conn
        finally:
            if sqlite:
                conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=ON")


def _revision_of(conn: Connection) -> str | None:
    if "alembic_version" not in inspect(conn).get_table_names():
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def _run(engine: Engine, fn_name: str, revision: str, *, only_if_new: bool = False) -> None:
    from alembic import command

    fn = getattr(command, fn_name)
    cfg = alembic_config(engine)
    try:
        with _migration_connection(engine) as conn:
            if only_if_new and (_revision_of(conn) is not None or inspect(conn).get_table_names()):
                return  # another process created the catalog while this one waited for the lock
            cfg.attributes["connection"] = conn
            fn(cfg, revision)
    except SQLAlchemyError as exc:
        raise CatalogError(f"migration failed: {exc}") from exc


def ensure_current(engine: Engine, db_url_hint: str) -> None:
    """Create an empty catalog from the migrations; refuse a stale one.

    A brand-new database (no tables at all) is initialised, so the embedded
    default needs no set-up; processes that start together take turns, and
    only the first creates it. A catalog at another revision is refused with
    the command that fixes it: frlake never migrates a shared catalog silently.
    """
    try:
        current = current_revision(engine)
        if current is None:
            if not inspect(engine).get_table_names():
                _run(engine, "upgrade", "head", only_if_new=True)
            # Read again either way: another process may have committed the catalog (its tables and its
            # revision, in one transaction) between the two reads above.
            current = current_revision(engine)
    except SQLAlchemyError as exc:
        raise CatalogError(f"cannot open the catalog at {engine.url!r}: {exc}") from exc
    head = head_revision()
    if current != head:
        raise StaleCatalog(
            f"the catalog is at revision {current or 'none'} but this frlake needs {head}; "
            f"run: frlake --db-url '{db_url_hint}' db upgrade"
        )


@contextmanager
def session_scope(factory: sessionmaker, write: bool = False) -> Iterator[Session]:
    """Commit on success, roll back on error, always close; database errors
    come out as CatalogError. ``write``: the transaction will write."""
    session = factory()
    try:
        if write:
            session.connection(execution_options={WRITE: True})
        yield session
        session.commit()
    except SQLAlchemyError as exc:
        session.rollback()
        raise CatalogError(f"catalog error: {exc}") from exc
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


class Store:
    """One area of the catalog (``catalog.runs``, ``catalog.dumps``...): its methods open their
    transactions with the catalog's one session helper, ``session(write=...)``."""

    def __init__(self, session: Callable[..., AbstractContextManager[Session]]):
        self.session = session


def chunks(items: Sequence, size: int = _CHUNK) -> Iterable[Sequence]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def utcnow() -> datetime:
    return datetime.now(UTC)


class Migrations:
    """The catalog's schema migrations on one engine (``Frlake.migrations``; ``frlake db``): they work on a
    catalog of any revision, where opening a Catalog refuses a stale one."""

    def __init__(self, url: str):
        self.engine = make_engine(url)

    def current(self) -> str | None:
        return current_revision(self.engine)

    def head(self) -> str:
        return head_revision()

    def upgrade(self, revision: str = "head") -> str | None:
        upgrade(self.engine, revision)
        return self.current()

    def downgrade(self, revision: str) -> str | None:
        downgrade(self.engine, revision)
        return self.current()

    def losses(self, revision: str) -> list[str]:
        """What a downgrade to ``revision`` throws away, newest migration first (nothing for an empty
        catalog)."""
        if not holds_data(self.engine):
            return []
        return [loss for r in reverted_by_downgrade(self.engine, revision) if (loss := downgrade_loses(r))]

    def close(self) -> None:
        self.engine.dispose()
