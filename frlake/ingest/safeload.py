"""Decode untrusted dump bytes into plain Python objects, or refuse.

A Flight Recorder pickle holds only dict, list, tuple, str, int, float, bool and
None, so the unpickler here resolves *no* global at all: anything that asks for
one (``os.system``, ``builtins.eval``, ``__reduce__`` tricks) is refused before
it can run. The C unpickler is iterative, so nesting cannot overflow the stack,
and it reads from an in-memory stream, so a string whose declared length is
larger than the file fails as "truncated" instead of allocating. Bytes and
bytearrays it allocates before it reads them: a count that the file cannot
hold is refused as "truncated" before the unpickler runs (:func:`overrun`), or,
without the compiled reader, once the allocation failed. Before, not after:
CPython 3.11 mis-frees a bytearray it failed to allocate and prints
"deallocated bytearray object has exported buffers" (PyByteArray_FromStringAndSize
frees the object before it sets ``ob_exports``). What a pickle can still do is
share one object many times (a "memo bomb"); :mod:`frlake.ingest.parse` bounds
every expansion of the decoded object against the file's size. Running out of
memory here (a worker's memory budget, see ``worker.memory_budget``) is a
rejection of the file, ``over_memory_budget``.
"""

from __future__ import annotations

import io
import json
import pickle
import pickletools

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


# How each opcode's argument is laid out, from the standard library's own description of the protocol
# (pickletools.opcodes), for the walk of :func:`overrun`: by opcode, its kind and its size (FIXED: the
# argument's bytes; COUNTED, ALLOCATED: the count's). STOPS: where the unpickler stops, having read all it
# will (STOP), or refusing (not an opcode; a global, a persistent id, an extension code or an out-of-band
# buffer, which this unpickler refuses; a call, which with no global nothing on its stack can answer).
STOPS, FIXED, LINE, COUNTED, ALLOCATED, FRAME = range(6)
_STOPPING = {"STOP", "GLOBAL", "INST", "STACK_GLOBAL", "PERSID", "BINPERSID", "EXT1", "EXT2", "EXT4", "REDUCE",
             "BUILD", "OBJ", "NEWOBJ", "NEWOBJ_EX", "NEXT_BUFFER", "READONLY_BUFFER"}
_COUNT_BYTES = {pickletools.TAKEN_FROM_ARGUMENT1: 1, pickletools.TAKEN_FROM_ARGUMENT4: 4,
                pickletools.TAKEN_FROM_ARGUMENT4U: 4, pickletools.TAKEN_FROM_ARGUMENT8U: 8}


def _layouts() -> tuple[bytes, bytes]:
    kinds, sizes = bytearray(256), bytearray(256)
    for op in pickletools.opcodes:
        code, arg = ord(op.code), op.arg
        if op.name in _STOPPING:
            continue
        if op.name == "FRAME":
            kinds[code], sizes[code] = FRAME, 8
        elif arg is None or arg.n >= 0:
            kinds[code], sizes[code] = FIXED, 0 if arg is None else arg.n
        elif arg.n == pickletools.UP_TO_NEWLINE:
            kinds[code] = LINE
        else:  # _pickle.c's load_counted_binbytes and load_counted_bytearray allocate the count, then read
            kinds[code] = ALLOCATED if arg.name.startswith(("bytes", "bytearray")) else COUNTED
            sizes[code] = _COUNT_BYTES[arg.n]
    return bytes(kinds), bytes(sizes)


KINDS, SIZES = _layouts()


def overrun(data: bytes) -> tuple[int, int, int] | None:
    """``(offset, count, left)`` for the first opcode, in the order the C unpickler reads them, that
    allocates a count of bytes larger than the ``left`` bytes the file holds after it; None when none does.

    It follows the unpickler's reads from an io.BytesIO exactly (``_pickle.c``): a read is served from the
    piece of the file it holds (a frame, or the last read) when it fits, else from the file after that
    piece; a line likewise; a counted read takes what is left of the piece and then the file. It stops
    where the unpickler would stop or refuse (KINDS' STOPS, a read past the end). The compiled reader
    (``_fastpickle.overrun``) is the same walk in C; this one runs where there is none."""
    if _fastpickle is not None:
        return _fastpickle.overrun(data, KINDS, SIZES)
    n, pos, end = len(data), 0, 0

    def read(k: int) -> int:  # where k bytes are read from; -1: past the end
        nonlocal pos, end
        if pos + k <= end:
            pos += k
            return pos - k
        if k > n - end:
            return -1
        pos = end = end + k
        return pos - k

    while True:
        at = read(1)
        if at < 0:
            return None
        op = data[at]
        kind, size = KINDS[op], SIZES[op]
        if kind == STOPS:
            return None
        if kind == FIXED:
            if read(size) < 0:
                return None
        elif kind == LINE:
            nl = data.find(b"\n", pos, end)
            if nl < 0:
                nl = data.find(b"\n", end)
                if nl < 0:
                    return None
                end = nl + 1
            pos = nl + 1
        elif kind == FRAME:
            start = read(8)
            if start < 0:
                return None
            length = int.from_bytes(data[start:start + 8], "little")
            start = read(length)
            if start < 0:
                return None
            pos = start  # the frame is read at once, then read from its start
        else:
            start = read(size)
            if start < 0:
                return None
            count = int.from_bytes(data[start:start + size], "little")
            if count > n - pos:
                if kind == ALLOCATED:
                    return at, count, n - pos
                return None
            pos += count
            end = max(end, pos)


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


def _refuse_overrun(data: bytes) -> None:
    declared = overrun(data)
    if declared is not None:
        at, count, left = declared
        raise DumpRejected("truncated", f"the pickle declares {count:,} bytes at offset {at:,}, where {left:,} are "
                                        "left (truncated file)")


def _unpickle(data: bytes) -> object:
    if _fastpickle is not None:  # the walk in C costs microseconds; in Python ten unpicklings: then after a failure
        _refuse_overrun(data)
    stream = io.BytesIO(data)
    try:
        obj = _NoGlobalsUnpickler(stream).load()
    except DumpRejected:
        raise
    except EOFError:
        raise DumpRejected("truncated", "the pickle ends before its STOP opcode (truncated file)") from None
    except MemoryError:
        if _fastpickle is None:  # the compiled walk ran before the unpickler did
            _refuse_overrun(data)
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
