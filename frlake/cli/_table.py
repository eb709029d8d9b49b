"""Tables that fit the terminal, as DuckDB's duckbox draws them: the columns
that fit at the terminal's width (the others are named below the table), long
values cut with an ellipsis, one line per row, never a wrapped box."""

from __future__ import annotations

import shutil
import textwrap
from collections.abc import Sequence
from numbers import Number

from rich.cells import cell_len, set_cell_size

from frlake.values import display_text

MAX_CELL = 40  # a value wider than this is cut (unless the column has the room alone)
MIN_CELL = 6  # a column narrower than this is left out rather than squeezed


def terminal_width() -> int:
    """COLUMNS if set, else the terminal's width, else 80 (a pipe)."""
    return max(20, shutil.get_terminal_size((80, 24)).columns)


def _text(value: object, column: str = "") -> str:
    text = display_text(value, column)
    if "\n" in text or "\r" in text or "\t" in text:
        text = text.replace("\r\n", "↵").replace("\n", "↵").replace("\r", "↵").replace("\t", " ")
    return text


def _cut(text: str, width: int) -> str:
    """Cut with an ellipsis: at the end, or in the middle of a path (its end names the file)."""
    if cell_len(text) <= width:
        return text
    if "/" in text and width >= 12 and text.isascii():
        head = (width - 1) // 3
        return text[:head] + "…" + text[len(text) - (width - 1 - head):]
    return set_cell_size(text, width - 1) + "…"


def render(columns: Sequence[str], rows: Sequence[Sequence], *, width: int | None = None,
           max_rows: int | None = None, title: str | None = None, types: Sequence[str] = ()) -> str:
    """The table as text, at most ``width`` cells wide. With ``max_rows``,
    a longer result shows its first and last rows around a ⋮ line. When not
    every column fits, the first ones that do and the last one are shown, and
    the rest named below. ``types``: each column's type, a row under the
    header (as the DuckDB shell's)."""
    width = width or terminal_width()
    total_rows = len(rows)
    shown = list(rows)
    elided = max_rows is not None and total_rows > max_rows
    if elided:
        head = (max_rows + 1) // 2
        shown = list(rows[:head]) + list(rows[total_rows - (max_rows - head):])
    texts = [[_text(v, str(c)) for v, c in zip(row, columns, strict=False)] for row in shown]
    numeric = [bool(shown) and all(r[i] is None or (isinstance(r[i], Number) and not isinstance(r[i], bool))
                                   for r in shown) for i in range(len(columns))]
    types = [t.lower() for t in types] if len(types) == len(columns) else []
    natural = [max([cell_len(str(c)), cell_len(types[i]) if types else 0] + [cell_len(t[i]) for t in texts])
               for i, c in enumerate(columns)]

    # Which columns fit: left to right, each cut to MAX_CELL, the last one shrunk into what is left; when
    # they do not all fit, the last column keeps its place at the right (a row's end is often its point).
    room = width - 1  # the left border
    keep: list[int] = []
    widths: dict[int, int] = {}
    last = len(columns) - 1
    fits = sum(min(w, MAX_CELL) + 3 for w in natural) <= room
    if not fits and last > 0:
        widths[last] = min(natural[last], MAX_CELL, max(MIN_CELL, room // 4))
        room -= widths[last] + 3
    for i, w in enumerate(natural[:last] if not fits and last > 0 else natural):
        w = min(w, MAX_CELL) if len(columns) > 1 else w
        need = w + 3  # " value │"
        if need <= room:
            keep.append(i)
            widths[i] = w
            room -= need
        elif room - 3 >= MIN_CELL or not keep:
            keep.append(i)
            widths[i] = max(1, room - 3)
            room = 0
            break
        else:
            break
    if not fits and last > 0:
        keep.append(last)
    # A column cut to MAX_CELL takes back room the others left over.
    for i in keep:
        if room <= 0:
            break
        extra = min(room, natural[i] - widths[i])
        if extra > 0:
            widths[i] += extra
            room -= extra
    left_out = [columns[i] for i in range(len(columns)) if i not in widths]

    def line(left: str, mid: str, right: str) -> str:
        return left + mid.join("─" * (widths[i] + 2) for i in keep) + right

    def cells(values: Sequence[str], align_numbers: bool) -> str:
        parts = []
        for i in keep:
            text = _cut(values[i], widths[i])
            pad = widths[i] - cell_len(text)
            parts.append(" " + (" " * pad + text if align_numbers and numeric[i] else text + " " * pad) + " ")
        return "│" + "│".join(parts) + "│"

    out = []
    if title:
        out.append(title)
    if keep:
        out.append(line("┌", "┬", "┐"))
        out.append(cells([str(c) for c in columns], False))
        if types:
            out.append(cells(types, False))
        out.append(line("├", "┼", "┤"))
        head = (max_rows + 1) // 2 if elided else len(texts)
        for n, t in enumerate(texts):
            if elided and n == head:
                out.append(cells(["⋮"] * len(columns), False))
            out.append(cells(t, True))
        if not texts:
            out.append("│" + _cut(" (no rows)", sum(widths[i] + 3 for i in keep) - 1).ljust(
                sum(widths[i] + 3 for i in keep) - 1) + "│")
        out.append(line("└", "┴", "┘"))
    notes = []
    if elided:
        notes.append(f"{total_rows:,} rows ({max_rows} shown; -f csv or -f json for all)")
    elif rows:
        notes.append(f"{total_rows:,} row{'s' if total_rows != 1 else ''}")
    if left_out:
        named = ", ".join(left_out[:8]) + (f" and {len(left_out) - 8} more" if len(left_out) > 8 else "")
        notes.append(f"{len(columns)} columns ({len(keep)} shown at {width} columns); not shown: {named}")
    if notes:
        out.append(textwrap.fill("; ".join(notes), width, subsequent_indent="  "))
    return "\n".join(out) + "\n"
