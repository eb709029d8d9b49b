"""Load what one attempt recorded, summarised by DuckDB.

The heavy work (millions of entries for a 1,000-rank job) happens in SQL;
Python only sees per-rank, per-group summaries and the few collectives that
look wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb
import pyarrow as pa

from frlake.diagnose.timing import Timing, read_timing
from frlake.diagnose.world import infer as infer_world
from frlake.query.vocabulary import (
    END_MARKER,
    GATHER,
    NEWEST_DUMP,
    STATE_OF,
    UNEVEN,
    Relations,
    expand_runs,
    listed_members,
    listed_rows,
    member_lists,
)
from frlake.schema import RANK_PROGRESS_SQL, schema_variable
from frlake.signatures import EMPTY_LIST, NO_LIST

_NO_TENSORS = f"IN ({NO_LIST}, {EMPTY_LIST})"  # the signature of a missing or empty list
END_MARKER_STORED = (f"(op = 'coalesced' OR (op LIKE '%coalesced' AND input_sizes_sig {_NO_TENSORS} "
                      f"AND output_sizes_sig {_NO_TENSORS}))")


def _shapes(column: str) -> str:
    """A list of tensor shapes, for hash(): with each shape's length, since DuckDB's hash of a nested list
    is its elements' (hash([[1024, 4096]]) = hash([[1024], [4096]]), hash([[]]) = hash([]))."""
    return f"{column}, list_transform({column}, lambda s: len(s))"


# Which tensors every member of a collective must agree on: each side's shapes by the signature an entry
# stores (frlake.signatures; {i} and {o}), or by DuckDB's hash of its lists for the files written before.
_SIZE_SIG_OF = f"""CASE WHEN op IN {UNEVEN} THEN hash(op) WHEN op = 'scatter' THEN hash({{o}})
                        WHEN op IN {GATHER} THEN hash({{i}}) ELSE hash({{i}}, {{o}}) END"""
_SIZE_SIG = _SIZE_SIG_OF.format(i=_shapes("input_sizes"), o=_shapes("output_sizes"))
SIZE_SIG_STORED = _SIZE_SIG_OF.format(i="input_sizes_sig", o="output_sizes_sig")
# Entry e belongs to coalesced block b (a row of _blk): same rank, group and sequence ids.
_IN_BLOCK = "b.rank = e.rank AND b.pg_name = e.pg_name AND b.seq = e.seq AND b.p2p_seq = coalesce(e.p2p_seq, -1)"
_DTYPE_SIG_OF = f"""CASE WHEN op = 'scatter' THEN hash({{o}}) WHEN op IN {GATHER} THEN hash({{i}})
                         ELSE hash({{i}}, {{o}}) END"""
_DTYPE_SIG = _DTYPE_SIG_OF.format(i="input_dtypes", o="output_dtypes")
DTYPE_SIG_STORED = _DTYPE_SIG_OF.format(i="input_dtypes_sig", o="output_dtypes_sig")
_STATE = STATE_OF.format(e="en")
# torchcomms keeps one collective_seq_id counter for all its communicators, incremented by every op (send and
# recv included), and writes p2p_seq_id 0 and the backend as the group's desc: a rank whose dump has this shape
# gets its sequence ids numbered per group, in the order it enqueued its ops.
_SHARED_COUNTER = """
    SELECT rank FROM {entries} GROUP BY rank
    HAVING bool_and(desc_is_backend) AND max(coalesce(p2p_seq, 0)) = 0
       AND (count(DISTINCT pg_name) > 1 OR bool_or(is_p2p)) AND count(seq) = count(DISTINCT seq)
    ORDER BY rank
"""


@dataclass
class LastEntry:
    pg: str | None
    pg_desc: str | None
    seq: int | None
    op: str | None
    is_p2p: bool
    peer: int | None
    state: str | None
    t: int | None
    stack_id: int | None
    counters: bool = False  # known from pg_status alone (a dump without entries): weaker evidence


@dataclass
class Evidence:
    job: str
    attempt: int
    hosts: dict[int, str]  # dumped rank -> host
    wrapped: set[int]  # ranks whose ring buffer lost old entries
    members: dict[str, list[int]]  # group -> member ranks
    desc: dict[str, str | None]
    last_seq: dict[tuple[int, str], int]  # (rank, group) -> last collective seq enqueued
    first_seq: dict[tuple[int, str], int]
    last: dict[int, LastEntry]  # where each rank is stuck: its first unfinished entry, else its last
    world: list[int] = field(default_factory=list)
    rel: Relations = field(default_factory=Relations)
    several_dumps: dict[int, int] = field(default_factory=dict)  # rank -> dumps that claim it (the newest is used)
    timing: Timing = field(default_factory=lambda: Timing())
    pending_tail: dict[str, PendingTail] = field(default_factory=dict)  # pg -> its newest pending collective
    progress: list[dict] = field(default_factory=list)  # ranks with several snapshots: moving or stuck
    live_hosts: dict[int, str] = field(default_factory=dict)  # rank -> host, from the debug server's live stacks
    names: dict[str, str] = field(default_factory=dict)  # group -> its name, for groups that share a name
    renumbered: list[int] = field(default_factory=list)  # ranks whose seq ids were numbered per group (torchcomms)
    p2p_entries: int | None = None  # sends and recvs that name their peers (None: not counted)
    batch_rows: BatchRows | None = None  # what the analyses read of its relations, read with its batch's
    world_inferred: list[str] = field(default_factory=list)  # how ranks no dump holds were found (world.py)
    # pg_config lists the dumps contradict (group -> the members it lists): weighed as no group's members
    contradicted: dict[str, list[int]] = field(default_factory=dict)

    def name(self, pg: str | None) -> str | None:
        """The name a group was given (what the user sees in the dumps)."""
        return self.names.get(pg, pg) if pg is not None else None


@dataclass
class PendingTail:
    pg: str
    pg_desc: str | None
    seq: int
    op: str | None
    waiting: list[int]  # members that have it pending


# What the entries keep for the summary tables, with load's ``durations`` only (a temporary table stores a
# column of NULLs in full: 256 MB at 16,384 ranks).
_DURATIONS = """, en.duration_ms,
               (en.time_discovered_completed_ns - en.time_discovered_started_ns) / 1e6 - en.duration_ms
                 AS watchdog_lag_ms"""


def load(con: duckdb.DuckDBPyConnection, job: str, attempt: int, *, durations: bool = False,
         batch: BatchReads | None = None) -> Evidence:
    """``batch``: what was read once for all the attempts of the batch the connection holds (:class:`BatchReads`)."""
    params = {"job": job, "attempt": attempt}
    key = (job, attempt)
    made = batch.made.get(key) if batch is not None and durations else None
    if made is not None:  # its relations were made with the batch's: views of its rows (frlake.diagnose.batched)
        rel, several, lists, split, renumbered = made.rel, {}, batch.lists(key), {}, []
        con.execute(f"SET VARIABLE {JOB_VARIABLE} = $job", {"job": job})
        con.execute(f"SET VARIABLE {ATTEMPT_VARIABLE} = $attempt", {"attempt": attempt})
        read = made.read
    else:
        rel, several, read, lists, split, renumbered = _relations(con, params, durations, batch)
    return _evidence(con, params, rel, several, read, lists, split, renumbered, batch, made)


def _relations(con, params: dict, durations: bool, batch: BatchReads | None) -> tuple:
    """Build the attempt's relations (Relations) on ``con``; returns them with what was read to build them:
    (rel, several, read, lists, split, renumbered)."""
    job, attempt = params["job"], params["attempt"]
    key = (job, attempt)
    several = {} if batch and key not in batch.several else _several(con, params)
    rel = Relations(one_dump_per_rank=not several)
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.dumps} AS
        SELECT d.rank, d.host, d.dump_id, d.first_record_id, d.n_entries, s.written_ns, s.written_from,
               s.n_pending, s.oldest_pending_ns, s.timeout_ms, s.overdue, s.snapshot_ns, s.snapshot_from
        FROM dumps d LEFT JOIN (SELECT * FROM snapshots WHERE job = $job AND attempt = $attempt) s USING (dump_id)
        WHERE d.job = $job AND d.attempt = $attempt
        QUALIFY row_number() OVER (PARTITION BY d.rank ORDER BY {NEWEST_DUMP}) = 1
        """,
        params,
    )
    # every dump of the attempt is read (no rank dumped twice): the batch's reads of its lists hold
    whole = batch is not None and not several
    # the dumps read, fetched once: their hosts, and the sums below
    read = con.execute(f"SELECT rank, host, first_record_id, n_entries FROM {rel.dumps} ORDER BY rank").fetchall()
    lists = batch.lists(key) if whole else member_lists(con, params, rel)
    split = _group_keys(con, params, rel, lists, named=whole and (key, lists[0]) not in batch.split)
    pg = "coalesce(k.pg, en.pg_name)" if split else "en.pg_name"
    keys = f"LEFT JOIN {rel.group_keys} k ON k.rank = en.rank AND k.pg_name = en.pg_name" if split else ""
    # the stored signatures when every entries file read has them (reading the lists back cost half the pass)
    signed = con.execute(f"SELECT getvariable('{schema_variable('entries')}')").fetchone()[0] or 1
    marker, size_sig, dtype_sig = ((END_MARKER_STORED, SIZE_SIG_STORED, DTYPE_SIG_STORED) if signed >= 2
                                   else (END_MARKER, _SIZE_SIG, _DTYPE_SIG))
    # The entries as a view, unless kept (below; a view takes no parameters: the attempt is in two variables of
    # the connection). Each pass reads the few columns it needs from the Parquet files again: at 16,384 ranks, keeping 16M rows
    # in memory first cost more (3.5 s) than every pass's reading (the diagnosis took 5.7-6.5 s instead of 10).
    con.execute(f"SET VARIABLE {JOB_VARIABLE} = $job", {"job": job})
    con.execute(f"SET VARIABLE {ATTEMPT_VARIABLE} = $attempt", {"attempt": attempt})
    # Files written before the stored signatures: their lists are hashed once, into a table. A small attempt's
    # entries are kept too: then each pass binds a table, not the views over the files (a query of a 4-rank
    # attempt cost more to plan through them than to run).
    small = sum(n for *_, n in read if n is not None) <= KEEP_ENTRIES
    kept = signed < 2 or small
    if kept:
        _attach_work(con)
    con.execute(
        f"""
        {f"CREATE OR REPLACE TABLE {WORK_DB}._e" if kept else f"CREATE OR REPLACE TEMP VIEW {_READ}"} AS
        SELECT {entry_columns(pg, marker, size_sig, dtype_sig, durations)}
        FROM entries en {keys}
        WHERE en.job = getvariable('{JOB_VARIABLE}') AND en.attempt = getvariable('{ATTEMPT_VARIABLE}') AND {rel.newest('en.')}
        """
    )
    source = f"{WORK_DB}._e" if kept else _READ
    renumbered: list[int] = []
    if con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {source} WHERE desc_is_backend LIMIT 1)").fetchone()[0]:
        renumbered = [r for (r,) in con.execute(_SHARED_COUNTER.format(entries=source)).fetchall()]
    if renumbered:
        # per rank and group, in the order of enqueueing: collectives 1, 2, ...; a p2p op takes the number of
        # the group's last collective before it (as ProcessGroupNCCL does) and a p2p number of its own
        order = "OVER (PARTITION BY rank, pg_name ORDER BY entry_index ROWS UNBOUNDED PRECEDING)"
        shared = "rank IN (SELECT unnest($renumbered))"
        _attach_work(con)
        con.execute(
            f"""
            CREATE OR REPLACE TABLE {WORK_DB}._e AS
            SELECT * REPLACE (
              CASE WHEN {shared} THEN count(*) FILTER (WHERE NOT is_p2p) {order} ELSE seq END AS seq,
              CASE WHEN {shared} THEN count(*) FILTER (WHERE is_p2p) {order} ELSE p2p_seq END AS p2p_seq)
            FROM {source}
            """,
            {"renumbered": renumbered},
        )
        source = f"{WORK_DB}._e"
    con.execute(f"CREATE OR REPLACE TEMP VIEW {rel.entries} AS SELECT * FROM {source}")
    # One row per rank and collective call (group, seq): a coalesced block (the collectives that share its
    # end marker's group and sequence ids) is one call of several ops, compared with the other members'
    # blocks as a whole. Every other collective entry is a call of its own.
    build_rank_groups(con, rel, build_calls(con, rel, OneAttempt), OneAttempt)
    return rel, several, read, lists, split, renumbered


def _evidence(con, params: dict, rel: Relations, several: dict[int, int], read: list[tuple], lists: tuple[str, str],
              split: dict[str, str], renumbered: list[int], batch: BatchReads | None, made: BatchRows | None) -> Evidence:
    """The attempt's evidence, from its relations (``rel``) or, ``made``, from their rows read with the batch's."""
    job, attempt = params["job"], params["attempt"]
    key = (job, attempt)
    whole = batch is not None and not several
    hosts, wrapped = {}, set()
    for rank, host, first_record, _ in read:
        hosts[rank] = host
        if first_record is not None and first_record > 0:
            wrapped.add(rank)
    group = "coalesce(k.pg, c.pg_name)" if split else "c.pg_name"
    keys = f"LEFT JOIN {rel.group_keys} k ON k.rank = c.rank AND k.pg_name = c.pg_name" if split else ""
    if made is not None:
        members: dict[str, set[int]] = {}
        for pg, ranks in made.members[lists[0]]:  # as listed_members reads them
            members.setdefault(pg, set()).update(expand_runs(ranks) if lists[1] == "rank_runs" else ranks)
    else:
        members = listed_members(con, params, rel, lists, group, keys)
    listed = {pg for pg, ranks in members.items() if ranks}
    # the least of the lists' descriptions, whatever order the rows come in
    desc: dict[str, str | None] = dict(made.desc if made is not None else con.execute(
        f"SELECT {group}, min(c.pg_desc) FROM groups c {keys} WHERE {listed_rows(rel)} GROUP BY ALL", params).fetchall())
    last_seq, first_seq = {}, {}
    for rank, pg, pg_desc, lo, hi in made.rank_groups if made is not None else con.execute(
        f"""SELECT rank, pg_name, min(pg_desc), min(lo), max(hi) FROM {rel.rank_groups}
            WHERE NOT is_p2p GROUP BY ALL"""
    ).fetchall():
        members.setdefault(pg, set()).add(rank)  # membership inferred from what ranks recorded
        desc.setdefault(pg, pg_desc)
        first_seq[(rank, pg)], last_seq[(rank, pg)] = lo, hi
    contradicted = _contradicted_lists(con, params, rel, lists, members, listed, {pg for _, pg in first_seq}, hosts)
    for pg in contradicted:
        del members[pg]
        desc.pop(pg, None)
        listed.discard(pg)
    last = {}
    # Each rank's first unfinished entry (once something finished), else its last, from its groups' own.
    for row in made.last if made is not None else con.execute(
            LAST_ENTRIES.format(k="", rank_groups=rel.rank_groups)).fetchall():
        rank, pg, pg_desc, seq, op, is_p2p, src, dst, state, t, stack_id = row
        peer = None
        if is_p2p and src is not None and dst is not None:
            peer = _global_peer(members.get(pg), rank, src, dst)
        elif is_p2p and len(members.get(pg, ())) == 2 and rank in members[pg]:
            peer = min(members[pg] - {rank})  # no peer in the name (torchcomms): a pair's other member
        last[rank] = LastEntry(pg, pg_desc, seq, op, bool(is_p2p), peer, state, t, stack_id)
    p2p_entries = made.p2p if made is not None else con.execute(
        f"SELECT coalesce(sum(n_p2p), 0) FROM {rel.rank_groups}").fetchone()[0]
    if any(not n for *_, n in read):  # a dump read has no entries
        _from_pg_status(con, params, rel, members, desc, last_seq, last)
    live_hosts = {} if batch and key not in batch.live else _live_hosts(con, params)
    # the world and the members no dump lists (gloo lists none): from the ranks, groups and hosts there are;
    # the default group spans the world, whoever recorded in it
    gathered = _gathered(con, params, rel, bool(split), members, desc,
                         batch.gathered.get(key, []) if whole and not split else None)
    world = infer_world(hosts, members, desc, gathered, listed, set(live_hosts))
    timing = read_timing(con, params, rel, world.members, last_seq, made.timing if made is not None else None)
    return Evidence(job, attempt, hosts, wrapped, {k: sorted(v) for k, v in world.members.items()}, desc,
                    last_seq, first_seq, last, sorted(world.ranks), rel, several, names=split, renumbered=renumbered,
                    world_inferred=world.how,
                    timing=timing,
                    pending_tail=pending_tails(made.pending) if made is not None else _pending_tail(con, params, rel),
                    p2p_entries=p2p_entries, batch_rows=made,
                    progress=batch.progress.get(key, []) if batch else _progress(con, params),
                    live_hosts=live_hosts, contradicted=contradicted)


def _contradicted_lists(con, params: dict, rel: Relations, lists: tuple[str, str], members: dict[str, set[int]],
                        listed: set[str], recorded: set[str], hosts: dict[int, str]) -> dict[str, list[int]]:
    """The listed groups (pg_config) that no entry records in and whose list leaves out a rank whose own dump
    lists it: gloo's one entry keyed ``''`` holds whichever group torch registered last (the world's ranks
    in a job of one group; ``'[]'`` in torch 2.13 and a subgroup's ``'[0, 1]'`` in every rank's dump since
    2.14 in a job with others). Such a list describes no group of the dumps, and is not taken for anyone's
    members nor for the world. A group the entries record in keeps its list (a rank that records in it is
    its member whatever the list says: ``members`` holds both)."""
    unrecorded = sorted(pg for pg in listed if pg not in recorded)
    if not unrecorded or not hosts:
        return {}
    outside = {pg for pg in unrecorded if any(r not in members[pg] for r in hosts)}
    if not outside:
        return {}
    # each distinct list once, with the ranks whose dumps hold it (a 16,384-rank world's list is read as its
    # runs, not as the 268M numbers of every dump's copy)
    table, column = lists
    found = set()
    for pg, held, holders in con.execute(
        f"""SELECT c.pg_name, any_value(c.{column}), list(c.rank) FROM {table} c WHERE {listed_rows(rel)}
            AND c.pg_name IN (SELECT unnest($pgs)) AND c.group_size > 0 GROUP BY c.pg_name, hash(c.{column})""",
        {**params, "pgs": sorted(outside)}).fetchall():
        ranks = set(expand_runs(held) if column == "rank_runs" else held)
        if any(r not in ranks for r in holders):
            found.add(pg)
    return {pg: sorted(members[pg]) for pg in sorted(found)}


def _several(con, params) -> dict[int, int]:
    return dict(con.execute(
        "SELECT rank, count(*) FROM dumps WHERE job = $job AND attempt = $attempt GROUP BY rank HAVING count(*) > 1",
        params).fetchall())


@dataclass
class BatchReads:
    """What :func:`load` reads of the tables alone (not of its relations), read by one statement each for
    all the attempts a batch's connection holds (frlake.query.batch: its tables hold their rows only): a
    statement per attempt costs more to plan than to run on a small one. ``several`` and ``live``: the
    attempts that have a rank dumped twice, live stacks (only those are read on their own, as before);
    ``progress``: each attempt's :func:`_progress` rows (none: not in it)."""

    several: set[tuple[str, int]]
    live: set[tuple[str, int]]
    progress: dict[tuple[str, int], list[dict]]
    listed: dict[str, dict[tuple[str, int], int]]  # table -> attempt -> its member lists (member_lists)
    split: set[tuple[tuple[str, int], str]]  # (attempt, table) where a name has several member lists
    gathered: dict[tuple[str, int], list[tuple]]  # attempt -> _gathered's (rank, group name, most) of every rank
    staged: set[tuple[str, int]] = field(default_factory=set)  # the attempts with live stacks live_stacks reads
    frames: dict[int, list] = field(default_factory=dict)  # the frames of the stacks the batch's entries name
    # the attempts whose relations were made with the batch's (frlake.diagnose.batched): what load reads of them
    made: dict[tuple[str, int], BatchRows] = field(default_factory=dict)

    def holds(self, key: tuple[str, int]) -> bool:
        """Whether the attempt's relations were made with the batch's (then :func:`load` builds none)."""
        return key in self.made

    def lists(self, key: tuple[str, int]) -> tuple[str, str]:
        """member_lists of an attempt whose every dump is read."""
        complete = self.listed["groups"].get(key, 0) == self.listed["group_runs"].get(key, 0)
        return ("group_runs", "rank_runs") if complete else ("groups", "ranks")

    @classmethod
    def read(cls, con: duckdb.DuckDBPyConnection) -> BatchReads:
        several = set(con.execute(
            "SELECT DISTINCT job, attempt FROM (SELECT job, attempt FROM dumps GROUP BY job, attempt, rank "
            "HAVING count(*) > 1)").fetchall())
        live = set(con.execute("SELECT DISTINCT job, attempt FROM live_stacks WHERE host IS NOT NULL").fetchall())
        progress: dict[tuple[str, int], list[dict]] = {}
        for job, attempt, *row in con.execute(_progress_sql("job, attempt,", "")).fetchall():
            progress.setdefault((job, attempt), []).append(_progress_row(*row))
        listed = {table: {(job, attempt): n for job, attempt, n in con.execute(
            f"SELECT job, attempt, count(*) FROM {table} WHERE group_size IS NOT NULL GROUP BY ALL").fetchall()}
            for table in ("groups", "group_runs")}
        split = {((job, attempt), table) for table, column in (("groups", "ranks"), ("group_runs", "rank_runs"))
                 for job, attempt in con.execute(
                     f"SELECT DISTINCT job, attempt FROM (SELECT job, attempt FROM {table} WHERE group_size > 0 "
                     f"GROUP BY job, attempt, pg_name HAVING min({column}) <> max({column}))").fetchall()}
        gathered: dict[tuple[str, int], list[tuple]] = {}
        for job, attempt, *row in con.execute(_GATHERED_BY_RANK).fetchall():
            gathered.setdefault((job, attempt), []).append(tuple(row))
        staged = set(con.execute(f"SELECT DISTINCT job, attempt FROM live_stacks WHERE {_LIVE}").fetchall())
        frames = {sid: f for sid, f in con.execute(
            "SELECT stack_id, frames FROM stacks WHERE stack_id IN (SELECT DISTINCT stack_id FROM entries)").fetchall()}
        return cls(several, live, progress, listed, split, gathered, staged, frames)


@dataclass
class BatchRows:
    """What load reads of one attempt's relations, read with the batch's (frlake.diagnose.batched): each list
    in the order load's own statement gives it (where it has one)."""

    rel: Relations  # the attempt's relations: views of the batch's
    read: list[tuple]  # rank, host, first_record_id, n_entries of each dump read, by rank
    members: dict[str, list[tuple]]  # member list table -> (group, its listed ranks) as listed_members reads them
    desc: list[tuple]  # (group, its least listed description)
    rank_groups: list[tuple]  # (rank, group, description, first seq, last seq)
    last: list[tuple]  # LAST_ENTRIES, by rank
    p2p: int
    timing: list[tuple]  # TIMING_ROWS, by rank
    pending: list[tuple]  # PENDING_TAIL, by group
    differ: list[tuple]  # the collective instances (group, seq) whose members' signatures differ (mismatch)
    p2p_disagree: bool  # whether a send and a recv could disagree (mismatch._P2P_DISAGREE)
    states: list[tuple]  # mismatch.STATES
    lateness: object = None  # straggler.Lateness: what straggler.analyze reads (None: it reads its own)


KEEP_ENTRIES = 2_000_000  # an attempt of at most this many entries is held in WORK_DB while it is diagnosed
WORK_DB = "frlake_work"  # the connection's compressed in-memory database: the attempt's entries, when kept
_READ = "_e_read"  # the view of the attempt's entries in its Parquet files (load)
JOB_VARIABLE, ATTEMPT_VARIABLE = "frlake_diagnosed_job", "frlake_diagnosed_attempt"  # the connection's variables it reads


def _attach_work(con: duckdb.DuckDBPyConnection) -> None:
    """The attempt's entries, when they are kept (lists hashed, sequence ids renumbered: load), live in an
    in-memory database that DuckDB compresses (a temporary table is not): at 16,384 ranks its 16M rows take
    about 650 MB instead of 2.3 GB. A DuckDB without the option gets an uncompressed one."""
    try:
        con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {WORK_DB} (COMPRESS)")
    except duckdb.Error:
        con.execute(f"ATTACH IF NOT EXISTS ':memory:' AS {WORK_DB}")


# The group a dump without entries counts in by its rank-local process group id (pg_status' keys): id 0 is
# the default group on every rank; another id is the n-th group the rank joined, which ranks that made their
# groups in one order (a DeviceMesh, a loop of new_group) share with their peers of that kind, not its name.
LOCAL_GROUP = "#{}"  # its name; its description is LOCAL_DESC
LOCAL_DESC = "rank-local pg id"


def _from_pg_status(con, params, rel: Relations, members: dict[str, set[int]], desc: dict[str, str | None],
                    last_seq: dict[tuple[int, str], int], last: dict[int, LastEntry]) -> None:
    """A dump without entries (includeCollectives=False, onlyActive with nothing active) still says, in its
    pg_status, the last collective it enqueued and completed in each of its groups, keyed by the rank-local
    pg id. No dump of such a rank names its groups, so they are matched across ranks by that id (id 0 is the
    default group): each such rank is placed in the group of an id where it is furthest ahead of a peer
    that is behind (it waits there for them), else at its default group's count. Weaker evidence, and said
    so (``LastEntry.counters``); gloo counts a timed-out op as completed, so ranks are compared by what they
    enqueued. Called when a dump read has no entries."""
    default = next((pg for pg, d in sorted(desc.items()) if d == "default_pg"), None)
    rows = con.execute(
        f"""
        SELECT p.rank, p.pg_id, p.last_enqueued_collective
        FROM pg_status p
        WHERE p.job = $job AND p.attempt = $attempt
          AND p.dump_id IN (SELECT dump_id FROM {rel.dumps} WHERE coalesce(n_entries, 0) = 0)
          AND p.last_enqueued_collective IS NOT NULL AND p.last_enqueued_collective >= 0
        ORDER BY p.rank, p.pg_id
        """,
        params,
    ).fetchall()
    counts: dict[str, dict[int, int]] = {}  # pg id -> rank -> last enqueued
    for rank, pg_id, enqueued in rows:
        if rank not in last:  # a rank with entries of its own (another dump) says more
            counts.setdefault(pg_id, {})[rank] = enqueued
    name = {pg_id: (default or "0") if pg_id == "0" else LOCAL_GROUP.format(pg_id) for pg_id in counts}
    for pg_id, by_rank in counts.items():
        pg = name[pg_id]
        desc.setdefault(pg, "default_pg" if pg_id == "0" else LOCAL_DESC)
        members.setdefault(pg, set()).update(by_rank)
        for rank, enqueued in by_rank.items():
            last_seq[(rank, pg)] = max(enqueued, last_seq.get((rank, pg), enqueued))
    # per id, its front (the most any rank enqueued) and how many ranks are behind it
    front = {pg_id: max(by_rank.values()) for pg_id, by_rank in counts.items()}
    behind = {pg_id: sum(n < front[pg_id] for n in by_rank.values()) for pg_id, by_rank in counts.items()}
    for rank in sorted({r for by_rank in counts.values() for r in by_rank}):
        # where it is at the front with peers behind: the id with the most behind, then the lowest id
        ahead = [(behind[pg_id], pg_id) for pg_id, by_rank in counts.items()
                 if by_rank.get(rank) == front[pg_id] and behind[pg_id]]
        if ahead:
            pg_id = min(ahead, key=lambda a: (-a[0], _as_int(a[1])))[1]
            state = "scheduled"
        else:
            pg_id, state = "0", "completed"
        pg = name.get(pg_id, default or "0")
        seq = counts.get(pg_id, {}).get(rank)
        last[rank] = LastEntry(pg, desc.get(pg), seq, None, False, None, state, None, None, counters=True)


def _as_int(pg_id: str) -> int:
    return int(pg_id) if pg_id.isdigit() else 0


_GATHERED = """CASE WHEN len(en.output_sizes) > 1 THEN len(en.output_sizes)
                    ELSE list_product(en.output_sizes[1]) / nullif(list_product(en.input_sizes[1]), 0) END"""


def _gathered(con, params, rel: Relations, split: bool, members: dict[str, set[int]],
              desc: dict[str, str | None], read: list[tuple] | None = None) -> dict[str, int]:
    """How many ranks each group's all_gathers gather (its output is that many of its input: a list of
    tensors, or one tensor stacked), read from the lowest member of each description (groups of one
    description are one size): a few ranks' entries, whatever the size of the job. ``read``: each rank's
    most per group, read already (BatchReads.gathered), of an attempt whose every dump is read."""
    lowest: dict[str, int] = {}
    for pg, ranks in members.items():
        if ranks:
            d = desc.get(pg) or pg
            lowest[d] = min(lowest.get(d, min(ranks)), min(ranks))
    readers = sorted(set(lowest.values()))
    if not readers:
        return {}
    if read is not None:  # the SQL below's max per group, over the readers' own
        most: dict[str, float | None] = {}
        wanted = set(readers)
        for rank, pg, n in read:
            if rank in wanted:
                most[pg] = n if most.get(pg) is None else (most[pg] if n is None else max(most[pg], n))
        return {pg: int(n) for pg, n in most.items() if n is not None and n == int(n) and n > 1}
    group = "coalesce(k.pg, en.pg_name)" if split else "en.pg_name"
    keys = f"LEFT JOIN {rel.group_keys} k ON k.rank = en.rank AND k.pg_name = en.pg_name" if split else ""
    rows = con.execute(
        f"""
        SELECT {group}, max({_GATHERED})
        FROM entries en {keys}
        WHERE en.job = $job AND en.attempt = $attempt AND {rel.newest('en.')} AND en.rank IN (SELECT unnest($ranks))
          AND {_GATHERS}
        GROUP BY ALL
        """,
        {**params, "ranks": readers},
    ).fetchall()
    return {pg: int(n) for pg, n in rows if n is not None and n == int(n) and n > 1}


_GATHERS = """en.op IN ('all_gather', 'allgather', '_allgather_base', 'all_gather_into_tensor')
          AND len(en.input_sizes) = 1 AND len(en.output_sizes) >= 1"""
# _gathered's read of every rank of every attempt the connection holds, by their groups' names
_GATHERED_BY_RANK = f"""
    SELECT en.job, en.attempt, en.rank, en.pg_name, max({_GATHERED}) FROM entries en WHERE {_GATHERS} GROUP BY ALL
"""

@dataclass(frozen=True)
class Keys:
    """Whose rows a relation's statement makes: one attempt's (its relations have no key), or every attempt's
    of a batch at once, each row keyed by its attempt (frlake.diagnose.batched): ``k`` leads the key columns
    of a GROUP BY, ``same`` joins two relations' rows of one attempt."""

    columns: tuple[str, ...] = ()

    @property
    def k(self) -> str:
        return "".join(f"{c}, " for c in self.columns)

    def same(self, a: str, b: str) -> str:
        return "".join(f" AND {a}.{c} = {b}.{c}" for c in self.columns)


OneAttempt, EveryAttempt = Keys(), Keys(("job", "attempt"))


def entry_columns(pg: str, marker: str, size_sig: str, dtype_sig: str, durations: bool) -> str:
    """What ``rel.entries`` keeps of each entry (``en``), its group read as ``pg``."""
    return f"""en.rank, {pg} AS pg_name, en.pg_desc, en.collective_seq_id AS seq,
               en.p2p_seq_id AS p2p_seq, en.is_p2p, en.op, {_STATE} AS state, en.entry_index, en.time_created_ns AS t,
               en.time_discovered_completed_ns AS t_done, en.backend = 'gloo' AS sync, en.pg_id,
               en.stack_id, en.p2p_src, en.p2p_dst, {marker} AS marker,
               {size_sig} AS size_sig, {dtype_sig} AS dtype_sig,
               en.pg_desc IS NOT DISTINCT FROM en.backend AS desc_is_backend{_DURATIONS if durations else ""}"""


def build_calls(con, rel: Relations, keys: Keys, blocked: bool | None = None) -> bool:
    """Build ``rel.blocks``, ``rel.calls`` and ``rel.instances`` from ``rel.entries``; whether any coalesced
    block is there. ``blocked``: whether one is, known already (else counted)."""
    # One row per rank and collective call (group, seq): a coalesced block (the collectives that share its
    # end marker's group and sequence ids) is one call of several ops, compared with the other members'
    # blocks as a whole. Every other collective entry is a call of its own.
    k, in_block = keys.k, _IN_BLOCK + keys.same("b", "e")
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.blocks} AS
        SELECT {k}rank, pg_name, seq, coalesce(p2p_seq, -1) AS p2p_seq, min(state) AS state
        FROM {rel.entries} WHERE marker GROUP BY ALL
        """
    )
    calls = f"""
        SELECT {k}rank, pg_name, pg_desc, seq, entry_index, t, t_done, sync, op, stack_id, hash(op) AS type_sig,
               size_sig, dtype_sig, state
        FROM {rel.entries} e WHERE NOT is_p2p AND NOT marker
    """
    has_blocks = blocked if blocked is not None else con.execute(
        f"SELECT count(*) FROM {rel.blocks}").fetchone()[0] > 0
    if has_blocks:
        block_calls = f"{rel.blocks}_calls"
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {block_calls} AS
            SELECT {"".join(f"e.{c}, " for c in keys.columns)}e.rank, e.pg_name, min(pg_desc) AS pg_desc, e.seq,
                   min(entry_index) AS entry_index, min(t) AS t, max(t_done) AS t_done, bool_and(sync) AS sync,
                   arg_min(op, entry_index) AS op,
                   arg_min(stack_id, entry_index) AS stack_id,
                   -- op by op: each op's signatures with its place in the block (so two ops swapped,
                   -- or one more op, differ), summed over the block
                   hash(sum(hash(op, e.part)::HUGEINT)) AS type_sig, hash(sum(hash(size_sig, e.part)::HUGEINT)) AS size_sig,
                   hash(sum(hash(dtype_sig, e.part)::HUGEINT)) AS dtype_sig, min(e.block_state) AS state
            FROM (SELECT e.*, b.state AS block_state,
                         row_number() OVER (PARTITION BY {"".join(f"e.{c}, " for c in keys.columns)}e.rank, e.pg_name,
                                                         e.seq ORDER BY e.entry_index) AS part
                  FROM {rel.entries} e JOIN (SELECT {k}rank, pg_name, seq, p2p_seq, min(state) AS state
                                             FROM {rel.blocks} GROUP BY ALL) b
                    ON {in_block}
                  WHERE NOT e.is_p2p AND NOT e.marker) e
            GROUP BY {"".join(f"e.{c}, " for c in keys.columns)}e.rank, e.pg_name, e.seq
            """
        )
        calls += f"""
          AND NOT EXISTS (SELECT 1 FROM {rel.blocks} b WHERE {in_block})
        UNION ALL SELECT * FROM {block_calls}
        """
    con.execute(f"CREATE OR REPLACE TEMP VIEW {rel.calls} AS {calls}")
    # One row per collective instance (group, seq) with at least two members: shared by
    # the mismatch and lateness analyses.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.instances} AS
        SELECT {k}pg_name, seq, count(*) AS n, min(t) AS t0, max(t) AS t1,
               -- the members' three signatures as one hash: two aggregates instead of six (16.4M calls)
               min(hash(type_sig, size_sig, dtype_sig)) <> max(hash(type_sig, size_sig, dtype_sig)) AS differ,
               count(*) FILTER (WHERE state = 'completed') AS n_completed,
               count(*) FILTER (WHERE state = 'scheduled') AS n_scheduled
        FROM {rel.calls} GROUP BY {k}pg_name, seq HAVING n > 1
        """
    )
    return has_blocks


# Each rank's first unfinished entry (once something finished), else its last, from its groups' own
# (``rank_groups``), of one attempt (``k`` "") or of each (``k`` "job, attempt, ").
LAST_ENTRIES = """
    SELECT {k}rank, r.pg_name, r.pg_desc, r.seq, r.op, r.is_p2p, r.p2p_src, r.p2p_dst, r.state, r.t, r.stack_id
    FROM (SELECT {k}rank, CASE WHEN bool_or(any_done) AND count(open_at) > 0 THEN arg_min(open_entry, open_at)
                               ELSE arg_max(last_entry, last_at) END AS r
          FROM {rank_groups} GROUP BY {k}rank)
    ORDER BY {k}rank
"""

# The sends and recvs whose names carry their peers (the only ones a send can be paired with its recv by).
P2P_NAMED = "is_p2p AND op IN ('send', 'isend', 'recv', 'irecv') AND p2p_src IS NOT NULL"
# The entries whose newest collective a rank may hold pending: its own state, not its block's (build_rank_groups).
_PENDING = "NOT coalesce(is_p2p, false) AND seq IS NOT NULL AND coalesce(entry_state, '') <> 'completed'"


def build_rank_groups(con, rel: Relations, has_blocks: bool, keys: Keys) -> None:
    """One pass over the attempt's entries for what the diagnosis reads per rank and group (``rel.rank_groups``,
    keyed by rank, group, rank-local pg id and is_p2p): the first and last sequence ids, the first unfinished
    entry and the last one (by entry index, so each rank's own follow from its groups'), the sends and recvs
    that name their peers, and the newest collective pending by the entry's own state (with its op and
    description). At 16,384 ranks four passes over 16M entries (3.8 s) became this one (2.9 s)."""
    entry = "struct_pack(pg_name, pg_desc, seq, op, is_p2p, p2p_src, p2p_dst, state, t, stack_id)"
    blocks = f"LEFT JOIN {rel.blocks} b ON {_IN_BLOCK}{keys.same('b', 'e')}" if has_blocks else ""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.rank_groups} AS
        WITH s AS (  -- the ops of a coalesced block stay "scheduled"; its end marker has the state
          SELECT e.* REPLACE ({"coalesce(b.state, e.state)" if has_blocks else "e.state"} AS state),
                 e.state AS entry_state
          FROM {rel.entries} e {blocks} WHERE NOT e.marker
        ), g AS (
          SELECT {keys.k}rank, pg_name, is_p2p, pg_id, min(pg_desc) AS pg_desc, min(seq) AS lo, max(seq) AS hi,
                 bool_or(state = 'completed') AS any_done,
                 min(entry_index) FILTER (WHERE state <> 'completed') AS open_at,
                 arg_min({entry}, entry_index) FILTER (WHERE state <> 'completed') AS open_entry,
                 max(entry_index) AS last_at, arg_max({entry}, entry_index) AS last_entry,
                 count(*) FILTER (WHERE {P2P_NAMED}) AS n_p2p,
                 max(seq) FILTER (WHERE {_PENDING}) AS pending_seq,
                 min(struct_pack(neg := -seq, op := op)) FILTER (WHERE {_PENDING}) AS pending_op,
                 min(struct_pack(neg := -seq, d := pg_desc)) FILTER (WHERE {_PENDING} AND pg_desc IS NOT NULL)
                   AS pending_desc
          FROM s GROUP BY {keys.k}rank, pg_name, is_p2p, pg_id
        )
        SELECT * REPLACE (pending_op.op AS pending_op,
                          CASE WHEN pending_desc.neg = -pending_seq THEN pending_desc.d END AS pending_desc)
        FROM g
        """
    )


def _pending_tail(con, params, rel: Relations) -> dict[str, PendingTail]:
    """Each group's newest collective that some member holds pending (not completed by its state, nor by
    the pg_status counter of gloo, whose entries stay "scheduled"), and the members that hold it: from each
    rank's newest pending collective per group and pg id (``rel.rank_groups``), which holds the group's
    newest wherever the rank holds it."""
    sql = PENDING_TAIL.format(k="", gk="", pk="", same="", rank_groups=rel.rank_groups, dumps=rel.dumps,
                              where="WHERE p.job = $job AND p.attempt = $attempt")
    return pending_tails(con.execute(sql, params).fetchall())


def pending_tails(rows: list[tuple]) -> dict[str, PendingTail]:
    return {pg: PendingTail(pg, desc, seq, op, ranks) for pg, desc, seq, op, ranks in rows}


# _pending_tail's rows, of one attempt or of each (``k`` "job, attempt, ", ``gk``/``pk`` the same keys of g and p,
# ``same`` the join of an attempt's rows, ``where`` the attempt's pg_status)
PENDING_TAIL = """
    WITH p AS (  -- groups keyed by members, torchcomms' ids renumbered
      SELECT {gk}g.rank, g.pg_name, g.pending_desc AS pg_desc, g.pending_seq AS seq, g.pending_op AS op
      FROM {rank_groups} g
      LEFT JOIN (SELECT {pk}d.rank, p.pg_id, p.last_completed_collective  -- of the dump read for each rank
                 FROM pg_status p JOIN {dumps} d USING ({k}dump_id) {where}) s
        ON s.rank = g.rank AND s.pg_id = CAST(g.pg_id AS VARCHAR){same}
      WHERE g.pending_seq IS NOT NULL AND NOT coalesce(g.pending_seq <= s.last_completed_collective, false)
    ), top AS (SELECT {k}pg_name, max(seq) AS seq FROM p GROUP BY {k}pg_name)
    SELECT {k}p.pg_name, min(p.pg_desc), p.seq, min(p.op), list(DISTINCT p.rank ORDER BY p.rank)
    FROM p JOIN top USING ({k}pg_name, seq) GROUP BY {k}p.pg_name, p.seq ORDER BY {k}p.pg_name
"""


# Each rank's snapshots (ranks with several), of one attempt (keys "") or of each of them (keys "job, attempt,").
_PROGRESS = """
    SELECT {keys} rank, any_value(host ORDER BY snapshot_index DESC), max(snapshots),
           arg_max(progress, snapshot_index), list(progress ORDER BY snapshot_index),
           min(snapshot_ns), max(snapshot_ns)
    FROM ({rank_progress})
    GROUP BY {keys} rank HAVING max(snapshots) > 1 ORDER BY {keys} rank
"""


def _progress_sql(keys: str, where: str) -> str:
    return _PROGRESS.format(keys=keys, rank_progress=RANK_PROGRESS_SQL.format(where=where))


def _progress(con, params) -> list[dict]:
    rows = con.execute(_progress_sql("", "WHERE job = $job AND attempt = $attempt"), params).fetchall()
    return [_progress_row(*row) for row in rows]


def _progress_row(r, h, n, last, hist, lo, hi) -> dict:
    return {"rank": r, "host": h, "snapshots": n, "progress": last, "history": hist, "first_snapshot_ns": lo,
            "last_snapshot_ns": hi}


def _live_hosts(con, params) -> dict[int, str]:
    return dict(con.execute(
        """SELECT rank, arg_max(host, snapshot_ns) FROM live_stacks
           WHERE job = $job AND attempt = $attempt AND host IS NOT NULL GROUP BY rank""", params).fetchall())


_LIVE = "depth > 0 AND NOT current"  # the live stacks live_stacks reads (a thread with frames, not the handler's)


def live_stacks(con: duckdb.DuckDBPyConnection, job: str, attempt: int, ranks: list[int]) -> dict[int, dict]:
    """Each rank's newest live stack from the debug server: its working thread (py-spy's MainThread, else
    the last thread faulthandler lists that is not the handler's own and has frames)."""
    if not ranks:
        return {}
    rows = con.execute(
        f"""
        SELECT rank, host, snapshot_ns, source, source_path, thread, frames FROM live_stacks
        WHERE job = $job AND attempt = $attempt AND rank IN (SELECT unnest($ranks)) AND {_LIVE}
        QUALIFY row_number() OVER (PARTITION BY rank ORDER BY snapshot_ns DESC NULLS LAST, source_path DESC,
                                   (thread LIKE '%"MainThread"%') DESC, thread_index DESC) = 1
        """,
        {"job": job, "attempt": attempt, "ranks": ranks},
    ).fetchall()
    return {r: {"host": h, "snapshot_ns": t, "source": src, "source_path": path, "thread": th, "frames": frames}
            for r, h, t, src, path, th, frames in rows}


def _group_keys(con: duckdb.DuckDBPyConnection, params: dict, rel: Relations,
                lists: tuple[str, str], named: bool = False) -> dict[str, str]:
    """Identify groups that share a name by their members (torch's split_group; its analyzer keys a group
    by name plus a hash of its ranks). Each rank's entries of such a name belong to the member set its own
    pg_config gives that name; a rank without one (an empty pg_config) to the one set that holds it; else
    to the name alone, as before. Builds ``rel.group_keys``; returns {group: name} for the split names.
    ``named``: the caller knows that every name has one member list (BatchReads.split)."""
    table, column = lists  # a list and its runs are equal or differ together
    if named or not con.execute(
        f"""
        SELECT count(*) FROM (SELECT pg_name FROM {table}
          WHERE job = $job AND attempt = $attempt AND {rel.newest()} AND group_size > 0
          GROUP BY pg_name HAVING min({column}) <> max({column}) LIMIT 1)
        """,
        params,
    ).fetchone()[0]:
        # every name has one member list: names identify the groups (and no earlier attempt's keys stay)
        con.execute(f"CREATE OR REPLACE TEMP TABLE {rel.group_keys} (rank BIGINT, pg_name VARCHAR, pg VARCHAR)")
        return {}
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _gcfg AS
        SELECT DISTINCT rank, pg_name, list_sort(list_distinct(ranks)) AS ranks FROM groups
        WHERE job = $job AND attempt = $attempt AND {rel.newest()} AND len(ranks) > 0
        """,
        params,
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.group_keys} AS
        WITH split AS (
          SELECT pg_name FROM _gcfg GROUP BY pg_name HAVING count(DISTINCT ranks) > 1
        ), sets AS (
          SELECT DISTINCT pg_name, ranks, pg_name || '@' || left(md5(ranks::VARCHAR), 12) AS pg
          FROM _gcfg WHERE pg_name IN (SELECT pg_name FROM split)
        ), own AS (
          SELECT c.rank, c.pg_name, s.pg FROM _gcfg c JOIN sets s USING (pg_name, ranks)
        ), member AS (
          SELECT unnest(ranks) AS rank, pg_name, pg FROM sets
        )
        SELECT rank, pg_name, pg FROM own
        UNION ALL
        SELECT rank, pg_name, min(pg) FROM member m
        WHERE NOT EXISTS (SELECT 1 FROM own o WHERE o.rank = m.rank AND o.pg_name = m.pg_name)
        GROUP BY rank, pg_name HAVING count(*) = 1
        """
    )
    return dict(con.execute(f"SELECT DISTINCT pg, pg_name FROM {rel.group_keys} ORDER BY pg").fetchall())


def _global_peer(members: set[int] | None, rank: int, src: int, dst: int) -> int | None:
    """p2p names carry group-local ranks ("send 0->1"); map the peer to a global rank."""
    ordered = sorted(members) if members else None
    local = {g: i for i, g in enumerate(ordered)} if ordered else None
    me = local.get(rank, rank) if local else rank
    other = dst if src == me else src
    if ordered and 0 <= other < len(ordered):
        return ordered[other]
    return other


def temp_table(con: duckdb.DuckDBPyConnection, name: str, columns: dict[str, pa.DataType], rows: list[tuple]) -> None:
    """(Re)create the temporary table ``name`` holding ``rows``, handed to DuckDB as one Arrow table: an
    INSERT per row (executemany) costs a statement each, over a second for the 10,000 groups of a
    16,384-rank attempt."""
    data = pa.table({c: pa.array([r[i] for r in rows], t) for i, (c, t) in enumerate(columns.items())})
    source = f"{name}_rows"
    finish(con)
    con.register(source, data)
    try:
        con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT * FROM {source}")
    finally:
        con.unregister(source)


def finish(con: duckdb.DuckDBPyConnection) -> None:
    """Run a result left unread (a fetchone) to its end: DuckDB 2 registers nothing on a connection that
    has one (a statement would have discarded it)."""
    if hasattr(con, "complete"):
        con.complete()
