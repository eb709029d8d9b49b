"""Who wrote a dump: its job, attempt, host and rank.

Dumps do not name their job, attempt or host, so each is taken from the first
source that knows it, in this order: explicit options (``--job`` ...), keys of
a self-describing dump, the path template (``--layout``), the rank -> host
file (``--hosts``), and for the rank alone the trailing digits of the file
name. Whatever is still unknown makes the file rejected, never guessed.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from frlake.errors import DumpRejected, FrlakeError

DEFAULT_LAYOUT = "{job}/attempt-{attempt}/{host}/rank_{rank}"
_PLACEHOLDER = re.compile(r"\{(job|attempt|host|rank|\*)\}")
_GROUP = {
    "job": r"(?P<job>[^/]+?)",
    "attempt": r"(?P<attempt>\d+)",
    "host": r"(?P<host>[^/]+?)",
    "rank": r"(?P<rank>\d+)",
    "*": r"[^/]*?",
}
_TRAILING_DIGITS = re.compile(r"(\d+)(?:\.[A-Za-z][A-Za-z0-9]*)*$")
_MAX_NAME = 512


@dataclass(frozen=True)
class Identity:
    job: str
    attempt: int
    host: str
    rank: int


class Layout:
    """A path template such as ``{job}/attempt-{attempt}/{host}/rank_{rank}``.

    It is matched against the last components of a file's path, so it works
    whatever folder the ingest started from; a suffix such as ``.json`` or
    ``.pkl`` after the last component is tolerated.
    """

    def __init__(self, template: str):
        self.template = template.strip().strip("/")
        if not self.template:
            raise FrlakeError("the layout template is empty")
        seen: set[str] = set()
        parts = []
        for component in self.template.split("/"):
            pattern, pos = [], 0
            for m in _PLACEHOLDER.finditer(component):
                pattern.append(re.escape(component[pos : m.start()]))
                name = m.group(1)
                if name != "*" and name in seen:
                    raise FrlakeError(f"the layout names {{{name}}} twice: {template!r}")
                seen.add(name)
                pattern.append(_GROUP[name])
                pos = m.end()
            rest = component[pos:]
            if "{" in rest or "}" in rest:
                raise FrlakeError(
                    f"unknown placeholder in layout {template!r}; use {{job}}, {{attempt}}, {{host}}, {{rank}} or {{*}}"
                )
            pattern.append(re.escape(rest))
            parts.append("".join(pattern))
        self.fields = seen - {"*"}
        self._regex = re.compile(r"(?:^|/)" + "/".join(parts) + r"(?:\.[^/.]+)*$")

    def match(self, path: str) -> dict[str, str]:
        # an archive member "x.tar.gz::job/attempt-0/..." is matched as the folder "x.tar.gz/job/..."
        m = self._regex.search(path.replace("\\", "/").replace("::", "/"))
        return {} if m is None else {k: v for k, v in m.groupdict().items() if v is not None}


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


class IdentityResolver:
    def __init__(self, options: IdentityOptions):
        self.options = options
        self.layout = Layout(options.layout or DEFAULT_LAYOUT)

    def resolve(self, path: str, from_dump: dict[str, object]) -> Identity:
        o = self.options
        from_path = self.layout.match(path)
        found: dict[str, object] = {}
        for what, explicit in (("job", o.job), ("attempt", o.attempt), ("host", o.host), ("rank", o.rank)):
            for value in (explicit, from_dump.get(what), from_path.get(what)):
                if value is not None and value != "":
                    found[what] = value
                    break
        if "rank" not in found:
            m = _TRAILING_DIGITS.search(path.replace("\\", "/").rsplit("/", 1)[-1])
            if m:
                found["rank"] = m.group(1)
        rank = _as_int(found.get("rank"), "rank")
        if "host" not in found and o.hosts and rank is not None and rank in o.hosts:
            found["host"] = o.hosts[rank]
        missing = [w for w in ("job", "attempt", "host", "rank") if found.get(w) is None]
        if missing:
            hint = {
                "job": "--job or a {job} in --layout",
                "attempt": "--attempt or an {attempt} in --layout",
                "host": "--host, --hosts FILE or a {host} in --layout",
                "rank": "--rank or a {rank} in --layout",
            }
            raise DumpRejected(
                "unknown_identity",
                f"cannot tell the {', '.join(missing)} of this dump (layout {self.layout.template!r} does not match "
                f"its path); give {'; '.join(hint[m] for m in missing)}",
            )
        return Identity(
            job=_as_name(found["job"], "job"),
            attempt=_as_int(found["attempt"], "attempt"),
            host=_as_name(found["host"], "host"),
            rank=rank,
        )


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
