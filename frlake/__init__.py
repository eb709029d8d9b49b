"""frlake: offline storage, diagnosis and SQL for PyTorch Flight Recorder dumps.

Everything goes through one session object::

    import frlake

    with frlake.Frlake.open("frlake-lake") as fl:
        summary = fl.ingest(["samples/fr"])
        print(fl.diagnose("job-5f5228").summary)
"""

from frlake.version import __version__

__all__ = ["Frlake", "Settings", "connect", "__version__"]


def __getattr__(name: str):
    if name == "Frlake":
        from frlake.session import Frlake

        return Frlake
    if name == "Settings":
        from frlake.config import Settings

        return Settings
    raise AttributeError(f"module 'frlake' has no attribute {name!r}")


def connect(lake=None, db_url=None, *, read_only: bool = False):
    """A DuckDB connection with the lake's views, for a quick look from Python
    (the connection outlives the catalog it was built from). ``read_only``:
    locked down as for untrusted SQL. Prefer ``Frlake.connect`` in programs."""
    from frlake.session import Frlake

    session = Frlake.open(lake, db_url, must_exist=True)
    try:
        if read_only:
            return session.sandbox().con
        from frlake.query.connect import connect as _connect

        return _connect(session.catalog, session.lake)
    finally:
        session.close()
