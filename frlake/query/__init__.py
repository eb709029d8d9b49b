"""SQL over the lake (DuckDB): trusted connections, the sandbox for untrusted
SQL, the fleet reports and the attempt views. Names load on first use, so a
command that only needs the report registry starts without DuckDB."""

from importlib import import_module

_LAZY = {
    "connect": "frlake.query.connect", "open_sandbox": "frlake.query.connect",
    "QueryLimits": "frlake.query.sandbox", "QueryResult": "frlake.query.sandbox", "Sandbox": "frlake.query.sandbox",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted(_LAZY)
