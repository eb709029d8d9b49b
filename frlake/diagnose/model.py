"""What a diagnosis says: plain dataclasses, JSON-ready."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

VERDICTS = ("healthy", "hang", "mismatch", "straggler", "incomplete")
ALGORITHM_VERSION = 1


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
    stack: list[dict] | None = None
    detail: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Diagnosis:
    job: str
    attempt: int
    verdict: str
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
        d = asdict(self)
        d["culprits"] = [c.to_dict() for c in self.culprits]
        return d

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
