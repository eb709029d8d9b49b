"""frlake's SQL (DuckDB's dialect) as Spark SQL.

The reports and the derived views are written once, for DuckDB, and run
there as written. For Spark the same text is parsed by sqlglot and written
in Spark's dialect, after a few rewrites of what sqlglot would otherwise
get wrong without a word:

* ``list(x ORDER BY k ...)`` (and ``FILTER``, ``DISTINCT``): sqlglot drops
  the ORDER BY. Here it becomes ``collect_list`` of structs sorted by a
  comparator that follows every key's direction and DuckDB's NULL placement
  (a NULL is last unless ``NULLS FIRST``), then the values alone; a list
  keeps its NULL values, as DuckDB's does;
* ``make_timestamp(us)``: a timestamp without time zone (what DuckDB
  returns), counted from the epoch, so the session's time zone plays no part;
* ``mode(x ORDER BY x)``: ``mode(x, true)``, the smallest of the most
  frequent values, as DuckDB's ordered mode;
* ``MAP {}``: ``map()``.

Anything else sqlglot cannot write for Spark raises (``ErrorLevel.RAISE``),
and so does a construct whose meaning differs between the engines
(``any_value``, an unordered ``mode``), rather than run a different query.
"""

from __future__ import annotations

from functools import lru_cache

try:
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ErrorLevel
except ImportError as e:  # an optional extra: say which
    raise ImportError("frlake.engines needs sqlglot: pip install 'frlake[spark]'") from e

_EPOCH = "TIMESTAMP_NTZ'1970-01-01 00:00:00'"


class NotPortable(ValueError):
    """A statement uses DuckDB SQL that would mean something else on Spark."""


@lru_cache(maxsize=256)
def to_spark(sql: str) -> str:
    """One DuckDB statement as Spark SQL (``$name`` parameters become ``:name``)."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    tree = tree.transform(_rewrite)
    return tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)


def referenced_tables(sql: str) -> set[str]:
    """The tables and views a statement reads (its own CTEs left out)."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    return {t.name for t in tree.find_all(exp.Table)} - ctes


def _spark(node: exp.Expression) -> str:
    """A part of a statement in Spark's dialect (a rewritten node's parts are not visited by transform)."""
    return node.transform(_rewrite).sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)


def _rewrite(node: exp.Expression) -> exp.Expression:
    if isinstance(node, exp.Filter) and _is_ordered_list(node.this):
        return _sorted_list(node.this, node.expression.this)
    if _is_ordered_list(node):
        return _sorted_list(node, None)
    if isinstance(node, exp.UnixToTime):
        if node.args.get("scale") is None or node.args["scale"].name != "6":
            raise NotPortable(f"only make_timestamp(microseconds) is portable, not {node.sql('duckdb')}")
        return sqlglot.parse_one(f"TIMESTAMPADD(MICROSECOND, {_spark(node.this)}, {_EPOCH})", read="spark")
    if isinstance(node, exp.Mode):
        return _mode(node)
    if isinstance(node, exp.AnyValue):
        raise NotPortable("any_value picks a different row on each engine: use min or max")
    if isinstance(node, exp.ToMap) and isinstance(node.this, exp.Struct) and not node.this.expressions:
        return exp.Anonymous(this="MAP", expressions=[])
    return node


def _is_ordered_list(node: exp.Expression) -> bool:
    return isinstance(node, exp.ArrayAgg) and isinstance(node.this, exp.Order)


def _mode(node: exp.Mode) -> exp.Expression:
    order = node.this
    if not isinstance(order, exp.Order):
        raise NotPortable("mode(x) breaks ties differently on each engine: write mode(x ORDER BY x)")
    keys = order.expressions
    if len(keys) != 1 or keys[0].args.get("desc") or keys[0].this != order.this:
        raise NotPortable("only mode(x ORDER BY x) is portable (the smallest of the most frequent values)")
    return sqlglot.parse_one(f"MODE({_spark(order.this)}, TRUE)", read="spark")


def _sorted_list(agg: exp.ArrayAgg, where: exp.Expression | None) -> exp.Expression:
    """``list(value ORDER BY keys) [FILTER (WHERE ...)]`` as sorted Spark structs."""
    order: exp.Order = agg.this
    value, distinct = order.this, False
    if isinstance(value, exp.Distinct):
        if len(value.expressions) != 1:
            raise NotPortable("list(DISTINCT ...) takes one value")
        value, distinct = value.expressions[0], True
    keys = order.expressions
    if distinct and any(k.this != value for k in keys):
        raise NotPortable("list(DISTINCT x ORDER BY ...) may only order by x")
    fields = [f"{_spark(k.this)} AS k{i}" for i, k in enumerate(keys)] + [f"{_spark(value)} AS v"]
    collect = f"{'COLLECT_SET' if distinct else 'COLLECT_LIST'}(STRUCT({', '.join(fields)}))"
    if where is not None:
        collect += f" FILTER (WHERE {_spark(where)})"
    cases = []
    for i, k in enumerate(keys):
        first = -1 if k.args.get("nulls_first") else 1  # where a NULL goes, relative to a value
        lt = 1 if k.args.get("desc") else -1  # what l < r gives
        cases += [f"WHEN l.k{i} IS NULL AND r.k{i} IS NOT NULL THEN {first}",
                  f"WHEN l.k{i} IS NOT NULL AND r.k{i} IS NULL THEN {-first}",
                  f"WHEN l.k{i} < r.k{i} THEN {lt}", f"WHEN l.k{i} > r.k{i} THEN {-lt}"]
    compare = f"(l, r) -> CASE {' '.join(cases)} ELSE 0 END"
    return sqlglot.parse_one(f"TRANSFORM(ARRAY_SORT({collect}, {compare}), s -> s.v)", read="spark")
