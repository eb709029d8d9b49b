"""Every table of every page can be exported as the rows it shows:
``?_format=csv`` or ``?_format=json`` (``&_table=<id>`` for a page with
several tables), datasette's habit. A page lists its tables as ``Export``s;
``respond`` renders the page or, when asked, exports one of them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from flask import Response, render_template, request

from frlake.server.errors import ApiError
from frlake.values import csv_lines, records

FORMATS = ("csv", "json")


@dataclass
class Export:
    id: str  # the table's HTML id
    columns: Sequence[str]
    rows: Sequence[Sequence]  # plain values, one sequence per row, in the order of columns


def export_url(table: str, fmt: str) -> str:
    """This page's URL (its filters kept) asking for one table in ``fmt``."""
    args = [(k, v) for k, v in request.args.items(multi=True) if k not in ("_format", "_table") and v]
    return "?" + urlencode([*args, ("_format", fmt), ("_table", table)])


def respond(template: str, tables: Sequence[Export], **context):
    fmt = request.args.get("_format")
    if not fmt:
        return render_template(template, **context)
    check_format(fmt)
    wanted = request.args.get("_table") or (tables[0].id if tables else "")
    table = next((t for t in tables if t.id == wanted), None)
    if table is None:
        raise ApiError(404, "not_found", f"this page has no table {wanted!r}; it has "
                       + (", ".join(t.id for t in tables) or "none"))
    return exported(table, fmt)


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise ApiError(400, "bad_request", f"'_format' must be one of {', '.join(FORMATS)}, not {fmt!r}")


def exported(table: Export, fmt: str, headers: dict[str, str] | None = None, **more) -> Response:
    """One table as CSV, or as JSON ``{"table", "columns", "rows", **more}`` (rows as objects)."""
    headers = {"Content-Disposition": f'inline; filename="{table.id}.{fmt}"', **(headers or {})}
    if fmt == "csv":
        # for people: a spreadsheet that opens it runs no job or host name as a formula
        return Response("".join(csv_lines(table.columns, table.rows, for_people=True)), mimetype="text/csv",
                        headers=headers)
    body = {"table": table.id, "columns": list(table.columns), "rows": records(table.columns, table.rows), **more}
    return Response(json.dumps(body, default=str) + "\n", mimetype="application/json", headers=headers)
