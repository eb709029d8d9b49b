"""Errors frlake raises. Every one carries a message a user can act on."""


class FrlakeError(Exception):
    """Base class for every error frlake reports to a user."""


class NotNative(Exception):
    """The fast reader of pickles (frlake/ingest/_fastpickle.pyx) cannot vouch
    for a dump: the reference (the safe unpickler and the parser) reads it,
    and says what is wrong with it. Never reaches a user."""


# Why a file was set aside: the stable codes recorded in the catalog's
# ``files.reason`` column, with what each means (docs/security.md lists them all).
REJECT_REASONS: dict[str, str] = {
    "empty": "the file is empty",
    "unknown_encoding": "neither a pickle nor JSON",
    "too_large": "over the file-size cap, or a count or string over its limit",
    "truncated": "the file ends early",
    "corrupt_pickle": "not a well-formed pickle",
    "invalid_json": "not valid JSON",
    "unsafe_pickle": "the pickle asks for a Python global or a persistent id",
    "too_deep": "nested deeper than a dump ever is",
    "too_many_nodes": "shared references expand it far beyond its size (a memo bomb)",
    "not_flight_recorder": "valid data, but no Flight Recorder entries",
    "bad_schema": "a field holds a value of the wrong type or shape",
    "bad_value": "a number that is not finite (NaN, Infinity) where a count or time belongs",
    "out_of_range": "an integer beyond what its column holds (64 bits; 32 for ranks)",
    "bad_text": "a string that is not valid Unicode (an unpaired surrogate)",
    "over_memory_budget": "reading it needs more memory than the per-worker budget",
    "unknown_identity": "its job, attempt or rank cannot be told (a host no source names is stored as unknown)",
    "bad_host_map": "a file named as a host map (frlake.ingest.hostmaps) is not one: what is wrong",
    "rank_outside_world": "its rank is outside the world its own pg_config describes",
    "debug_server_text": "a torch debug server text report frlake does not read (fr_trace_<ts>.txt: derived from the dumps)",
    "unreadable": "the file cannot be read",
    "bad_archive": "a tar archive that cannot be read",
    "worker_killed": "its worker process was stopped (CPU budget or the kernel)",
    "internal_error": "frlake failed on it unexpectedly; the detail names the exception",
}

# When a later ingest reads a rejected file again without --retry-rejected
# (frlake.ingest.pipeline): "options" when it runs with other identity options
# (--job, --attempt, --host, --rank, --layout, --hosts) or a newer frlake;
# "always" for a failure of the environment, not of the file; every other
# reason only with a newer frlake (a parser that improved may read it).
RETRY_WHEN: dict[str, str] = {"unknown_identity": "options", "unreadable": "always"}

MAX_MESSAGE = 500  # characters of a rejection message the catalog keeps


def safe_text(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters, unpaired surrogates escaped: safe
    to store in the catalog and to show, whatever a dump put in it."""
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


class DumpRejected(FrlakeError):
    """A file is not a usable Flight Recorder dump.

    ``reason`` is a short stable code recorded in the catalog (one of
    ``REJECT_REASONS``); the message says what exactly was wrong. The message
    is cut to ``MAX_MESSAGE`` characters and made storable, so a value quoted
    from a dump can never make the catalog row large or unencodable.
    """

    def __init__(self, reason: str, message: str):
        message = safe_text(message)
        super().__init__(message)
        self.reason = reason
        self.message = message


class UsageError(FrlakeError):
    """The command was asked for something it cannot mean (a malformed value, options that do not go
    together, nothing to act on): the command line is at fault, not the lake (exit status 2)."""


class CatalogError(FrlakeError):
    """The catalog database failed or refused an operation."""


class StaleCatalog(CatalogError):
    """The catalog schema is older (or newer) than this frlake."""


class LakeLocked(FrlakeError):
    """Another ingest holds the lake's write lock."""


class WorkersCannotStart(FrlakeError):
    """Ingest worker processes die as they start: the environment, not a file, is at fault."""


class StaleBuild(FrlakeError):
    """The compiled reader was built from other sources than the ones installed: it must be rebuilt."""


class QueryError(FrlakeError):
    """A user query was refused or failed. ``status`` and ``code``: what an API error says
    (frlake.server.errors)."""

    status, code = 400, "query_refused"


class ResultTooLarge(QueryError):
    """A user query's result is more than can be returned: the query is at fault, not frlake (HTTP 413)."""

    status, code = 413, "result_too_large"
