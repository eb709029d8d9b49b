"""The catalog's Python API. It hands out frozen dataclasses, never ORM rows.

:class:`Catalog` holds the engine and the one session helper; each area is a small store over it:
``catalog.runs`` (frlake.catalog.runs), ``catalog.files`` (the source files seen, frlake.catalog.seen),
``catalog.dumps`` (frlake.catalog.dumps), ``catalog.attempts`` (frlake.catalog.attempts),
``catalog.diagnoses`` (frlake.catalog.diagnoses), ``catalog.notify`` (the alerts' outbox,
frlake.catalog.notify) and ``catalog.stats`` (the numbers ``GET /metrics`` shows, frlake.catalog.stats). The lake's Parquet files are the storage wing's
(frlake.storage.files), which uses this catalog; the catalog knows nothing of it."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import sessionmaker

from frlake.catalog import db
from frlake.catalog.attempts import Attempts
from frlake.catalog.diagnoses import Diagnoses
from frlake.catalog.dumps import Dumps
from frlake.catalog.notify import Notify
from frlake.catalog.runs import Runs
from frlake.catalog.seen import SeenFiles
from frlake.catalog.stats import Stats

__all__ = ["Catalog"]

# Catalog.version: text, so nothing is compiled per call (the server asks at every request). A diagnosis stored
# again changes max(diagnosed_at): on SQLite the replacing incident may get the id of the one it deletes.
_VERSION = text(
    "SELECT (SELECT max(id) FROM lake_files WHERE status IN ('publishing', 'committed')),"
    " (SELECT max(id) FROM incidents), (SELECT max(diagnosed_at) FROM incidents),"
    " (SELECT max(id) FROM files), (SELECT max(id) FROM ingest_runs),"
    " (SELECT max(last_seen_at) FROM attempts), (SELECT max(id) FROM retired_files),"
    " (SELECT count(id) FROM lake_files WHERE status = 'committed')"
)


class Catalog:
    """The catalog database: what was seen, ingested, rejected, and published."""

    def __init__(self, db_url: str, *, check: bool = True):
        self.url = db_url
        self.engine = db.make_engine(db_url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if check:
            db.ensure_current(self.engine, db_url)
        self.runs = Runs(self.session)
        self.files = SeenFiles(self.session)
        self.dumps = Dumps(self.session)
        self.attempts = Attempts(self.session)
        self.diagnoses = Diagnoses(self.session)
        self.notify = Notify(self.session)
        self.stats = Stats(self.session)

    def close(self) -> None:
        self.engine.dispose()

    def session(self, write: bool = False):
        return db.session_scope(self._sessions, write)

    def version(self) -> tuple:
        """Changes whenever what the SQL views show changes: new lake files,
        new or replaced diagnoses, new files seen."""
        with self.session() as s:  # one plain statement: the server asks at every request
            return tuple(s.execute(_VERSION).one())

    def rows(self, query) -> list[tuple]:
        """The rows of a read-only SELECT built on the models (the SQL views'
        sources, frlake/query/catalog_views.py)."""
        with self.session() as s:  # a Core statement on the session's connection: no ORM result rows (2x faster)
            return [tuple(r) for r in s.connection().execute(query)]
