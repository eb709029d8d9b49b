"""The lake's SQL vocabulary: the expressions and relations that every reader of an attempt's entries shares
(the views, the entries and trace pages, the diagnosis). What the op names mean, which of a rank's dumps is
read, where a group's members are listed."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

# Collectives whose members hold tensors of different sizes by design (torch's flight_recorder types.py and
# torchcomms' op names): all-to-alls exchange unequal splits, the "_v" ops gather or scatter unequal parts.
# Only their op type and dtypes are compared.
UNEVEN = ("all_to_all", "alltoall", "alltoall_base", "all_to_allv", "alltoallv", "all_to_all_single",
          "all_to_all_v_single", "all_gather_v", "allgather_v", "reduce_scatter_v", "reducescatter_v")
ALL_TO_ALL = UNEVEN  # the name earlier code imported
# Ops whose whole tensor exists on the root only: members compare scatter's outputs and gather's inputs.
GATHER = ("gather", "gather_single")
# The entry that closes a coalesced block ("nccl:coalesced", "nccl:ALLGATHER_coalesced"): no tensors of its
# own. The fast-path single entries ("nccl:allreduce_coalesced", with sizes) are ordinary collectives.
END_MARKER = "(op = 'coalesced' OR (op LIKE '%coalesced' AND len(coalesce(input_sizes, [])) = 0 " \
             "AND len(coalesce(output_sizes, [])) = 0))"

# When several dumps claim one rank of an attempt (snapshots, a file rewritten in place, a copy), the
# diagnosis reads the newest: by its snapshot time (a time in the file name, else its newest entry, else
# the file's mtime; the snapshots table), then its newest entry, the file's mtime, its bytes. Never by the
# order of ingest, so the same dumps give the same diagnosis whatever order they arrived in.
NEWEST_DUMP = ("s.snapshot_ns DESC NULLS LAST, d.last_time_created_ns DESC NULLS LAST, "
               "d.source_mtime_ns DESC NULLS LAST, d.sha256")
# torchcomms' hook passes no events, so its entries stay "scheduled"; its post hook retires an op once it is
# done. In its dumps (the group's desc is the backend) a retired entry is a completed one.
# (STATE_OF.format(e=alias): the state of the entries under that alias, for the trace too)
STATE_OF = """CASE WHEN {e}.state = 'scheduled' AND {e}.retired AND {e}.pg_desc IS NOT DISTINCT FROM {e}.backend
                   THEN 'completed' ELSE {e}.state END"""


@dataclass(frozen=True)
class Relations:
    """The temporary relations :func:`load` builds on the connection, by what
    they hold; the analyses read them through these names, never by guessing.

    Their ``pg_name`` column is the group's identity: its name, or, when
    disjoint groups share one name (split_group), the name and a digest of its
    members (``5@1f0c...``; :attr:`Evidence.names` maps it back)."""

    dumps: str = "_d"  # the dump read for each rank: rank, host, dump_id, first_record_id
    entries: str = "_e"  # its entries, with size and dtype signatures (and durations: load's durations);
    # one dump per rank, so no dump id (``dumps`` has it) and no op-type hash (``calls`` makes it). A view over
    # the attempt's Parquet files, which each pass reads again, or over a table of WORK_DB (load says when)
    blocks: str = "_blk"  # coalesced blocks: rank, pg_name, seq, p2p_seq, state of the end marker
    calls: str = "_c"  # one row per rank and collective call (a coalesced block is one call)
    instances: str = "_inst"  # one row per collective instance (pg_name, seq) with two or more members
    group_keys: str = "_gk"  # (rank, pg name) -> group identity, where disjoint groups share a name (else empty)
    rank_groups: str = "_rg"  # per rank, group, pg id and is_p2p: what :func:`build_rank_groups` reads of its entries
    one_dump_per_rank: bool = False  # then every dump of the attempt is read: no filter is needed

    def newest(self, alias: str = "") -> str:
        """The condition that keeps the rows of the dumps read (each rank's newest, ``dumps``)."""
        return "TRUE" if self.one_dump_per_rank else f"{alias}dump_id IN (SELECT dump_id FROM {self.dumps})"


def member_lists(con: duckdb.DuckDBPyConnection, params: dict, rel: Relations) -> tuple[str, str]:
    """Where to read the members of the groups the attempt's dumps list: ``group_runs`` when it holds every
    list (dumps ingested before it existed are only in ``groups``), else ``groups``' rank lists."""
    where = f"job = $job AND attempt = $attempt AND {rel.newest()} AND group_size IS NOT NULL"
    complete = con.execute(f"SELECT (SELECT count(*) FROM groups WHERE {where}) = "
                           f"(SELECT count(*) FROM group_runs WHERE {where})", params).fetchone()[0]
    return ("group_runs", "rank_runs") if complete else ("groups", "ranks")


def listed_rows(rel: Relations) -> str:
    """The rows (alias ``c``) of the groups that the dumps read list with their members."""
    return f"c.job = $job AND c.attempt = $attempt AND {rel.newest('c.')} AND c.group_size IS NOT NULL"


def listed_members(con: duckdb.DuckDBPyConnection, params: dict, rel: Relations, lists: tuple[str, str],
                   group: str = "c.pg_name", keys: str = "") -> dict[str, set[int]]:
    """Each group's members (by ``group``, over the join ``keys``) as the dumps read list them, from where
    :func:`member_lists` says (``lists``). Each distinct rank list is read once, as its runs where every dump
    has them: every rank of a 16,384-rank job lists the world's 16,384 ranks, and decoding them all (268M
    numbers) cost more than the rest of the diagnosis."""
    table, column = lists
    members: dict[str, set[int]] = {}
    for pg, listed in con.execute(
        f"""SELECT {group}, any_value(c.{column}) FROM {table} c {keys} WHERE {listed_rows(rel)}
            GROUP BY {group}, c.group_size, hash(c.{column})""",
        params,
    ).fetchall():
        members.setdefault(pg, set()).update(expand_runs(listed) if column == "rank_runs" else listed)
    return members


def expand_runs(runs: list[int]) -> list[int]:
    """The ranks of :func:`frlake.ingest.parse.rank_runs`' (start, step, count) runs."""
    return [start + step * k for start, step, count in zip(runs[::3], runs[1::3], runs[2::3], strict=True)
            for k in range(count)]


def stacks(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, list[dict]]:
    if not ids:
        return {}
    rows = con.execute("SELECT stack_id, frames FROM stacks WHERE stack_id IN (SELECT unnest($ids))", {"ids": ids}).fetchall()
    return {sid: frames for sid, frames in rows}
