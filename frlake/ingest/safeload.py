"""Decode untrusted dump bytes into plain Python objects, or refuse.

A Flight Recorder pickle holds only dict, list, tuple, str, int, float, bool and
None, so the unpickler here resolves *no* global at all: anything that asks for
one (``os.system``, ``builtins.eval``, ``__reduce__`` tricks) is refused before
it can run. The C unpickler is iterative, so nesting cannot overflow the stack,
and it reads from an in-memory buffer, so a declared length larger than the
file fails as "truncated" instead of allocating. What a pickle can still do is
share one object many times (a "memo bomb"); :mod:`frlake.ingest.parse` bounds
every expansion of the decoded object against the file's size. Running out of
memory here (a worker's memory budget, see ``worker.memory_budget``) is a
rejection of the file, ``over_memory_budget``.
"""

from __future__ import annotations

import io
import json
import pickle

from frlake.errors import DumpRejected
from frlake.ingest.native import fastpickle as _fastpickle  # None without a C compiler

PICKLE = "pickle"
JSON = "json"

_JSON_START = frozenset(b"{[")
_WHITESPACE = b" \t\r\n"


class _NoGlobalsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # noqa: D401 - pickle hook
        raise DumpRejected(
            "unsafe_pickle",
            f"pickle asks for the Python global {module}.{name}; a Flight Recorder dump needs none",
        )

    def persistent_load(self, pid):
        raise DumpRejected("unsafe_pickle", "pickle uses a persistent id; a Flight Recorder dump has none")


def detect_encoding(data: bytes) -> str:
    """Tell pickle from JSON by the content, never by the file name."""
    if not data:
        raise DumpRejected("empty", "the file is empty")
    if data[0] == 0x80:  # PROTO opcode: pickle protocol 2 and later
        return PICKLE
    head = data[:64].lstrip(_WHITESPACE)
    if head and head[0] in _JSON_START:
        return JSON
    if data[:1] in (b"(", b"]", b"}", b"l", b"d"):  # protocol 0/1 pickles open with a container
        return PICKLE
    raise DumpRejected("unknown_encoding", "the file is neither a pickle nor JSON")


def decode(data: bytes, max_bytes: int, native: bool = False) -> tuple[object, str]:
    """Return ``(object, encoding)`` for the bytes of one dump file.

    ``native``: a pickle that the fast reader knows is read by it, its
    entries left as columns to be (``_fastpickle.NativeEntries``); the parse
    of such an object may raise :class:`frlake.errors.NotNative`, and then
    the caller decodes the bytes again without ``native``."""
    if len(data) > max_bytes:
        raise DumpRejected("too_large", f"the file is {len(data):,} bytes, over the {max_bytes:,}-byte limit")
    encoding = detect_encoding(data)
    if encoding == PICKLE:
        if native and _fastpickle is not None and type(data) is bytes:
            try:
                top = _fastpickle.read(data)
            except MemoryError:  # the reference says whether the dump is over the memory budget
                top = None
            if top is not None:
                return top, encoding
        return _unpickle(data), encoding
    return _parse_json(data), encoding


def _unpickle(data: bytes) -> object:
    stream = io.BytesIO(data)
    try:
        obj = _NoGlobalsUnpickler(stream).load()
    except DumpRejected:
        raise
    except EOFError:
        raise DumpRejected("truncated", "the pickle ends before its STOP opcode (truncated file)") from None
    except MemoryError:
        raise DumpRejected("over_memory_budget", "the pickle expands to more than the memory budget allows") from None
    except pickle.UnpicklingError as exc:
        text = str(exc)
        if "truncated" in text or "ran out of input" in text.lower():
            raise DumpRejected("truncated", f"the pickle is truncated ({text})") from None
        raise DumpRejected("corrupt_pickle", f"the pickle is corrupt ({text})") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, UnicodeError) as exc:
        raise DumpRejected("corrupt_pickle", f"the pickle is corrupt ({type(exc).__name__}: {exc})") from None
    if stream.tell() != len(data):
        # Bytes after the STOP opcode mean a torn or appended write.
        raise DumpRejected("corrupt_pickle", f"the pickle has {len(data) - stream.tell():,} bytes after its end")
    return obj


def _parse_json(data: bytes) -> object:
    try:
        return json.loads(data)
    except RecursionError:
        raise DumpRejected("too_deep", "the JSON is nested too deeply") from None
    except UnicodeDecodeError as exc:
        raise DumpRejected("invalid_json", f"the JSON is not valid UTF-8 ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        reason = "truncated" if exc.pos >= len(data.rstrip()) else "invalid_json"
        raise DumpRejected(reason, f"the file is not valid JSON ({exc})") from None
    except MemoryError:
        raise DumpRejected("over_memory_budget", "the JSON expands to more than the memory budget allows") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):  # sys.get_int_max_str_digits(): 4,300 by default
            raise DumpRejected("out_of_range", "the JSON holds an integer of thousands of digits") from None
        raise DumpRejected("invalid_json", f"the file is not valid JSON ({exc})") from None
