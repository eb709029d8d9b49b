"""The relations of a batch's attempts made at once (frlake.query.batch: a connection whose tables hold the
rows of many small attempts).

:func:`frlake.diagnose.evidence.load` builds an attempt's relations (its dumps read, entries, calls, collective
instances, what each rank holds per group) and reads them: about twenty statements, each costing more to plan
than to run on a small attempt. Here each is run once over every attempt of the batch, its rows keyed by
(job, attempt), and what load reads of them is fetched once and split per attempt in Python
(:class:`BatchRows`). The attempt's relations are then views of the batch's, filtered by the attempt that
load sets on the connection, for the analyses that read them after load (mismatch, straggler, timing).

Only attempts whose relations the batch's statements make exactly as load would: every dump read (no rank
dumped twice), every entries file with stored signatures, each group name one member list, no torchcomms
counter to renumber. The others are made attempt by attempt, as before."""

from __future__ import annotations

import duckdb

from frlake.diagnose.evidence import (
    ATTEMPT_VARIABLE,
    DTYPE_SIG_STORED,
    END_MARKER_STORED,
    JOB_VARIABLE,
    LAST_ENTRIES,
    PENDING_TAIL,
    SIZE_SIG_STORED,
    BatchReads,
    BatchRows,
    EveryAttempt,
    build_calls,
    build_rank_groups,
    entry_columns,
)
from frlake.diagnose.mismatch import P2P_KEYS_DISAGREE, STATES
from frlake.diagnose.straggler import (
    LATE_EVENTS,
    LATE_SPAN,
    LATENESS,
    LATENESS_STATS,
    Lateness,
    RankLateness,
    threshold,
)
from frlake.diagnose.timing import TIMING_ROWS
from frlake.query.vocabulary import NEWEST_DUMP, Relations

Key = tuple[str, int]

# The batch's relations (every attempt's rows, keyed) and each attempt's view of them.
_BATCH = Relations(dumps="_bd", entries="_be", blocks="_bblk", calls="_bc", instances="_binst", group_keys="_bgk",
                   rank_groups="_brg")
VIEWS = Relations(dumps="_vd", entries="_ve", blocks="_vblk", calls="_vc", instances="_vinst", group_keys="_bgk",
                  rank_groups="_vrg", one_dump_per_rank=True)
_VIEWED = ("dumps", "entries", "blocks", "calls", "instances", "rank_groups")


class BatchRelations:
    """The relations of the batch's attempts made at once, on ``con``, for those of ``signed`` (attempts whose
    every entries file stores the entries' signatures) where they are load's exactly; ``reads.made`` gets
    each one's rows (:class:`BatchRows`), which load takes instead of making the attempt's relations. Its
    views read the attempt that load sets on the connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection, reads: BatchReads, signed: list[Key]):
        # every dump read (no rank dumped twice), each name one member list
        keys = [key for key in signed if key not in reads.several and (key, reads.lists(key)[0]) not in reads.split]
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {_BATCH.dumps} AS
            SELECT d.job, d.attempt, d.rank, d.host, d.dump_id, d.first_record_id, d.n_entries, s.written_ns,
                   s.written_from, s.n_pending, s.oldest_pending_ns, s.timeout_ms, s.overdue, s.snapshot_ns,
                   s.snapshot_from
            FROM dumps d LEFT JOIN snapshots s ON s.dump_id = d.dump_id AND s.job = d.job AND s.attempt = d.attempt
            QUALIFY row_number() OVER (PARTITION BY d.job, d.attempt, d.rank ORDER BY {NEWEST_DUMP}) = 1
            """
        )
        # every attempt's entries, as its files are read (each attempt's in the order load reads them)
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {_BATCH.entries} AS
            SELECT en.job, en.attempt,
                   {entry_columns("en.pg_name", END_MARKER_STORED, SIZE_SIG_STORED, DTYPE_SIG_STORED, True)}
            FROM entries en
            """
        )
        counted = set(con.execute(f"SELECT DISTINCT job, attempt FROM {_BATCH.entries} WHERE desc_is_backend")
                      .fetchall())  # torchcomms' shape: load may renumber their sequence ids
        self.keys = sorted(key for key in keys if key not in counted)
        build_rank_groups(con, _BATCH, build_calls(con, _BATCH, EveryAttempt), EveryAttempt)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {_BATCH.group_keys} (rank BIGINT, pg_name VARCHAR, pg VARCHAR)")
        for name in _VIEWED:
            _attempt_view(con, getattr(VIEWS, name), getattr(_BATCH, name))
        k = EveryAttempt.k
        self._read = _by_key(con, f"SELECT job, attempt, rank, host, first_record_id, n_entries FROM {_BATCH.dumps} "
                                  "ORDER BY job, attempt, rank")
        self._members = {table: _by_key(con, f"""
            SELECT c.job, c.attempt, c.pg_name, any_value(c.{column}) FROM {table} c WHERE c.group_size IS NOT NULL
            GROUP BY c.job, c.attempt, c.pg_name, c.group_size, hash(c.{column})""")
            for table, column in (("groups", "ranks"), ("group_runs", "rank_runs"))}
        self._desc = _by_key(con, "SELECT c.job, c.attempt, c.pg_name, min(c.pg_desc) FROM groups c "
                                  "WHERE c.group_size IS NOT NULL GROUP BY ALL")
        self._rank_groups = _by_key(con, f"""SELECT job, attempt, rank, pg_name, min(pg_desc), min(lo), max(hi)
                                             FROM {_BATCH.rank_groups} WHERE NOT is_p2p GROUP BY ALL""")
        self._last = _by_key(con, LAST_ENTRIES.format(k=k, rank_groups=_BATCH.rank_groups))
        self._p2p = {key: n for key, ((n,),) in _by_key(
            con, f"SELECT job, attempt, coalesce(sum(n_p2p), 0) FROM {_BATCH.rank_groups} GROUP BY ALL").items()}
        self._timing = _by_key(con, TIMING_ROWS.format(k=k, dumps=_BATCH.dumps))
        self._pending = _by_key(con, PENDING_TAIL.format(
            k=k, gk="g.job, g.attempt, ", pk="p.job, p.attempt, ", same=EveryAttempt.same("s", "g"),
            rank_groups=_BATCH.rank_groups, dumps=_BATCH.dumps, where=""))
        self._differ = _by_key(con, f"SELECT job, attempt, pg_name, seq FROM {_BATCH.instances} WHERE differ")
        self._p2p_disagree = set(_by_key(con, P2P_KEYS_DISAGREE.format(k=k, entries=_BATCH.entries)))
        self._states = _by_key(con, STATES.format(k=k, ck="c.job, c.attempt, ", same=EveryAttempt.same("l", "c"),
                                                  calls=_BATCH.calls, instances=_BATCH.instances))
        self._lateness = _lateness(con, self.keys)
        reads.made.update((key, self._rows(key)) for key in self.keys)

    def _rows(self, key: Key) -> BatchRows:
        return BatchRows(VIEWS, self._read.get(key, []), {t: rows.get(key, []) for t, rows in self._members.items()},
                         self._desc.get(key, []), self._rank_groups.get(key, []), self._last.get(key, []),
                         self._p2p.get(key, 0), self._timing.get(key, []), self._pending.get(key, []),
                         self._differ.get(key, []), key in self._p2p_disagree, self._states.get(key, []),
                         self._lateness.get(key))

    @property
    def entries(self) -> str:
        """The batch's entries (keyed by job and attempt), and its dumps read (:attr:`dumps`)."""
        return _BATCH.entries

    @property
    def dumps(self) -> str:
        return _BATCH.dumps


_LATE, _VIEW_LATE = "_blate", "_vlate"


def _lateness(con: duckdb.DuckDBPyConnection, keys: list[Key]) -> dict[Key, Lateness]:
    """straggler.analyze's reads of each attempt (its events at its own threshold), made at once."""
    k = EveryAttempt.k
    con.execute(LATENESS.format(late=_LATE, k=k, ck="c.job, c.attempt, ", calls=_BATCH.calls,
                                instances=_BATCH.instances))
    _attempt_view(con, _VIEW_LATE, _LATE)
    stats = _by_key(con, LATENESS_STATS.format(k=k, late=_LATE))
    late = {key: threshold({r[0]: RankLateness(*r) for r in rows}) for key, rows in stats.items() if rows}
    events = _by_key(con, LATE_EVENTS.format(
        k=k, threshold="threshold",
        late=f"""{_LATE} JOIN (SELECT unnest($jobs) AS job, unnest($attempts) AS attempt,
                                      unnest($thresholds) AS threshold) USING (job, attempt)"""),
        {"jobs": [j for j, _ in late], "attempts": [a for _, a in late], "thresholds": [float(t) for t in late.values()]})
    span = {key: n for key, ((n,),) in _by_key(con, LATE_SPAN.format(k=k, late=_LATE) + " GROUP BY ALL").items()}
    return {key: Lateness(_VIEW_LATE, stats.get(key, []), events.get(key, []), span.get(key)) for key in keys}


def _attempt_view(con: duckdb.DuckDBPyConnection, view: str, table: str) -> None:
    """``view``: the rows of the batch's ``table`` of the attempt load sets on the connection, without the key."""
    con.execute(f"""CREATE OR REPLACE TEMP VIEW {view} AS SELECT * EXCLUDE (job, attempt) FROM {table}
                    WHERE job = getvariable('{JOB_VARIABLE}') AND attempt = getvariable('{ATTEMPT_VARIABLE}')""")


def _by_key(con: duckdb.DuckDBPyConnection, sql: str, params: dict | None = None) -> dict[Key, list[tuple]]:
    """The rows of ``sql`` (led by job and attempt) by attempt, each attempt's in the statement's order."""
    out: dict[Key, list[tuple]] = {}
    for job, attempt, *row in con.execute(sql, params).fetchall():
        out.setdefault((job, attempt), []).append(tuple(row))
    return out
