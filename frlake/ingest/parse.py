"""Turn one decoded Flight Recorder dump into Arrow columns.

Every FR version is read by field presence, not by a version whitelist:
the bare list of torch <= 2.2 (``seq_id``, ``time_created_us``), "1.4"
(``pg_config`` as pg id -> ranks), "2.1" ... "2.10" and later, and the JSON
variant (no frames, string pg_status, 0 for null times, list for
process_group). Fields this code does not know are kept as JSON in an
``extra`` column so nothing is lost.

The decoded object is untrusted: a pickle may reference one object many
times, so every expansion (entries, tensor sizes, frames, strings, unknown
fields) is bounded against a budget that grows with the file's size, and the
types of known fields are checked by Arrow's converters.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field

import pyarrow as pa

from frlake.errors import DumpRejected, NotNative
from frlake.ingest.checks import Budget, bounded_json, int64, ints_in_range, short_str, storable_output
from frlake.ingest.columns import ENTRY_LISTS, entry_columns
from frlake.ingest.limits import EXPANSION_FACTOR, Limits, machine_memory
from frlake.ingest.safeload import decode

__all__ = ["EXPANSION_FACTOR", "Limits", "ParsedDump", "machine_memory", "parse_bytes", "parse_dump"]

KNOWN_TOP_KEYS = frozenset(
    {"entries", "version", "pg_config", "pg_status", "nccl_version", "comm_lib_version", "nccl_comm_state",
     "health_check_results"}
)
# Without ``entries``, a dict is a Flight Recorder dump when it has one of these: torch writes no ``entries``
# in a JSON dump whose list is empty (onlyActive with nothing active) nor in a pickle taken with
# includeCollectives=False, but always its version and process groups.
_FR_TOP_KEYS = ("version", "pg_config", "pg_status")
# NVIDIA nvidia-resiliency-ext's collector: {"gpu": {"status", "output"}, "nic": {...}}
_HEALTH_CHECKS = ("gpu", "nic")
# Keys a self-describing dump may carry to name its own identity.
IDENTITY_KEYS = {
    "job": ("job", "job_id", "job_name"),
    "attempt": ("attempt", "attempt_id", "restart", "restart_count"),
    "host": ("hostname", "host"),
    "rank": ("rank", "global_rank"),
}
_IDENTITY_KEY_SET = frozenset(k for keys in IDENTITY_KEYS.values() for k in keys)
_PG_STATUS_KEYS = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")


@dataclass
class ParsedDump:
    version: str | None
    comm_lib_version: str | None
    identity: dict[str, object]
    entries: dict[str, pa.Array]
    stacks: dict[int, list[dict]]
    groups: list[dict]
    pg_status: list[dict]
    extra: str | None
    n_entries: int = 0
    has_entries: bool = True  # False: the dump has no ``entries`` key at all (see _FR_TOP_KEYS)
    health: list[dict] = field(default_factory=list)  # {check, status, output} from health_check_results
    stats: dict[str, int | None] = field(default_factory=dict)


def parse_bytes(data: bytes, limits: Limits = Limits(), native: bool = True) -> tuple[ParsedDump, str]:
    """Decode and parse the bytes of one dump: ``(parsed, encoding)``, or DumpRejected.

    A pickle is read by the fast reader (frlake/ingest/_fastpickle.pyx)
    where it can vouch for every value, else, and with ``native`` false, by
    the safe unpickler and :func:`parse_dump`: the same result either way."""
    cap = len(data) if limits.max_file_bytes is None else limits.max_file_bytes  # (limits not resolved: no cap)
    try:
        obj, encoding = decode(data, cap, native=native)
        return parse_dump(obj, encoding, len(data), limits), encoding
    except NotNative:
        pass
    obj, encoding = decode(data, cap)
    return parse_dump(obj, encoding, len(data), limits), encoding


def parse_dump(obj: object, encoding: str, size: int, limits: Limits = Limits()) -> ParsedDump:
    """Normalize a decoded dump (see module docstring) or raise DumpRejected."""
    budget = Budget(size, limits)
    if isinstance(obj, list):  # torch <= 2.2: a bare list of entries
        top: dict = {}
        raw_entries = obj
    elif isinstance(obj, dict):
        top = obj
        if "entries" not in top and not any(k in top for k in _FR_TOP_KEYS):
            raise DumpRejected("not_flight_recorder",
                               "the file has no 'entries', 'version', 'pg_config' or 'pg_status': "
                               "not a Flight Recorder dump")
        raw_entries = top.get("entries", [])
    else:
        raise DumpRejected("not_flight_recorder", f"the file holds a {type(obj).__name__}, not a Flight Recorder dump")
    if not isinstance(raw_entries, ENTRY_LISTS):
        raise DumpRejected("bad_schema", f"'entries' is a {type(raw_entries).__name__}, not a list")
    if len(raw_entries) > limits.max_entries:
        raise DumpRejected("too_large", f"{len(raw_entries):,} entries exceed the limit of {limits.max_entries:,}")
    budget.spend(len(raw_entries), "the entry list")
    if len(raw_entries) * limits.min_entry_bytes > max(size, 4096):
        raise DumpRejected(
            "too_many_nodes",
            f"{len(raw_entries):,} entries in {size:,} bytes: an entry takes at least {limits.min_entry_bytes} "
            "bytes, so they are shared references (a memo bomb?)",
        )

    version = top.get("version")
    if version is not None:
        version = short_str(version, "version", limits)
    comm = top.get("comm_lib_version", top.get("nccl_version"))
    extra_top = {k: v for k, v in top.items() if k not in KNOWN_TOP_KEYS and k not in _IDENTITY_KEY_SET}
    if "nccl_comm_state" in top and top["nccl_comm_state"]:
        extra_top["nccl_comm_state"] = top["nccl_comm_state"]
    if "nccl_version" in top and "comm_lib_version" in top:
        extra_top["nccl_version"] = top["nccl_version"]

    entries, stacks = entry_columns(raw_entries, encoding, budget, limits)
    return ParsedDump(
        version=version,
        comm_lib_version=None if comm is None else short_str(comm, "comm_lib_version", limits),
        identity=_identity(top, limits),
        entries=entries,
        stacks=stacks,
        groups=_groups(top.get("pg_config"), budget, limits),
        pg_status=_pg_status(top.get("pg_status"), budget, limits),
        extra=bounded_json(extra_top, budget, limits) if extra_top else None,
        n_entries=len(raw_entries),
        has_entries=not isinstance(obj, dict) or "entries" in top,
        health=_health(top.get("health_check_results"), budget, limits),
        stats=_stats(entries),
    )


def _identity(top: dict, limits: Limits) -> dict[str, object]:
    found: dict[str, object] = {}
    for what, keys in IDENTITY_KEYS.items():
        for key in keys:
            if key in top and top[key] is not None:
                found[what] = short_str(top[key], key, limits)
                break
    return found


def _parse_ranks(raw: object) -> list[int] | None:
    if isinstance(raw, str):
        if len(raw) >= _RANKS_CACHE_MIN:
            return _parse_ranks_text(raw)
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if isinstance(raw, (list, tuple)) and set(map(type, raw)) <= {int}:
        return list(raw)
    return None


# Every rank of a 16,384-rank job lists the world group's 16,384 ranks as one
# ~100 KB string: a worker parses and checks each distinct string once.
_RANKS_CACHE_MIN = 4096


def rank_runs(ranks: list[int]) -> list[int]:
    """The ranks as arithmetic runs, flattened (start, step, count, start, ...):
    a world group of 16,384 ranks is one run, a data-parallel group of every
    8th rank another, so a diagnosis reads three numbers instead of thousands
    (16,384 dumps each listing the world are 268M ranks). Any list has runs:
    at worst one per pair of ranks, 1.5 numbers per rank."""
    runs: list[int] = []
    i, n = 0, len(ranks)
    while i < n:
        step = ranks[i + 1] - ranks[i] if i + 1 < n else 0
        j = i + 1
        while j < n and ranks[j] - ranks[j - 1] == step:
            j += 1
        runs += (ranks[i], step, j - i)
        i = j
    return runs


@functools.lru_cache(maxsize=32)
def _runs_of_text(raw: str) -> list[int] | None:
    ranks = _parse_ranks_text(raw)
    return None if ranks is None else rank_runs(ranks)


@functools.lru_cache(maxsize=32)
def _parse_ranks_text(raw: str) -> list[int] | None:
    try:
        ranks = json.loads(raw)
    except ValueError:
        return None
    if isinstance(ranks, list) and set(map(type, ranks)) <= {int} and len(ranks) < 2**31:
        ints_in_range(ranks, "pg_config ranks", 1 << 31)
        return ranks
    return None


def _mapping(value: object, name: str, budget: Budget) -> dict:
    """A top-level table of the dump (pg_config, pg_status): a dict, paid for."""
    if not isinstance(value, dict):
        raise DumpRejected("bad_schema", f"'{name}' is a {type(value).__name__}, not a dict")
    budget.spend(len(value), name)
    return value


def _groups(pg_config: object, budget: Budget, limits: Limits) -> list[dict]:
    if not pg_config:
        return []
    pg_config = _mapping(pg_config, "pg_config", budget)
    groups = []
    for key, value in pg_config.items():
        if isinstance(value, dict):  # 2.1 and later: {name, desc, ranks: "[0, 1]"}
            name, desc, raw = value.get("name", key), value.get("desc"), value.get("ranks")
        else:  # 1.4: pg id -> list of ranks
            name, desc, raw = key, None, value
        if isinstance(raw, (list, tuple)):
            budget.spend(len(raw), "pg_config")
        elif isinstance(raw, str) and len(raw) > 16 * limits.max_string:
            raise DumpRejected("too_large", "a pg_config rank list is too long")
        ranks = _parse_ranks(raw)
        if ranks is not None and len(ranks) >= 2**31:
            ranks = None
        cached = isinstance(raw, str) and len(raw) >= _RANKS_CACHE_MIN  # parsed, checked and run once per worker
        if ranks and not cached:
            ints_in_range(ranks, "pg_config ranks", 1 << 31)
        groups.append(
            {
                "pg_name": short_str(name, "pg_config name", limits),
                "pg_desc": None if desc is None else short_str(desc, "pg_config desc", limits),
                "ranks": ranks,
                "rank_runs": None if ranks is None else _runs_of_text(raw) if cached else rank_runs(ranks),
                "group_size": None if ranks is None else len(ranks),
                "ranks_raw": None if raw is None or ranks is not None else bounded_json(raw, budget, limits),
            }
        )
    return groups


def _as_int(value: object, name: str) -> int | None:
    if value is None or type(value) is bool:
        return None
    if type(value) is float and not math.isfinite(value):
        raise DumpRejected("bad_value", f"pg_status '{name}' is NaN or Infinity")
    if type(value) is str and len(value.strip()) > 20:  # int() of thousands of digits is slow, then refused
        if value.strip().lstrip("+-").isdigit():
            raise DumpRejected("out_of_range", f"pg_status '{name}' is an integer beyond 64 bits")
        return None
    if type(value) is not int:
        try:
            value = int(value)  # JSON dumps write pg_status values as strings
        except (TypeError, ValueError):
            return None
    return int64(value, f"pg_status '{name}'")


def _pg_status(status: object, budget: Budget, limits: Limits) -> list[dict]:
    if not status:
        return []
    status = _mapping(status, "pg_status", budget)
    rows = []
    for key, value in status.items():
        pg_id = short_str(key, "pg_status key", limits)  # checks the key's type before anything prints it
        if not isinstance(value, dict):
            raise DumpRejected("bad_schema", f"pg_status of group {pg_id[:80]!r} is a {type(value).__name__}, not a dict")
        row = {"pg_id": pg_id}
        for name in _PG_STATUS_KEYS:
            row[name] = _as_int(value.get(name), name)
        rest = {k: v for k, v in value.items() if k not in _PG_STATUS_KEYS}
        row["extra"] = bounded_json(rest, budget, limits) if rest else None
        rows.append(row)
    return rows


def _health(results: object, budget: Budget, limits: Limits) -> list[dict]:
    """nvidia-resiliency-ext's ``health_check_results``: one row per check (``gpu``, ``nic``, and any other
    the collector adds), its status (``Healthy`` / ``Failed``) and the check's captured log."""
    if results is None:
        return []
    results = _mapping(results, "health_check_results", budget)
    rows = []
    for check in sorted(results, key=lambda k: (k not in _HEALTH_CHECKS, str(k))):
        name = short_str(check, "health check name", limits)
        value = results[check]
        if not isinstance(value, dict):
            raise DumpRejected("bad_schema", f"health check {name[:80]!r} is a {type(value).__name__}, not a dict")
        status, output = value.get("status"), value.get("output")
        rows.append({
            "check_name": name,
            "status": None if status is None else short_str(status, "health status", limits),
            "healthy": None if status is None else str(status).strip().lower() in ("healthy", "ok", "pass", "passed"),
            "output": None if output is None else storable_output(output, budget, limits),
        })
    return rows


def _stats(entries: dict[str, pa.Array]) -> dict[str, int | None]:
    import pyarrow.compute as pc

    rec = pc.min_max(entries["record_id"])
    created = pc.min_max(entries["time_created_ns"])
    return {
        "first_record_id": rec["min"].as_py(),
        "last_record_id": rec["max"].as_py(),
        "first_time_created_ns": created["min"].as_py(),
        "last_time_created_ns": created["max"].as_py(),
    }
