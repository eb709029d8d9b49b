"""Values from the lake and the catalog as plain JSON/CSV scalars, and the
CSV and JSON documents the CLI and the web pages export (one writer for both)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Sequence
from dataclasses import fields
from datetime import UTC, date, datetime
from decimal import Decimal


def plain(value: object) -> object:
    """ISO 8601 for times (with their offset: a time without a zone is UTC,
    as every time frlake stores is), float for decimals, hex for bytes;
    anything else unchanged."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value


class Record:
    """A frozen dataclass that a page, the API and the CLI read by attribute; ``to_dict()`` is the JSON the
    API gives (nested records, tuples and maps made plain, field by field)."""

    def to_dict(self) -> dict:
        return {f.name: deep_plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


Row = dict[str, object]  # one row of a report, by column: its columns are the SQL's, so a mapping


class ReportRows(list[Row]):
    """A report's rows, and its columns even when there is no row."""

    def __init__(self, rows: list[Row], columns: list[str]):
        super().__init__(rows)
        self.columns = columns


def deep_plain(value: object) -> object:
    """``plain`` all the way down: records, lists, tuples and maps of values
    become JSON-ready lists and dicts."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, dict):
        return {str(k): deep_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [deep_plain(v) for v in value]
    return plain(value)


def cell_text(value: object) -> str:
    """One value as a CSV cell or a table cell: nested values as compact JSON,
    never a Python repr; NULL as the empty string."""
    if value is None:
        return ""
    if isinstance(value, (Record, dict, list, tuple, set, frozenset)):
        return json.dumps(deep_plain(value), separators=(",", ":"), default=str)
    value = plain(value)
    return value if isinstance(value, str) else str(value)


def csv_lines(columns: Sequence[str], rows: Iterable[Sequence]) -> Iterable[str]:
    """CSV with LF line ends and a header even without rows."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(columns)
    yield buf.getvalue()
    for row in rows:
        buf.seek(0)
        buf.truncate()
        writer.writerow([cell_text(v) for v in row])
        yield buf.getvalue()


def records(columns: Sequence[str], rows: Iterable[Sequence]) -> list[dict]:
    return [{c: deep_plain(v) for c, v in zip(columns, row)} for row in rows]


def ndjson_lines(columns: Sequence[str], rows: Iterable[Sequence]) -> Iterable[str]:
    for row in rows:
        yield json.dumps({c: deep_plain(v) for c, v in zip(columns, row)}, default=str) + "\n"
