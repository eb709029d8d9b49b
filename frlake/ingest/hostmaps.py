"""Hosts from where fleets keep them: the files beside the dumps that say which host ran which rank.

A Flight Recorder dump never names its host; the scheduler, the launcher or the job knows it, and fleets
save what they know beside the dumps. frlake reads these host maps (found by their names, :func:`kind_of`)
in the dump's folder and in the folder above it (the attempt's and the job's), never above the folders an
ingest was given. The first source, in this precedence, that names a rank's host decides:

1. ``table``: a rank -> host table, ``hosts.csv`` (``rank,host``) or ``hosts.json`` (``{"0": "gpu01"}`` or
   ``[{"rank": 0, "host": "gpu01"}]``); also ``rank_hosts.*``, ``hostmap.*``;
2. ``torchrun``: a torchrun (torchelastic) log (``torchrun*.log``, ``torchelastic*.log``, ``launcher*.log``,
   Slurm's ``slurm-<job>.out``): its failure summary names the host of each failed rank (and how it died:
   :class:`Failure`);
3. ``hostfile``: ``hostfile``, ``*.hostfile``, ``hostfile.txt``: one host per line, ``slots=N`` ranks each
   (MPI, DeepSpeed), dealt in rank order;
4. ``slurm``: the job's ``SLURM_*`` environment saved to a file (``slurm.env``, ``slurm_env.txt``),
   ``scontrol show job`` output (``scontrol*.txt``) or ``sacct --json`` output (``sacct*.json``): its node
   list (expanded by python-hostlist) and tasks per node (``2(x3),1``), dealt ``block`` (Slurm's default)
   or ``cyclic``; a task's id is its rank (``srun`` launching one task per rank).

The attempt's folder speaks before its job's. A source that names another host than the chosen one is a
claim kept beside it (``host_claims``), which the diagnosis names: two sources that disagree are never a
silent pick. A file of one of these names that cannot be read as one is rejected with what is wrong.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass, field

from frlake.errors import DumpRejected

MAX_BYTES = 16 << 20  # a host map larger than this is refused (a 16,384-rank table is about 300 KB)
MAX_TRACEBACK = 4000  # characters of a failed worker's traceback kept
MAX_RANKS = 1 << 20

# source -> precedence (lower wins) and the file names that are such a source
SOURCES = {"table": 0, "torchrun": 1, "hostfile": 2, "slurm": 3, "attached": -1}
_NAMES = (
    ("table", re.compile(r"(rank[_-]?)?(hosts?|hostmap)\.(csv|json)", re.I)),
    ("torchrun", re.compile(r"(torchrun|torchelastic|elastic|launcher)[^/]*\.(log|txt|out)|slurm-\d+(_\d+)?\.out", re.I)),
    ("hostfile", re.compile(r"hostfile(\.txt)?|[^/]+\.hostfile", re.I)),
    ("slurm", re.compile(r"slurm[_.-]?env(\.txt)?|[^/]+\.slurm\.env|scontrol[^/]*\.txt|sacct[^/]*\.json", re.I)),
)


def kind_of(path: str) -> str | None:
    """Which source a file is by its name (SOURCES), or None: not a host map."""
    name = path.replace("\\", "/").replace("::", "/").rsplit("/", 1)[-1]
    for kind, pattern in _NAMES:
        if pattern.fullmatch(name):
            return kind
    return None


@dataclass(frozen=True)
class Failure:
    """A worker in a torchrun failure summary."""

    rank: int
    local_rank: int | None
    host: str | None
    exitcode: int | None
    pid: int | None
    time: str | None  # as torchelastic writes it: 2024-01-01_12:03:11 (the launcher host's local time)
    error_file: str | None
    message: str | None  # the error file's message, else the traceback's last line
    traceback: str | None
    root_cause: bool  # listed under "Root Cause (first observed failure)"


@dataclass
class HostMap:
    """What one file says: ``hosts`` (rank -> host) and the launcher's ``failures``."""

    kind: str
    path: str
    hosts: dict[int, str]
    failures: list[Failure] = field(default_factory=list)

    @property
    def precedence(self) -> int:
        return SOURCES[self.kind]

    def summary(self) -> str:
        ranks = sorted(self.hosts)
        where = f"ranks {ranks[0]}-{ranks[-1]}" if ranks else "no rank"
        text = f"{self.kind} host map: {len(set(self.hosts.values()))} host(s), {where}"
        return text + (f"; {len(self.failures)} failed worker(s)" if self.failures else "")


def read(path: str, data: bytes, kind: str | None = None) -> HostMap:
    """Parse the host map ``data`` (the file at ``path``); DumpRejected("bad_host_map") when it is not one."""
    kind = kind or kind_of(path)
    if kind is None:
        raise DumpRejected("bad_host_map", "its name is not one of a host map")
    if len(data) > MAX_BYTES:
        raise DumpRejected("bad_host_map", f"it is {len(data):,} bytes; a host map is at most {MAX_BYTES:,}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DumpRejected("bad_host_map", f"the {kind} host map is not UTF-8 text") from None
    if kind == "table":
        hosts = _table_json(text) if path.lower().endswith(".json") else _table_csv(text)
        return HostMap(kind, path, hosts)
    if kind == "torchrun":
        failures = torchrun_failures(text)
        return HostMap(kind, path, {**worker_prefixes(text, failures), **{f.rank: f.host for f in failures if f.host}},
                       failures)
    if kind == "hostfile":
        return HostMap(kind, path, hostfile(text))
    return HostMap(kind, path, slurm(text, path))


def _bad(kind: str, why: str) -> DumpRejected:
    return DumpRejected("bad_host_map", f"the {kind} host map {why}")


def _host(value: object, kind: str) -> str:
    host = str(value).strip()
    if not host or len(host) > 255 or any(c.isspace() or ord(c) < 32 for c in host):
        raise _bad(kind, f"names a host {host[:80]!r} that is not a host name")
    return host


def _rank(value: object, kind: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or int(text) >= MAX_RANKS:
        raise _bad(kind, f"names a rank {text[:40]!r} that is not a rank")
    return int(text)


def _table_csv(text: str) -> dict[int, str]:
    hosts: dict[int, str] = {}
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row or not row[0].strip() or row[0].strip().startswith("#"):
            continue
        if lineno == 1 and not row[0].strip().isdigit():
            continue  # a header
        if len(row) < 2:
            raise _bad("table", f"line {lineno} is not 'rank,host'")
        hosts[_rank(row[0], "table")] = _host(row[1], "table")
    return hosts


def _table_json(text: str) -> dict[int, str]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _bad("table", f"is not JSON ({exc})") from None
    if isinstance(value, dict):
        return {_rank(k, "table"): _host(v, "table") for k, v in value.items()}
    if isinstance(value, list) and all(isinstance(r, dict) and "rank" in r and "host" in r for r in value):
        return {_rank(r["rank"], "table"): _host(r["host"], "table") for r in value}
    raise _bad("table", 'is neither {"<rank>": "<host>"} nor [{"rank": <rank>, "host": "<host>"}]')


def hostfile(text: str) -> dict[int, str]:
    """An MPI / DeepSpeed hostfile: ``host [slots=N]`` per line (``#`` comments), ranks dealt in order."""
    hosts: dict[int, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        host, *options = line.split()
        slots = 1
        for option in options:
            key, _, value = option.partition("=")
            if key == "slots":
                if not value.isdigit() or not 0 < int(value) <= 4096:
                    raise _bad("hostfile", f"line {lineno} has slots {value[:20]!r}, not a count")
                slots = int(value)
        host = _host(host, "hostfile")
        for _ in range(slots):
            if len(hosts) >= MAX_RANKS:
                raise _bad("hostfile", f"deals more than {MAX_RANKS:,} ranks")
            hosts[len(hosts)] = host
    return hosts


# Slurm: SLURM_* variables (``export X=...`` or ``X=...``), or scontrol's ``Key=Value`` words.
_ENV_LINE = re.compile(r"(?:export\s+)?(SLURM_[A-Z_]+)=(.*)")
_WORD = re.compile(r"(\w[\w/:]*)=(\S*)")


def slurm(text: str, path: str = "") -> dict[int, str]:
    """Rank (task id) -> node from what Slurm says of a job or step."""
    if path.lower().endswith(".json"):
        return _sacct(text)
    env = {}
    for line in text.splitlines():
        m = _ENV_LINE.fullmatch(line.strip())
        if m:
            env[m.group(1)] = m.group(2).strip().strip("'\"")
    if env:
        # a step's own variables where it has them (srun sets them for the step it launched)
        nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
        per_node = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
        tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS")
        dist = env.get("SLURM_DISTRIBUTION", "block")
        if not nodes:
            raise _bad("slurm", "has SLURM_* variables but no SLURM_JOB_NODELIST or SLURM_STEP_NODELIST")
        return deal(nodes, per_node, tasks, dist)
    words = dict(_WORD.findall(text))
    if "NodeList" in words and "JobId" in words:  # scontrol show job
        nodes = words["NodeList"]
        if nodes in ("", "(null)"):
            raise _bad("slurm", "is a job that has no nodes (NodeList=(null)): it never ran")
        tasks, count = words.get("NumTasks"), words.get("NumNodes", "").split("-")[0]
        per_node = None
        if tasks and tasks.isdigit() and count.isdigit() and int(count) and int(tasks) % int(count) == 0:
            per_node = f"{int(tasks) // int(count)}(x{count})"
        return deal(nodes, per_node, tasks, "block")
    raise _bad("slurm", "holds neither SLURM_* variables, scontrol's 'show job' output nor sacct's JSON")


def _sacct(text: str) -> dict[int, str]:
    """``sacct --json``: the job's first step that ran tasks, else the job's own node list."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _bad("slurm", f"is not JSON ({exc})") from None
    jobs = value.get("jobs") if isinstance(value, dict) else None
    if not isinstance(jobs, list) or not jobs or not isinstance(jobs[0], dict):
        raise _bad("slurm", "is JSON but not sacct's: no 'jobs' list")
    job = jobs[0]
    for step in job.get("steps") or []:
        if not isinstance(step, dict):
            continue
        nodes = step.get("nodes") or {}
        tasks = (step.get("tasks") or {}).get("count")
        name = ((step.get("step") or {}).get("name") or "") if isinstance(step.get("step"), dict) else ""
        if isinstance(nodes, dict) and nodes.get("range") and tasks and name not in ("batch", "extern"):
            dist = (step.get("task") or {}).get("distribution") or "block"
            return deal(nodes["range"], None, str(tasks), str(dist))
    nodes = job.get("nodes")
    if isinstance(nodes, str) and nodes and nodes not in ("None assigned", "(null)"):
        return deal(nodes, None, None, "block")
    raise _bad("slurm", "is sacct's JSON of a job without nodes")


def deal(nodes: str, per_node: str | None, tasks: str | None, distribution: str) -> dict[int, str]:
    """Task id -> node for a node list, its tasks per node (Slurm's ``2(x3),1``; None: the tasks spread
    evenly, else one each) and a distribution (``block``: a node's tasks consecutive; ``cyclic``: one task to
    each node in turn, skipping nodes that have all theirs)."""
    import hostlist

    try:
        names = hostlist.expand_hostlist(nodes)
    except hostlist.BadHostlist as exc:
        raise _bad("slurm", f"has a node list {nodes[:80]!r} that is not one ({exc})") from None
    if not names:
        raise _bad("slurm", "has an empty node list")
    if per_node:
        try:
            counts = hostlist.parse_slurm_tasks_per_node(per_node)
        except (hostlist.BadHostlist, ValueError) as exc:
            raise _bad("slurm", f"has tasks per node {per_node[:40]!r} that Slurm would not write ({exc})") from None
    elif tasks and tasks.isdigit():
        n, k = int(tasks), len(names)
        counts = [n // k + (1 if i < n % k else 0) for i in range(k)]
    else:
        counts = [1] * len(names)
    if len(counts) != len(names):
        raise _bad("slurm", f"lists {len(names)} node(s) but tasks for {len(counts)}")
    if sum(counts) > MAX_RANKS:
        raise _bad("slurm", f"deals more than {MAX_RANKS:,} tasks")
    hosts: dict[int, str] = {}
    kind = distribution.split(":")[0].split(",")[0].strip().lower()
    if kind.startswith("cyclic"):
        left = list(counts)
        while any(left):
            for i, name in enumerate(names):
                if left[i]:
                    hosts[len(hosts)] = name
                    left[i] -= 1
    else:  # block, and what Slurm deals like it for the first level (plane, arbitrary are not read)
        for name, count in zip(names, counts, strict=True):
            for _ in range(count):
                hosts[len(hosts)] = name
    return hosts


# torchelastic's failure summary (torch.distributed.elastic.multiprocessing.errors.ChildFailedError):
#   [1]:
#     time      : 2024-01-01_12:03:11
#     host      : gpu-c02
#     rank      : 3 (local_rank: 3)
#     exitcode  : -9 (pid: 12345)
#     error_file: <N/A>
#     traceback : Signal 9 (SIGKILL) received by PID 12345
_FIELD = re.compile(r"\s*(time|host|rank|exitcode|error_file|traceback)\s*:\s?(.*)")
_ENTRY = re.compile(r"\[\d+\]:")  # "[1]:", the head of one failed worker's entry
_RULE = re.compile(r"\s*(-{10,}|={10,})\s*")  # the summary's rules between its parts
_RANK = re.compile(r"(\d+)(?:\s*\(local_rank:\s*(\d+)\))?")
_PREFIX = re.compile(r"^\[rank(\d{1,7})\]:", re.MULTILINE)  # torchrun's prefix of a worker's output line
_EXIT = re.compile(r"(-?\d+)(?:\s*\(pid:\s*(\d+)\))?")


def worker_prefixes(text: str, failures: list[Failure]) -> dict[int, str]:
    """The ranks whose output a single agent's log carries (torchrun prefixes each worker's lines with
    ``[rank<N>]:``) on the one host its failure summary names: they ran under that agent. A log whose summary
    names no host, or several (a job's merged logs), places none."""
    named = {f.host for f in failures if f.host}
    if len(named) != 1:
        return {}
    (host,) = named
    return {int(r): host for r in dict.fromkeys(_PREFIX.findall(text)) if int(r) < MAX_RANKS}


def torchrun_failures(text: str) -> list[Failure]:
    """The workers of every torchelastic failure summary in a log (the last summary's entry for a rank wins:
    a log of several restarts lists each attempt's)."""
    found: dict[int, Failure] = {}
    root = False
    current: dict[str, str] | None = None
    lines = text.splitlines()

    def close() -> None:
        if current and "rank" in current:
            failure = _failure(current, root)
            if failure is not None:
                found[failure.rank] = failure

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("Root Cause"):
            close()
            current, root = None, True
        elif stripped.startswith("Failures:") or stripped.endswith("FAILED"):
            close()
            current, root = None, False
        elif _ENTRY.fullmatch(stripped):
            close()
            current = {}
        elif current is not None:
            m = _FIELD.fullmatch(line)
            if m:
                key, value = m.group(1), m.group(2).strip()
                if key == "traceback":  # runs to the summary's next rule or entry
                    tb = [value]
                    while i + 1 < len(lines) and not (_RULE.fullmatch(lines[i + 1])
                                                      or _ENTRY.fullmatch(lines[i + 1].strip())):
                        i += 1
                        tb.append(lines[i].rstrip())
                    value = "\n".join(tb).strip()
                current[key] = value
            elif _RULE.fullmatch(line):
                close()
                current = None
        i += 1
    close()
    return [found[r] for r in sorted(found)]


def _failure(fields: dict[str, str], root: bool) -> Failure | None:
    m = _RANK.match(fields.get("rank", ""))
    if m is None:
        return None
    e = _EXIT.match(fields.get("exitcode", ""))
    host = fields.get("host") or None
    error_file = fields.get("error_file")
    error_file = None if error_file in (None, "", "<N/A>") else error_file
    tb = fields.get("traceback") or None
    tb = None if tb in ("<N/A>", "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html") else tb
    message = None
    if tb:
        last = [t.strip() for t in tb.splitlines() if t.strip()]
        message = last[-1][:500] if last else None
    return Failure(rank=int(m.group(1)), local_rank=int(m.group(2)) if m.group(2) else None,
                   host=host if host and not any(c.isspace() for c in host) else None,
                   exitcode=int(e.group(1)) if e else None, pid=int(e.group(2)) if e and e.group(2) else None,
                   time=(fields.get("time") or None), error_file=error_file, message=message,
                   traceback=tb[:MAX_TRACEBACK] if tb else None, root_cause=root)


class HostMaps:
    """The host maps beside the dumps of an ingest, each folder's read once (by a worker, for the dumps it
    reads): ``roots``, the folders the ingest was given, bound where they are looked for."""

    def __init__(self, roots: list[str]):
        self.roots = sorted({os.path.abspath(r) for r in roots} | {os.path.realpath(r) for r in roots})
        self._folders: dict[str, list[HostMap]] = {}

    def _inside(self, folder: str) -> bool:
        return any(folder == r or folder.startswith(r.rstrip("/") + "/") for r in self.roots)

    def maps(self, path: str) -> list[HostMap]:
        """The host maps that speak for the dump at ``path``: its folder's, then its parent's (each by
        precedence), of the folders inside the ingest's roots."""
        if "::" in path or not os.path.isabs(path):
            return []  # an archive member or an upload: only real folders hold host maps
        folder = os.path.dirname(path)
        out: list[HostMap] = []
        for where in (folder, os.path.dirname(folder)):
            if not self._inside(where):
                break
            out.extend(self._read_folder(where))
        return out

    def _read_folder(self, folder: str) -> list[HostMap]:
        cached = self._folders.get(folder)
        if cached is not None:
            return cached
        from frlake.ingest.sources import read_regular_file

        found = []
        try:
            names = sorted(e.name for e in os.scandir(folder) if not e.name.startswith(".") and e.is_file(follow_symlinks=False))
        except OSError:
            names = []
        for name in names:
            kind = kind_of(name)
            if kind is None:
                continue
            path = os.path.join(folder, name)
            try:
                found.append(read(path, read_regular_file(path, MAX_BYTES), kind))
            except (DumpRejected, OSError):
                continue  # the scan reads it too, and records why it is not one
        found.sort(key=lambda m: (m.precedence, m.path))
        self._folders[folder] = found
        return found

    def host(self, path: str, rank: int) -> str | None:
        """The host the deciding host map names for ``rank`` of the dump at ``path`` (None: none names it)."""
        return next((m.hosts[rank] for m in self.maps(path) if rank in m.hosts), None)
