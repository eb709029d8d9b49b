"""What a diagnosis says: plain dataclasses, JSON-ready, and the verdicts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum

ALGORITHM_VERSION = 1


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
    Verdict.MISMATCH: "the members of a collective disagree on its op, sizes, dtypes or state",
    Verdict.HANG: "ranks wait in a collective or point-to-point op for a rank that never joined",
    Verdict.INCOMPLETE: "some ranks of the world left no dump, and the others explain nothing",
    Verdict.STRAGGLER: "one rank is the first to arrive late again and again, beyond the attempt's own jitter",
    Verdict.HEALTHY: "none of the above",
}
_STYLES = {Verdict.MISMATCH: "red", Verdict.HANG: "red", Verdict.INCOMPLETE: "magenta", Verdict.STRAGGLER: "yellow",
           Verdict.HEALTHY: "green"}
VERDICTS = tuple(v.value for v in Verdict)
INCIDENT_VERDICTS = tuple(v.value for v in Verdict if v.is_incident)


@dataclass
class Culprit:
    rank: int
    host: str | None
    reason: str  # missing | no_dump | type_mismatch | size_mismatch | dtype_mismatch | straggler
    role: str = "root"  # root | victim
    pg: str | None = None
    pg_desc: str | None = None
    seq: int | None = None
    op: str | None = None
    expected: str | None = None
    found: str | None = None
    lateness_ms: float | None = None
    waiters: int | None = None
    stack_id: int | None = None  # the stack in the lake's stacks table
    stack: list[dict] | None = None  # its frames, innermost first
    detail: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict) -> Culprit:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


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
    algorithm_version: int = ALGORITHM_VERSION
    seconds: float = 0.0

    def to_dict(self) -> dict:
        # the fields are JSON values already: a shallow copy (asdict's deep copy took seconds at 16,384 ranks)
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


_FRAMEWORK = ("/torch/", "\\torch\\", "c10d_logger", "/multiprocessing/", "<string>", "runpy.py", "threading.py")


def stack_signature(frames: list[dict] | None) -> str | None:
    """The same call path gives the same signature across jobs and machines:
    function names, file base names and lines, not install paths."""
    if not frames:
        return None
    import hashlib

    text = "|".join(f"{f.get('name')}@{str(f.get('filename') or '').rsplit('/', 1)[-1]}:{f.get('line')}" for f in frames)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


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
