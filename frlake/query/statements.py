"""Which untrusted SQL may run, decided by DuckDB's own parser.

Only queries: SELECT (WITH, FROM-first, VALUES, DESCRIBE, SHOW, SUMMARIZE
parse as SELECT) and EXPLAIN [ANALYZE] of a query. EXPLAIN ANALYZE runs the
statement it explains, so the explained text is cut out with DuckDB's
tokenizer and checked again. Inside a query, every table function must be one
that only reads, and no function that executes SQL text or changes state may
be called; the functions are found in DuckDB's own syntax tree
(``json_serialize_sql``), wherever they are nested."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterable

import duckdb

from frlake.errors import QueryError

# Table functions that only read (files are refused by the connection itself:
# the sandbox opens no file at all). Anything not named here is refused, so a
# new DuckDB's new table functions are refused until someone looks at them.
READING_TABLE_FUNCTIONS = frozenset("""
    range generate_series unnest repeat repeat_row json_each json_tree summary histogram histogram_values
    test_all_types test_vector_types pg_timezone_names icu_calendar_names
    duckdb_columns duckdb_constraints duckdb_databases duckdb_dependencies duckdb_functions duckdb_indexes
    duckdb_keywords duckdb_memory duckdb_optimizers duckdb_schemas duckdb_sequences duckdb_settings duckdb_tables
    duckdb_temporary_files duckdb_types duckdb_variables duckdb_views
    pragma_table_info pragma_show pragma_version pragma_platform pragma_collations pragma_database_size
    pragma_storage_info pragma_metadata_info pragma_user_agent
    read_parquet parquet_scan parquet_metadata parquet_schema parquet_file_metadata parquet_kv_metadata
    read_csv read_csv_auto read_json read_json_auto read_ndjson read_ndjson_auto read_json_objects
    read_ndjson_objects read_text read_blob glob sniff_csv
""".split())

# Scalar functions that change state (sequences, the random seed, the log).
# Every function DuckDB marks has_side_effects is either here or reviewed as
# harmless in tests/test_sql_sandbox.py.
STATE_CHANGING_FUNCTIONS = frozenset({"nextval", "setval", "setseed", "write_log"})

_EXPLAIN_OPTIONS = {"analyze", "analyse", "verbose"}
_COMMENT = duckdb.token_type.comment
_OPERATOR = duckdb.token_type.operator

_parser_lock = threading.Lock()
_parser: duckdb.DuckDBPyConnection | None = None  # parses only: no file, no table


@functools.lru_cache(maxsize=64)
def _parse(method: str, sql: str):
    """The parser connection's ``extract_statements`` (method "extract") or ``json_serialize_sql`` text of
    ``sql``; the connection is made on first use and shared by every thread, one at a time. Remembered: a
    statement is checked, then read for the views and the attempt it needs, and parsed once."""
    global _parser
    with _parser_lock:
        if _parser is None:
            _parser = duckdb.connect(":memory:", config={"enable_external_access": False, "threads": 1})
        if method == "extract":
            return tuple(_parser.extract_statements(sql))
        return _parser.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()[0]


def check_statement(sql: str) -> None:
    """Raise QueryError unless ``sql`` is exactly one query that only reads."""
    _check(_one_statement(sql), depth=0)


def _one_statement(sql: str):
    try:
        statements = _parse("extract", sql)
    except duckdb.Error as exc:
        raise QueryError(f"the SQL does not parse: {_first_line(exc)}") from None
    if len(statements) != 1:
        raise QueryError(f"give exactly one statement, not {len(statements)}")
    return statements[0]


def _check(statement, depth: int) -> None:
    kind = statement.type
    if kind == duckdb.StatementType.EXPLAIN and depth == 0:
        inner = explained_text(statement.query)
        if not inner.strip():
            raise QueryError("EXPLAIN of nothing: give EXPLAIN [ANALYZE] SELECT ...")
        _check(_one_statement(inner), depth + 1)
    elif kind == duckdb.StatementType.SELECT:
        _check_functions(statement.query)
    else:
        name = getattr(kind, "name", str(kind))
        where = " under EXPLAIN (EXPLAIN ANALYZE runs it)" if depth else ""
        raise QueryError(f"only SELECT, WITH and EXPLAIN queries are allowed; this is a {name} statement{where}")


def explained_text(sql: str) -> str:
    """The statement an EXPLAIN explains: the text after ``EXPLAIN``, its
    ``ANALYZE``/``VERBOSE`` words and its ``(option, ...)`` list, comments
    skipped. Cut by DuckDB's tokenizer, so comments and strings cannot
    hide where it starts."""
    tokens = duckdb.tokenize(sql)
    ends = [offset for offset, _ in tokens[1:]] + [len(sql)]
    seen_explain = False
    depth = 0
    for (offset, kind), end in zip(tokens, ends):
        if kind == _COMMENT:
            continue
        text = sql[offset:end].strip()
        if not seen_explain:
            if text.lower() != "explain":
                raise QueryError("EXPLAIN must come first")
            seen_explain = True
        elif depth > 0 or (kind == _OPERATOR and text.startswith("(")):
            if kind == _OPERATOR:
                depth += text.count("(") - text.count(")")
        elif text.lower() not in _EXPLAIN_OPTIONS:
            return sql[offset:]
    return ""


def views_read(sql: str, views: Iterable[str]) -> frozenset[str] | None:
    """Which of ``views`` a checked query reads, or None when its text does not say: it names a
    table that is neither one of them nor one of its CTEs (DuckDB's error then lists the views
    it has), a table function (``duckdb_views()``), ``SHOW TABLES``, a name with a schema, or the
    serializer does not take it. The caller then sets up every view."""
    statement = _one_statement(sql)
    if statement.type == duckdb.StatementType.EXPLAIN:
        statement = _one_statement(explained_text(statement.query))
    try:
        tree = _syntax_tree(statement.query)
    except QueryError:
        return None
    names, ctes = set(), set()
    for item in _nodes(tree):
        kind = item.get("type")
        if kind == "TABLE_FUNCTION" or (kind == "SHOW_REF" and item.get("query") is None):
            return None  # duckdb_views(), SHOW TABLES, SHOW name: what they show is every view
        if kind == "BASE_TABLE":
            if item.get("schema_name") or item.get("catalog_name"):
                return None
            names.add(str(item.get("table_name", "")).lower())
        ctes.update(str(cte.get("key", "")).lower() for cte in (item.get("cte_map") or {}).get("map") or ())
    views = {v.lower() for v in views}
    # a CTE may read the view of its own name (WITH jobs AS (SELECT * FROM jobs ...)): kept
    return frozenset(names & views) if names <= views | ctes else None


def _check_functions(sql: str) -> None:
    tree = _syntax_tree(sql)
    for kind, name in _functions(tree):
        if kind == "table" and name not in READING_TABLE_FUNCTIONS:
            raise QueryError(f"the table function {name}() is not allowed in the sandbox "
                             "(it runs SQL text, changes state or is not known to only read)")
        if name in STATE_CHANGING_FUNCTIONS:
            raise QueryError(f"the function {name}() changes state and is not allowed in the sandbox")


def _syntax_tree(sql: str) -> dict:
    tree = json.loads(syntax_text(sql))
    if tree.get("error"):
        raise QueryError(f"the query cannot be checked: {tree.get('error_message', 'unknown error')}")
    return tree


def syntax_text(sql: str) -> str:
    """DuckDB's syntax tree of ``sql`` as JSON text (``json_serialize_sql``)."""
    return _parse("serialize", sql)


def _nodes(tree):
    """Every object (dict) anywhere in a syntax tree."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _functions(node):
    """(kind, lower-case name) of every function call anywhere in the tree."""
    for item in _nodes(node):
        if item.get("type") == "TABLE_FUNCTION" and isinstance(item.get("function"), dict):
            yield "table", str(item["function"].get("function_name", "")).lower()
        if item.get("class") == "FUNCTION":
            yield "scalar", str(item.get("function_name", "")).lower()


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
