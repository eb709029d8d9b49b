"""Checks every part of the parser applies to untrusted values: the expansion
budget, bounded JSON for unknown fields, integer ranges and storable text.
Each failure is a DumpRejected with a stable reason code."""

from __future__ import annotations

import json

from frlake.errors import DumpRejected
from frlake.ingest.limits import Limits

NONE = type(None)


def wrong_type(name: str, found: set[type]) -> DumpRejected:
    names = ", ".join(sorted(t.__name__ for t in found))
    return DumpRejected("bad_schema", f"field '{name}' holds a value of type {names}")


def short_str(value: object, name: str, limits: Limits) -> str:
    """A short top-level text (version, identity keys, group names): a str,
    int or float, within the string limit, storable as UTF-8."""
    if not isinstance(value, (str, int, float)):
        raise DumpRejected("bad_schema", f"'{name}' is a {type(value).__name__}")
    if isinstance(value, int):
        int64(value, f"'{name}'")
    text_value = str(value)
    if len(text_value) > limits.max_string:
        raise DumpRejected("too_large", f"'{name}' is {len(text_value):,} characters long")
    return storable_text(text_value, f"'{name}'")


class Budget:
    __slots__ = ("left", "size")

    def __init__(self, size: int, limits: Limits):
        self.size = size
        self.left = max(limits.expansion_floor, size * limits.expansion_per_byte)

    def spend(self, n: int, what: str) -> None:
        self.left -= n
        if self.left < 0:
            raise DumpRejected(
                "too_many_nodes",
                f"{what} expands far beyond the file's size (shared references: a memo bomb?)",
            )


def bounded_json(value: object, budget: Budget, limits: Limits) -> str:
    """Serialize an unknown field to JSON, refusing deep or exploding structures."""

    def plain(obj: object, depth: int) -> object:
        if depth > limits.max_depth:
            raise DumpRejected("too_deep", f"an unknown field is nested deeper than {limits.max_depth} levels")
        budget.spend(1, "an unknown field")
        if obj is None or isinstance(obj, (bool, float)):
            return obj
        if isinstance(obj, int):
            return int64(obj, "an unknown field")
        if isinstance(obj, str):
            if len(obj) > limits.max_string:
                raise DumpRejected("too_large", f"a string of {len(obj):,} characters exceeds the limit")
            budget.spend(len(obj) // 16, "an unknown field")  # a shared string is paid for each time
            return obj
        if isinstance(obj, bytes):
            budget.spend(len(obj) // 16, "an unknown field")
            return obj.hex()
        if isinstance(obj, (list, tuple)):
            budget.spend(len(obj), "an unknown field")
            return [plain(v, depth + 1) for v in obj]
        if isinstance(obj, dict):
            budget.spend(len(obj), "an unknown field")
            wrong = set(map(type, obj)) - _KEY_TYPES
            if wrong:  # str() of a tuple key could expand a memo bomb
                raise wrong_type("an unknown field's key", wrong)
            return {k if type(k) is str else str(plain(k, depth + 1)): plain(v, depth + 1) for k, v in obj.items()}
        raise DumpRejected("bad_schema", f"an unknown field holds a {type(obj).__name__}")

    # ensure_ascii: an unpaired surrogate becomes the escape "\\ud800", which UTF-8 can store
    return json.dumps(plain(value, 0), separators=(",", ":"), allow_nan=True)


_KEY_TYPES = {str, int, float, bool, type(None)}
_I64 = 1 << 63


def int64(value: int, name: str, bound: int = _I64) -> int:
    if not -bound <= value < bound:
        raise DumpRejected("out_of_range", f"{name} holds an integer beyond {bound.bit_length()} bits")
    return value


def ints_in_range(values: list, name: str, bound: int = _I64) -> None:
    """Every int of ``values`` (which may hold None) fits a signed column of
    ``bound``; comparing a huge int is cheap, printing one is not."""
    ints = [v for v in values if type(v) is int] if None in values else values
    if ints and (max(ints) >= bound or min(ints) < -bound):
        raise DumpRejected("out_of_range", f"'{name}' holds an integer beyond {bound.bit_length()} bits")


def storable_text(value: str, name: str) -> str:
    """``value`` if UTF-8 can store it: Python strings may hold unpaired
    surrogates (a pickle's BINUNICODE, a JSON "\\ud800"); those are refused."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise DumpRejected("bad_text", f"{name} holds an unpaired surrogate, which UTF-8 cannot store") from None
    return value


def storable_output(value: object, budget: Budget, limits: Limits) -> str:
    """A captured log (a health check's output): text, cut to the string
    limit (the start of a log says what failed), storable as UTF-8."""
    if not isinstance(value, str):
        raise DumpRejected("bad_schema", f"a health check's output is a {type(value).__name__}, not text")
    budget.spend(len(value) // 16, "a health check's output")
    if len(value) > limits.max_string:
        value = value[: limits.max_string - 1] + "\u2026"
    return storable_text(value, "a health check's output")
