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
    as every time frlake stores is), float for decimals but int for a
    decimal of scale 0 (DuckDB's HUGEINT and UBIGINT sums reach Python as
    those: a float would round them), hex for bytes; anything else unchanged."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value.is_finite() and value.as_tuple().exponent == 0 else float(value)
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
        # a report of hosts: {"attempts", "hosts_known", "share"} of the window (None: not one)
        self.coverage: dict | None = None

    def coverage_words(self) -> str | None:
        c = self.coverage
        if not c or not c["attempts"]:
            return None
        return (f"hosts known for {c['share']:.0%} of the attempts in the window ({c['hosts_known']} of "
                f"{c['attempts']}); the others' dumps name no host (frlake hosts attach adds one)"
                if c["hosts_known"] < c["attempts"] else None)


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


# The one way frlake shows a number or a time to a person (terminal tables, pages; CSV and JSON keep the
# values whole): a share as a percentage, a size in bytes with its unit, a report's score to three decimals,
# other floats to four significant digits (never -0), times in UTC to the second.
SHARE_COLUMNS = ("rate", "share", "confidence")  # a column named so, or ending _rate or _share, is a share


def is_share(column: str) -> bool:
    return column in SHARE_COLUMNS or column.endswith(("_rate", "_share"))


def is_size(column: str) -> bool:
    return column in ("bytes", "size") or column.endswith(("_bytes", "_size"))


def is_score(column: str) -> bool:
    return column == "score" or column.endswith("_score")


def score_text(score: float) -> str:
    """``0.413``, ``0.046``, ``16.647``: a score (the hosts report's, the drain list's) to three decimals on
    every row, so that a column of them reads as one."""
    return f"{score:.3f}".replace("-0.000", "0.000")


def percent_text(share: float) -> str:
    return f"{share * 100:.1f}%".replace("-0.0%", "0.0%")


def size_text(n: float) -> str:
    """``1.2 MB``: decimal units, as disks and `ls -h --si` count."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def float_text(value: float) -> str:
    return f"{value:.4g}" if value != 0 else "0"


def time_text(value: datetime) -> str:
    """``2026-11-29 07:48:12 UTC``: the pages', the reports' and the logs' one form."""
    value = value if value.tzinfo else value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def display_text(value: object, column: str = "") -> str:
    """A value as a person reads it in a table of ``column``'s values (cell_text for the rest)."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        if is_share(column):
            return percent_text(value)
        if is_score(column):
            return score_text(value)
        if is_size(column):
            return size_text(value)
        return float_text(value)
    if isinstance(value, int) and not isinstance(value, bool) and is_size(column):
        return size_text(value)
    if isinstance(value, datetime):
        return time_text(value)
    return cell_text(value)


# What makes a spreadsheet read a cell as a formula when it begins it (OWASP, "CSV Injection").
_FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(text: str) -> str:
    """A text cell that no spreadsheet runs: one that begins as a formula does gets a leading ``'``
    (OWASP's advice), which spreadsheets show as text and do not display."""
    return "'" + text if text.startswith(_FORMULA_LEADS) else text


def _person_cell(value: object) -> str:
    text = cell_text(value)
    return text if isinstance(plain(value), (int, float, Decimal)) else spreadsheet_safe(text)


def csv_lines(columns: Sequence[str], rows: Iterable[Sequence], *, for_people: bool = False) -> Iterable[str]:
    """CSV with LF line ends and a header even without rows. ``for_people`` (the web UI's downloads, opened
    in spreadsheets): text cells that begin as a formula does are made text (:func:`spreadsheet_safe`);
    numbers stay as they are. Without it (``frlake query -f csv``, the API's exports: CSV for programs)
    every cell is exact."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([spreadsheet_safe(str(c)) for c in columns] if for_people else columns)
    yield buf.getvalue()
    for row in rows:
        buf.seek(0)
        buf.truncate()
        if for_people:
            writer.writerow([_person_cell(v) for v in row])
        else:
            writer.writerow([cell_text(v) for v in row])
        yield buf.getvalue()


def records(columns: Sequence[str], rows: Iterable[Sequence]) -> list[dict]:
    return [{c: deep_plain(v) for c, v in zip(columns, row)} for row in rows]


def ndjson_lines(columns: Sequence[str], rows: Iterable[Sequence]) -> Iterable[str]:
    for row in rows:
        yield json.dumps({c: deep_plain(v) for c, v in zip(columns, row)}, default=str) + "\n"
