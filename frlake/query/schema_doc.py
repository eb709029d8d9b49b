"""What each view and column means, read from docs/schema.md (the one place
they are written), for the SQL console's schema browser. tests/test_docs.py
checks that every view and column a query sees has its meaning there."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

SCHEMA_MD = Path(__file__).resolve().parents[2] / "docs" / "schema.md"
_NAME = re.compile(r"`([a-z_][a-z0-9_]*)`")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@cache
def schema_meanings(path: Path = SCHEMA_MD) -> dict[str, dict]:
    """{view: {"about": text, "columns": {column: meaning}}}; empty if the
    docs are not beside the package (an installed wheel): the browser then
    shows names and types only."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out: dict[str, dict] = {}
    # Each view: a "### `name`: about" heading, then | column | type | meaning |
    for block in re.split(r"\n### ", text)[1:]:
        head, _, body = block.partition("\n")
        m = re.match(r"`(\w+)`:?\s*(.*)", head)
        if not m:
            continue
        columns = {}
        for line in body.split("\n## ", 1)[0].splitlines():
            if not line.startswith("| `"):
                continue
            cells = _cells(line)
            meaning = cells[2] if len(cells) > 2 else ""
            for name in _NAME.findall(cells[0]):
                columns[name] = meaning.replace("`", "") or cells[1]
        out[m.group(1)] = {"about": m.group(2), "columns": columns}
    return out


def meaning(view: str, column: str) -> str | None:
    """A column's meaning; a ``*_ns`` twin without the suffix is its timestamp."""
    doc = schema_meanings().get(view, {}).get("columns", {})
    if column in doc:
        return doc[column]
    if f"{column}_ns" in doc:
        return f"`{column}_ns` as a timestamp (UTC)".replace("`", "")
    if column in ("job", "attempt") and view in schema_meanings():
        return "partition: the job and its attempt"
    return None
