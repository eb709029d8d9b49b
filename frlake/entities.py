"""The entities every layer shares: what a diagnosis says (plain dataclasses, JSON-ready), the verdicts,
and the signatures of stacks and stalls. The lowest module of frlake: it imports nothing of frlake, so the
catalog, the query layer and the analysis all build on it."""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from enum import Enum

ALGORITHM_VERSION = 10  # 2: groups by name and members, torchcomms, suspects, straggler significance; 3: snapshots,
# pending tails, live stacks; 4: both; 5: mtimes of copies do not confirm a hang (Timing.overdue_from); 6: a root
# without a dump is weaker evidence, inferred hosts are marked, ranks without dumps on several hosts are suspects,
# a rank whose ops all completed waits for no member without a dump, a dump in two hosts' folders names no host,
# a root another explains is a suspect, an incomplete attempt names suspects; 7: genuine gloo dumps: the world
# inferred, pg_status-only dumps by rank-local id, names' times as intervals, a failed collective is no job at work,
# gloo's tied roots, stragglers that cost the job a share of its time; 8: a pg_config list the dumps contradict
# (torch 2.14 gloo's '' entry) is no group's members nor the world; dumps that record nothing are incomplete, not
# healthy; a coalesced block is compared op by op; 9: lateness on clocks corrected for their hosts' offsets; 10:
# a collective every member holds pending past its timeout is a hang (stuck), the kind of failure, a straggler's cost
WAIT_LIST = 64  # ranks a culprit's waiting_for / waited_by name at most (``waiters`` counts them all)


class Verdict(str, Enum):
    """What went wrong in an attempt. The members are in order of precedence:
    the first rule that holds is the verdict (analyze.py applies them in this
    order), and everything that shows verdicts (CLI colours, UI classes, the
    hangs report, the docs) reads this one list."""

    MISMATCH = "mismatch"
    HANG = "hang"
    INCOMPLETE = "incomplete"
    STRAGGLER = "straggler"
    HEALTHY = "healthy"

    @property
    def rule(self) -> str:
        return _RULES[self]

    @property
    def style(self) -> str:
        """The rich colour of the verdict in the terminal."""
        return _STYLES[self]

    @property
    def css(self) -> str:
        """The class of the verdict's badge in the web UI."""
        return f"v-{self.value}"

    @property
    def is_incident(self) -> bool:
        """Whether the attempt stopped (the hangs report lists these)."""
        return self in (Verdict.MISMATCH, Verdict.HANG)

    def __str__(self) -> str:
        return self.value


_RULES = {
    Verdict.MISMATCH: "the members of a collective disagree on its op, sizes, dtypes or state "
                      "(when nothing says which member changed, all of them are suspects)",
    Verdict.HANG: "ranks wait in a collective or point-to-point op for a rank that never joined, or every member "
                  "of a collective holds it pending past its timeout",
    Verdict.INCOMPLETE: "some ranks of the world left no dump, and the others explain nothing",
    Verdict.STRAGGLER: "one rank is the first to arrive late again and again, beyond the attempt's own jitter",
    Verdict.HEALTHY: "none of the above",
}
_STYLES = {Verdict.MISMATCH: "red", Verdict.HANG: "red", Verdict.INCOMPLETE: "magenta", Verdict.STRAGGLER: "yellow",
           Verdict.HEALTHY: "green"}
VERDICTS = tuple(v.value for v in Verdict)


class Kind(str, Enum):
    """What kind of failure an incident was (PyTorch's Flight Recorder write-up: most watchdog timeouts have
    CPU-side causes; Alibaba's C4 tells communication from non-communication hangs and slowdowns). Each
    diagnosis names one, with the evidence that decided it (Diagnosis.kind_why); frlake.diagnose.kinds."""

    CPU_SIDE = "cpu_side"
    STUCK = "stuck_in_collective"
    MISCONFIGURED = "misconfigured"
    SLOW = "slow"
    UNKNOWN = "unknown"

    @property
    def label(self) -> str:
        return _KIND_LABELS[self]

    @property
    def meaning(self) -> str:
        return _KIND_MEANINGS[self]

    def __str__(self) -> str:
        return self.value


_KIND_LABELS = {Kind.CPU_SIDE: "CPU-side", Kind.STUCK: "stuck in a collective", Kind.MISCONFIGURED: "misconfigured",
                Kind.SLOW: "slow", Kind.UNKNOWN: "unknown"}
_KIND_MEANINGS = {
    Kind.CPU_SIDE: "a rank never enqueued the collective the others wait in: its host side (Python, data loading, "
                   "a checkpoint, a dead process) stopped before it",
    Kind.STUCK: "every member enqueued the collective and it never completed: the GPU kernel, the network or the "
                "hardware",
    Kind.MISCONFIGURED: "the members of a collective disagree on its op, sizes or dtypes: the code or its "
                        "configuration differs between ranks",
    Kind.SLOW: "the job did not stop, but a rank keeps the others waiting (a straggler)",
    Kind.UNKNOWN: "the dumps show that something is missing, not what went wrong",
}
KINDS = tuple(k.value for k in Kind)
# Every culprit reason the rules give (Culprit.reason), for filters that check what they are given.
REASONS = ("missing", "no_dump", "type_mismatch", "size_mismatch", "dtype_mismatch", "state_mismatch", "straggler")
INCIDENT_VERDICTS = tuple(v.value for v in Verdict if v.is_incident)
# The verdicts whose root cause blames a host (the flaky-hosts and drain reports): stopped, or straggled.
BLAMED_VERDICTS = (*INCIDENT_VERDICTS, Verdict.STRAGGLER.value)


@dataclass
class Culprit:
    rank: int
    host: str | None
    reason: str  # missing | no_dump | type_mismatch | size_mismatch | dtype_mismatch | state_mismatch | straggler
    # root: the cause; victim: held up by it; suspect: members disagree and the data cannot tell which changed
    role: str = "root"
    pg: str | None = None  # the group's name
    pg_ranks: list[int] | None = None  # its members, when disjoint groups share the name (split_group)
    pg_desc: str | None = None
    seq: int | None = None
    op: str | None = None
    expected: str | None = None
    found: str | None = None
    lateness_ms: float | None = None
    # how sure a straggler verdict is: the chance that jitter alone gives this many unexplained late
    # arrivals to one rank (one-sided binomial), and the lateness in units of the others' jitter
    p_value: float | None = None
    effect_size: float | None = None
    step_ms: float | None = None  # the attempt's typical step: the median gap between a rank's collectives
    # what a straggler cost the others over the dumps' window: {"collectives", "window_ms", "wait_ms",
    # "rank_wait_ms", "steps", "wait_per_step_ms", "mean_step_ms", "step_without_ms"} (straggler.cost)
    cost: dict | None = None
    waiters: int | None = None  # ranks that wait for it, directly or through others
    # whom it waits for and who waits for it directly, [{"rank", "host"}] (at most WAIT_LIST each)
    waiting_for: list[dict] | None = None
    waited_by: list[dict] | None = None
    stack_id: int | None = None  # the stack in the lake's stacks table
    stack: list[dict] | None = None  # its frames, innermost first
    # the entry the stack is of, {"op", "pg", "pg_desc", "seq"}, when not the culprit's collective: a rank that
    # never joined the hung collective has no stack there, only its last entry's
    stack_entry: dict | None = None
    detail: str | None = None
    # how strong: None (direct), or weaker: "pending_tail", "unnamed_peer", "no_dump", "pg_status" (docs/diagnose.md)
    evidence: str | None = None
    host_inferred: bool | None = None  # True: no file of this rank names its host, its neighbours' placement does
    # how strong that placement is: "strong" (most of its block dumped from that host, and other hosts' blocks
    # are whole) or "weak" (analyze._hosts_with_inferred); the causes report may call such a host, at low confidence
    host_placement: str | None = None
    hosts_claimed: list[str] | None = None  # its dump's bytes are in these hosts' folders: host is None
    live_stack: dict | None = None  # its newest live stack from the debug server: source, thread, frames, ...
    # how it died, where the launcher's failure summary names it (diagnose.launcher.failures_of: exitcode,
    # signal, time, message, words)
    died: dict | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict) -> Culprit:
        known = {f.name for f in fields(cls)}
        # to_dict leaves out what is None: a culprit whose host is unknown comes back with host None
        return cls(**({"host": None} | {k: v for k, v in data.items() if k in known}))


@dataclass
class Diagnosis:
    job: str
    attempt: int
    verdict: Verdict
    culprits: list[Culprit] = field(default_factory=list)
    summary: str = ""
    world_size: int = 0
    ranks_dumped: list[int] = field(default_factory=list)
    ranks_missing_dump: list[int] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)
    rank_lateness: list[dict] = field(default_factory=list)
    # ranks claimed by more than one dump, {"rank": r, "dumps": n}: the newest dump of each was used
    several_dumps: list[dict] = field(default_factory=list)
    # what the dumps' times say (overdue ranks, in flight) and each rank's progress between its snapshots
    timing: dict = field(default_factory=dict)
    progress: list[dict] = field(default_factory=list)
    # fewer than half of the world's ranks dumped and nobody said the attempt is complete: the
    # verdict is "incomplete" and no culprit is named until more dumps arrive (docs/diagnose.md)
    waiting_for_dumps: bool = False
    complete: bool = False  # a user said no more dumps will come: diagnose with what there is
    # no dump of the attempt records a collective, a group or a pg_status counter (torch's gloo before 2.11
    # writes empty buffers): the data cannot tell a hang from a healthy job, so it is never called healthy
    records_nothing: bool = False
    notes: list[str] = field(default_factory=list)  # how the dumps were read where their shape asked for it
    # how ranks that left no dump and that no dump lists were found (gloo lists no groups): one line per rule
    world_inferred: list[str] = field(default_factory=list)
    # where the dumped ranks' hosts came from: {"ranks", "known", "from": {source: ranks}} (diagnose.launcher)
    hosts_known: dict = field(default_factory=dict)
    # ranks whose sources name different hosts: [{"rank", "host", "used", "claims": [{"host", "source", "path"}]}]
    host_disputes: list[dict] = field(default_factory=list)
    # the workers the launcher saw fail (a torchrun failure summary beside the dumps): diagnose.launcher.failures_of
    launcher_failures: list[dict] = field(default_factory=list)
    # the hosts' clock offsets estimated from the dumps (frlake.diagnose.clocks), where lateness was weighed
    clocks: dict = field(default_factory=dict)
    # what kind of failure it was (Kind, None when healthy) and the evidence that decided it, in one sentence
    kind: str | None = None
    kind_why: str | None = None
    # a hang where every member of a collective holds it pending past its timeout and none is missing:
    # {"pg", "pg_desc", "seq", "op", "ranks", "members", "pending_s", "timeout_s"} (hang.stuck)
    stuck: dict | None = None
    algorithm_version: int = ALGORITHM_VERSION
    seconds: float = 0.0

    def to_dict(self) -> dict:
        # the fields are JSON values already: a shallow copy (asdict deep-copies every list: slow at 16,384 ranks)
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["verdict"] = self.verdict.value
        d["culprits"] = [c.to_dict() for c in self.culprits]
        return d

    @classmethod
    def from_dict(cls, data: dict) -> Diagnosis:
        """The diagnosis back from its stored JSON (fields a newer frlake added are ignored)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["verdict"] = Verdict(values["verdict"])
        values["culprits"] = [Culprit.from_dict(c) for c in values.get("culprits", [])]
        return cls(**values)

    @property
    def root(self) -> Culprit | None:
        return self.culprits[0] if self.culprits else None


@dataclass(frozen=True)
class Brief:
    """A diagnosis as an ingest run lists it: its verdict and its first culprits (a third is "and more")."""

    job: str
    attempt: int
    verdict: str
    summary: str
    culprits: tuple[Culprit, ...]

    @classmethod
    def of(cls, d: Diagnosis) -> Brief:
        return cls(d.job, d.attempt, d.verdict.value, d.summary, tuple(d.culprits[:3]))

    def to_dict(self) -> dict:
        return {"job": self.job, "attempt": self.attempt, "verdict": self.verdict, "summary": self.summary,
                "culprits": [{k: v for k, v in c.to_dict().items() if k not in ("stack", "stack_id")}
                             for c in self.culprits]}


_FRAMEWORK = ("/torch/", "\\torch\\", "c10d_logger", "/multiprocessing/", "<string>", "runpy.py", "threading.py")


def stack_signature(frames: list[dict] | None) -> str | None:
    """The same call path gives the same signature across jobs and machines:
    function names, file base names and lines, not install paths."""
    if not frames:
        return None
    import hashlib

    text = "|".join(f"{f.get('name')}@{str(f.get('filename') or '').rsplit('/', 1)[-1]}:{f.get('line')}" for f in frames)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def is_library_frame(frame: dict) -> bool:
    """A frame of torch or of Python itself (multiprocessing, threading, runpy), not of the user's code."""
    filename = str(frame.get("filename") or "")
    return any(part in filename for part in _FRAMEWORK)


def user_frames_first(frames: list[dict] | None) -> tuple[list[dict], list[dict]]:
    """A stack's frames of the user's code and those of torch and Python, each innermost first: what a
    report shows first and what it folds."""
    frames = frames or []
    return [f for f in frames if not is_library_frame(f)], [f for f in frames if is_library_frame(f)]


def top_frame(frames: list[dict] | None) -> str | None:
    """The innermost frame of the user's own code (outside torch and Python)."""
    if not frames:
        return None
    for f in frames:
        filename = str(f.get("filename") or "")
        if not any(part in filename for part in _FRAMEWORK):
            return f"{f.get('name')} ({filename.rsplit('/', 1)[-1]}:{f.get('line')})"
    f = frames[0]
    return f"{f.get('name')} ({str(f.get('filename') or '').rsplit('/', 1)[-1]}:{f.get('line')})"


def stall_signature(frames: list[dict] | None) -> str | None:
    """The same stall across code and torch upgrades: the function names of
    the user's own frames (outside torch and Python), innermost first, with no
    file names or line numbers, so that a line moved by an edit, or a new
    torch, keeps the signature. None when the stack has no user frame."""
    if not frames:
        return None
    names = [str(f.get("name")) for f in frames
             if not any(part in str(f.get("filename") or "") for part in _FRAMEWORK)]
    if not names:
        return None
    import hashlib

    return hashlib.blake2b("|".join(names).encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


# What an exit says, as torchelastic reports it (a negative exit code: killed by that signal).
_SIGNAL_MEANS = {
    "SIGKILL": "the kernel's OOM killer sends it, or a scheduler ending the job",
    "SIGABRT": "the process aborted itself: the NCCL watchdog's own abort on a collective timeout, or a failed "
               "C++ assertion",
    "SIGSEGV": "a segmentation fault: native code (a kernel launch, an extension, a driver) touched bad memory",
    "SIGBUS": "a bus error: often /dev/shm too small for the data loaders' shared memory",
    "SIGTERM": "asked to stop: the scheduler's preemption or time limit, or torchelastic stopping the others",
    "SIGINT": "interrupted (Ctrl-C)",
    "SIGHUP": "its terminal or session went away",
    "SIGFPE": "a floating-point exception in native code",
    "SIGILL": "an illegal instruction: a binary built for another CPU",
}


def exit_words(exitcode: int | None, message: str | None = None) -> str:
    """``exit -9 (SIGKILL; the kernel's OOM killer sends it, ...)``, ``exit 1: <the error's message>``."""
    if exitcode is None:
        return "exit unknown"
    if exitcode < 0:
        name = signal_name(exitcode)
        if name is None:
            return f"exit {exitcode} (signal {-exitcode})"
        means = _SIGNAL_MEANS.get(name)
        text = f"exit {exitcode} ({name}{'; ' + means if means else ''})"
        return text + (f": {message}" if message and not message.startswith("Signal ") else "")
    if exitcode == 0:
        return "exit 0 (it finished: the launcher stopped it when another worker failed)"
    text = f"exit {exitcode}"
    if message:
        return f"{text}: {message}"
    return text + (" (a Python exception: its error file or log has the traceback)" if exitcode == 1 else "")


def signal_name(exitcode: int | None) -> str | None:
    """The signal a negative exit code names (-9: SIGKILL); None for a plain exit or an unknown signal."""
    if exitcode is None or exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return None


@dataclass(frozen=True)
class Timeline:
    """When an attempt's newest dump file was written (its mtime), its newest dump ingested, its diagnosis
    made and a receiver last took its alert; None where it has not happened."""

    dumped_at: datetime | None
    ingested_at: datetime | None
    diagnosed_at: datetime | None
    alerted_at: datetime | None

