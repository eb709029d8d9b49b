"""frlake: offline storage, diagnosis and SQL for PyTorch Flight Recorder dumps."""

__version__ = "0.1.0"


def connect(lake=None, db_url=None, *, read_only=False):
    """A DuckDB connection with the lake's views; see :func:`frlake.query.connect`."""
    from frlake.query import connect as _connect

    return _connect(lake, db_url, read_only=read_only)
