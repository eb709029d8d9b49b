"""Errors frlake raises. Every one carries a message a user can act on."""


class FrlakeError(Exception):
    """Base class for every error frlake reports to a user."""


class DumpRejected(FrlakeError):
    """A file is not a usable Flight Recorder dump.

    ``reason`` is a short stable code recorded in the catalog (e.g. ``truncated``,
    ``unsafe_pickle``); the message says what exactly was wrong.
    """

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


class CatalogError(FrlakeError):
    """The catalog database failed or refused an operation."""


class StaleCatalog(CatalogError):
    """The catalog schema is older (or newer) than this frlake."""


class LakeLocked(FrlakeError):
    """Another ingest holds the lake's write lock."""


class QueryError(FrlakeError):
    """A user query was refused or failed."""
