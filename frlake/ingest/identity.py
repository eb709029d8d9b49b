"""Who wrote a dump: its job, attempt, host and rank.

Dumps do not name their job, attempt or host, so each is taken from the first
source that knows it, in this order: explicit options (``--job`` ...), keys of
a self-describing dump, the path template (``--layout``; without one, the
default layout, then the flat shapes that torch's, torchelastic's and
torchtitan's defaults write: :data:`FLAT_LAYOUTS`), the rank -> host file
(``--hosts``), the host maps found beside the dumps (frlake.ingest.hostmaps),
and for the rank alone the number after ``rank`` in the file name. A job,
attempt or rank still unknown makes the file rejected, never guessed; a host
still unknown is stored as unknown (a dump never names its host; the
diagnosis needs none, and one can be attached later).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from frlake.errors import DumpRejected, FrlakeError

if TYPE_CHECKING:
    from frlake.ingest.hostmaps import HostMaps

DEFAULT_LAYOUT = "{job}/attempt-{attempt}/{host}/rank_{rank}"
# The folders of the flat shapes fleets' defaults write, tried in this order after DEFAULT_LAYOUT when no
# --layout is given; the rank is the number after "rank" in the file name (torch's TORCH_FR_DUMP_TEMP_FILE
# prefix is "nccl_trace_rank_"; torchtitan's "<dump_folder>/comm_traces/rank_"). No attempt in the path is
# attempt 0: a rank's file rewritten later is another snapshot of it, kept beside the first (its bytes differ).
FLAT_LAYOUTS = (
    "{job}/attempt-{attempt}",  # frlake's own, without the host folder
    "{job}/attempt_{attempt}",  # torchelastic's log folders (attempt_0, attempt_1, ...)
    "{job}/attempt{attempt}",
    "{job}/comm_traces",  # torchtitan's save_traces_folder, in the job's dump folder
    "{job}",  # a folder per job: /nfs/fr/<job>/nccl_trace_rank_<r>
)
_PLACEHOLDER = re.compile(r"\{(job|attempt|host|rank|\*)\}")
_GROUP = {
    "job": r"(?P<job>[^/]+?)",
    "attempt": r"(?P<attempt>\d+)",
    "host": r"(?P<host>[^/]+?)",
    "rank": r"(?P<rank>\d+)",
    "*": r"[^/]*?",
}
_TRAILING_DIGITS = re.compile(r"(\d+)(?:\.[A-Za-z][A-Za-z0-9]*)*$")
# "rank_3", "rank-3", "rank3" anywhere in the file name: the number after the last "rank" (torch's
# prefixes end in "rank_"; a dynamic TORCH_FR_DUMP_TEMP_FILE may put a timestamp after it).
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)(?!.*rank[_-]?\d)", re.IGNORECASE)
# A time in a file name: epoch seconds, ms, us or ns (10, 13, 16 or 19 digits), or YYYYMMDD[_-]HHMMSS
# (read as UTC), each standing alone between separators.
_EPOCH_IN_NAME = re.compile(r"(?<![0-9])(\d{10}|\d{13}|\d{16}|\d{19})(?![0-9])")
_DATE_IN_NAME = re.compile(r"(?<![0-9])(\d{8})[_-]?(\d{6})(?![0-9])")
_EPOCH_RANGE_S = (946684800, 4102444800)  # 2000-01-01 .. 2100-01-01
_MAX_NAME = 512
# Bounds on a layout, so that matching a path costs a bounded amount per path
# component (a regular expression with many lazy placeholders side by side
# backtracks for minutes on a crafted path, and a layout comes from uploads too).
MAX_LAYOUT_CHARS = 256
MAX_LAYOUT_COMPONENTS = 16
MAX_PLACEHOLDERS_PER_COMPONENT = 3
MAX_WILDCARDS = 4
_MAX_COMPONENT = 255  # a longer path component never matches (no file system allows one)
_MAX_SUFFIXES = 4  # ".json", ".pkl", ".tar" ... tolerated after the last component


@dataclass(frozen=True)
class Identity:
    job: str
    attempt: int
    host: str | None  # None: unknown (no source named it)
    rank: int
    attempt_inferred: bool = False  # no attempt in the path nor the options: a flat folder's (worker.FlatAttempts)


class Layout:
    """A path template such as ``{job}/attempt-{attempt}/{host}/rank_{rank}``.

    It is matched against the last components of a file's path, so it works
    whatever folder the ingest started from; up to four suffixes such as
    ``.json`` or ``.pkl`` after the last component are tolerated.

    A template has at most 256 characters and 16 components, at most three
    placeholders per component, at most four ``{*}``, and a literal between any
    two placeholders (``{host}{rank}`` could split ``node12`` two ways). Each
    component is matched on its own, so a match costs a bounded time per
    component whatever the path.
    """

    def __init__(self, template: str):
        self.template = template.strip().strip("/")
        if not self.template:
            raise FrlakeError("the layout template is empty")
        if len(self.template) > MAX_LAYOUT_CHARS:
            raise FrlakeError(f"the layout is {len(self.template):,} characters long; at most {MAX_LAYOUT_CHARS} are allowed")
        components = self.template.split("/")
        if len(components) > MAX_LAYOUT_COMPONENTS:
            raise FrlakeError(f"the layout has {len(components)} path components; at most {MAX_LAYOUT_COMPONENTS} are allowed")
        seen: set[str] = set()
        wildcards = 0
        self._parts: list[re.Pattern] = []
        for component in components:
            pattern, pos, count = [], 0, 0
            for m in _PLACEHOLDER.finditer(component):
                literal = component[pos : m.start()]
                name = m.group(1)
                if count and not literal:
                    raise FrlakeError(
                        f"the layout {_short(template)} puts two placeholders side by side in {component[:80]!r}; "
                        "put a literal such as '-' or '_' between them so that a path splits one way only"
                    )
                if name != "*" and name in seen:
                    raise FrlakeError(f"the layout names {{{name}}} twice: {_short(template)}")
                seen.add(name)
                wildcards += name == "*"
                count += 1
                pattern.append(re.escape(literal))
                pattern.append(_GROUP[name])
                pos = m.end()
            rest = component[pos:]
            if "{" in rest or "}" in rest:
                raise FrlakeError(
                    f"unknown placeholder in layout {_short(template)}; use {{job}}, {{attempt}}, {{host}}, {{rank}} or {{*}}"
                )
            if count > MAX_PLACEHOLDERS_PER_COMPONENT:
                raise FrlakeError(
                    f"the layout has {count} placeholders in {component[:80]!r}; "
                    f"at most {MAX_PLACEHOLDERS_PER_COMPONENT} per path component are allowed"
                )
            pattern.append(re.escape(rest))
            self._parts.append(re.compile("".join(pattern)))
        if wildcards > MAX_WILDCARDS:
            raise FrlakeError(f"the layout has {wildcards} {{*}}; at most {MAX_WILDCARDS} are allowed")
        self.fields = seen - {"*"}

    def match(self, path: str) -> dict[str, str]:
        # an archive member "x.tar.gz::job/attempt-0/..." is matched as the folder "x.tar.gz/job/..."
        components = path.replace("\\", "/").replace("::", "/").split("/")
        n = len(self._parts)
        if len(components) < n:
            return {}
        tail = components[-n:]
        if any(len(c) > _MAX_COMPONENT for c in tail):
            return {}
        found: dict[str, str] = {}
        for part, component in zip(self._parts[:-1], tail[:-1]):
            m = part.fullmatch(component)
            if m is None:
                return {}
            found.update(m.groupdict())
        for candidate in _without_suffixes(tail[-1]):
            m = self._parts[-1].fullmatch(candidate)
            if m is not None:
                found.update(m.groupdict())
                return {k: v for k, v in found.items() if v is not None}
        return {}

    def match_folders(self, path: str, levels: tuple[int, ...] = (1,)) -> dict[str, str]:
        """What the template's folders say when its last ``level`` components
        do not match: the folders of ``job/attempt-0/host/trace_rank_3_1730000000``
        (level 1), or of a debug server's ``job/attempt-0/stacks_<ts>.txt``
        (level 2: the file sits where the host folder would be)."""
        components = path.replace("\\", "/").replace("::", "/").split("/")[:-1]
        for level in levels:
            n = len(self._parts) - level
            if n <= 0 or len(components) < n:
                continue
            found: dict[str, str] = {}
            for part, component in zip(self._parts[:n], components[len(components) - n:]):
                m = part.fullmatch(component) if len(component) <= _MAX_COMPONENT else None
                if m is None:
                    break
                found.update(m.groupdict())
            else:
                return {k: v for k, v in found.items() if v is not None}
        return {}


def _without_suffixes(name: str) -> list[str]:
    """``rank_3.json.gz`` -> ``rank_3``, ``rank_3.json``, ``rank_3.json.gz``:
    the name with its suffixes (``.`` and at least one other character) cut,
    most cut first, as the lazy placeholders of a template would have it."""
    candidates = [name]
    end = len(name)
    for _ in range(_MAX_SUFFIXES):
        dot = name.rfind(".", 0, end)
        if dot < 0 or dot == end - 1:
            break
        candidates.append(name[:dot])
        end = dot
    return candidates[::-1]


def _short(template: str) -> str:
    return repr(template if len(template) <= 80 else template[:77] + "...")


def load_hosts(path: str | Path) -> dict[int, str]:
    """Read a rank -> host CSV (``rank,host``; a header line is allowed)."""
    mapping: dict[int, str] = {}
    try:
        with open(path, newline="") as f:
            for lineno, row in enumerate(csv.reader(f), 1):
                if not row or row[0].strip().startswith("#"):
                    continue
                if len(row) < 2:
                    raise FrlakeError(f"{path}:{lineno}: expected 'rank,host'")
                rank, host = row[0].strip(), row[1].strip()
                if lineno == 1 and not rank.isdigit():
                    continue  # header
                if not rank.isdigit() or not host:
                    raise FrlakeError(f"{path}:{lineno}: expected 'rank,host', got {','.join(row)!r}")
                mapping[int(rank)] = host
    except OSError as exc:
        raise FrlakeError(f"cannot read the hosts file {path}: {exc.strerror}") from None
    return mapping


@dataclass(frozen=True)
class IdentityOptions:
    job: str | None = None
    attempt: int | None = None
    host: str | None = None
    rank: int | None = None
    layout: str | None = None
    hosts: dict[int, str] | None = None

    def key(self) -> str:
        """A short, stable hash of these options: a file judged under another
        key could be judged differently (its rejection is retried)."""
        import hashlib
        import json

        canonical = json.dumps([self.job, self.attempt, self.host, self.rank, self.layout or DEFAULT_LAYOUT,
                                sorted((self.hosts or {}).items())], separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


class IdentityResolver:
    def __init__(self, options: IdentityOptions, hostmaps: HostMaps | None = None):
        self.options = options
        self.layout = Layout(options.layout or DEFAULT_LAYOUT)
        self.flat = [] if options.layout else [Layout(t) for t in FLAT_LAYOUTS]
        self.hostmaps = hostmaps

    def _from_path(self, path: str) -> dict[str, str]:
        found = self.layout.match(path) or self.layout.match_folders(path)
        if found:
            return found
        for flat in self.flat:  # the file's folders, each matched whole
            found = flat.match_folders(path, (0,))
            if found:
                return found
        return {}

    def resolve(self, path: str, from_dump: dict[str, object]) -> Identity:
        o = self.options
        from_path = self._from_path(path)
        found: dict[str, object] = {}
        for what, explicit in (("job", o.job), ("attempt", o.attempt), ("host", o.host), ("rank", o.rank)):
            for value in (explicit, from_dump.get(what), from_path.get(what)):
                if value is not None and value != "":
                    found[what] = value
                    break
        if "rank" not in found:
            found.update(_rank_from_name(path, self.layout.template))
        inferred = "attempt" not in found and "job" in from_path and not o.layout
        if inferred:
            found["attempt"] = 0  # a flat folder: attempt 0, or the next one a restart starts (FLAT_LAYOUTS)
        rank = _as_int(found.get("rank"), "rank")
        if "host" not in found and o.hosts and rank is not None and rank in o.hosts:
            found["host"] = o.hosts[rank]
        missing = [w for w in ("job", "attempt", "rank") if found.get(w) is None]
        if missing:
            hint = {
                "job": "--job or a {job} in --layout",
                "attempt": "--attempt or an {attempt} in --layout",
                "rank": "--rank or a {rank} in --layout",
            }
            raise DumpRejected(
                "unknown_identity",
                f"cannot tell the {', '.join(missing)} of this dump (layout {self.layout.template!r} does not match "
                f"its path); give {'; '.join(hint[m] for m in missing)}",
            )
        job, attempt = _as_name(found["job"], "job"), _as_int(found["attempt"], "attempt")
        if "host" not in found and self.hostmaps is not None and rank is not None:
            found["host"] = self.hostmaps.host(path, rank)
        host = found.get("host")
        return Identity(job=job, attempt=attempt, host=None if host is None else _as_name(host, "host"), rank=rank,
                        attempt_inferred=inferred)

    def flat_guess(self, path: str) -> tuple[str, int] | None:
        """The job and rank a file's path gives when neither it nor the options name an attempt (a flat
        folder's), else None: a guess made before the dump is read, whose own keys may say otherwise (it lets
        a chunk read the catalog once for all its flat dumps: worker.FlatAttempts)."""
        o = self.options
        if o.layout or o.attempt is not None:
            return None
        from_path = self._from_path(path)
        if "attempt" in from_path or "job" not in from_path:
            return None
        rank = o.rank if o.rank is not None else from_path.get("rank")
        try:
            if rank is None:
                rank = _rank_from_name(path, self.layout.template).get("rank")
            return (o.job or from_path["job"], int(rank)) if rank is not None else None
        except (DumpRejected, ValueError):
            return None

    def resolve_attempt(self, path: str) -> tuple[str, int]:
        """The job and attempt of a file that is not one rank's dump (the
        debug server's stacks files): from the options, else the layout's folders."""
        o = self.options
        from_path = self.layout.match(path) or self.layout.match_folders(path, (1, 2))
        job = o.job if o.job else from_path.get("job")
        attempt = o.attempt if o.attempt is not None else from_path.get("attempt")
        if job is None or attempt is None:
            raise DumpRejected(
                "unknown_identity",
                f"cannot tell the job and attempt of this debug server file (the folders of layout "
                f"{self.layout.template!r} do not match its path); give --job and --attempt")
        return _as_name(job, "job"), _as_int(attempt, "attempt")


def _rank_from_name(path: str, template: str) -> dict[str, str]:
    """The rank a file's name gives, never a timestamp: the number after
    ``rank`` (``trace_rank_3_1730000000`` is rank 3), else the trailing digits
    unless they are a time (``dump_1730000000`` is refused: give --layout)."""
    base = path.replace("\\", "/").rsplit("/", 1)[-1]
    if len(base) > _MAX_COMPONENT:
        return {}
    m = _RANK_IN_NAME.search(base)
    if m:
        return {"rank": m.group(1)}
    m = _TRAILING_DIGITS.search(base)
    if not m:
        return {}
    digits = m.group(1)
    if name_time_ns(base) is not None and (len(digits) >= 10 or _DATE_IN_NAME.search(base)):
        raise DumpRejected(
            "unknown_identity",
            f"the file name {base[:120]!r} ends in a time, not a rank (layout {template!r} does not match its path); "
            "give --rank, or a --layout with {rank}, e.g. 'trace_{rank}_{*}'")
    return {"rank": digits}


def name_time_ns(name: str) -> int | None:
    """The time a file's name carries (nanoseconds since the epoch), or None:
    the start of :func:`name_time_interval`."""
    found = name_time_interval(name)
    return found[0] if found is not None else None


def name_time_interval(name: str) -> tuple[int, int] | None:
    """The time a file's name carries, as the interval it stands for: its start
    (nanoseconds since the epoch) and its width, the name's resolution. Epoch
    seconds/ms/us/ns between 2000 and 2100 (``rank_3.1730000000`` stands for
    [1730000000 s, 1730000001 s)), or ``YYYYMMDD_HHMMSS`` (UTC, one second
    wide). The last such time in the name wins (a rank or step number is never
    one: it has fewer than 10 digits)."""
    base = name.replace("\\", "/").rsplit("/", 1)[-1][:_MAX_COMPONENT]
    found: list[tuple[int, int, int]] = []  # (position, start, width)
    for m in _DATE_IN_NAME.finditer(base):
        try:
            dt = datetime.strptime(m.group(1) + m.group(2), "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        except ValueError:
            continue
        found.append((m.start(), int(dt.timestamp()) * 1_000_000_000, 1_000_000_000))
    for m in _EPOCH_IN_NAME.finditer(base):
        digits = m.group(1)
        seconds = int(digits[:10])
        if _EPOCH_RANGE_S[0] <= seconds < _EPOCH_RANGE_S[1]:
            width = 10 ** (19 - len(digits))
            found.append((m.start(), int(digits) * width, width))
    if not found:
        return None
    _, start, width = max(found)
    return start, width


def _as_int(value: object, what: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        raise DumpRejected("unknown_identity", f"the {what} {value!r} is not a whole number") from None
    if not 0 <= number < 2**31:
        raise DumpRejected("unknown_identity", f"the {what} {number} is out of range")
    return number


def _as_name(value: object, what: str) -> str:
    text = str(value).strip()
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a dump's string, or an undecodable byte of a path (surrogateescape)
            raise DumpRejected("bad_text", f"the {what} holds an unpaired surrogate, which UTF-8 cannot store") from None
    if not text or len(text) > _MAX_NAME or any(ord(c) < 32 for c in text) or text in (".", ".."):
        raise DumpRejected("unknown_identity", f"the {what} {text[:80]!r} is not a usable name")
    return text
