"""What ``--notify`` and the ``[notify]`` section of a config file say: where alerts go and which ones."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit

from frlake.entities import VERDICTS, Verdict
from frlake.errors import UsageError

# what is announced by default: every verdict but healthy
ANNOUNCED = tuple(v for v in VERDICTS if v != Verdict.HEALTHY.value)
SECTIONS = ("notify",)  # the sections a config file may hold


@dataclass(frozen=True)
class NotifyConfig:
    urls: tuple[str, ...]
    on: tuple[str, ...] = ANNOUNCED  # the verdicts announced
    jobs: tuple[str, ...] = ()  # shell patterns (fnmatch) of the jobs announced; none: every job
    secret: str | None = field(default=None, repr=False)  # HMAC-SHA256 key of X-Frlake-Signature
    public_url: str | None = None  # where people open the server: the messages link the attempt's page
    timeout_s: float = 10.0  # per request
    max_queue: int = 1000  # messages waiting per receiver; past it the oldest are dropped (counted)
    max_tries: int = 12  # then a message is given up (counted dropped)
    backoff_s: float = 5.0  # the first retry's wait; doubled each try
    backoff_max_s: float = 3600.0
    poll_s: float = 5.0  # how often a server looks for new diagnoses and due retries

    def __post_init__(self):
        if not self.urls:
            raise UsageError("--notify needs a URL")
        for url in self.urls:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise UsageError(f"--notify {label(url)!r}: not an http:// or https:// URL")
        for verdict in self.on:
            if verdict not in ANNOUNCED:
                raise UsageError(f"--notify-on {verdict!r}: choose among {', '.join(ANNOUNCED)} "
                                 "(healthy attempts are never announced)")
        if not self.on:
            raise UsageError("--notify-on names no verdict")
        if self.public_url is not None and urlsplit(self.public_url).scheme not in ("http", "https"):
            raise UsageError(f"--public-url {self.public_url!r}: not an http:// or https:// URL")
        for name in ("timeout_s", "backoff_s", "backoff_max_s", "poll_s"):
            if not getattr(self, name) > 0:
                raise UsageError(f"notify {name} must be above 0")
        if self.max_queue < 1 or self.max_tries < 1:
            raise UsageError("notify max_queue and max_tries must be at least 1")

    def backoff(self, tries: int) -> float:
        """The wait before try ``tries + 1`` (``tries`` failed so far): doubled each time, capped."""
        return min(self.backoff_max_s, self.backoff_s * 2 ** max(0, tries - 1))


def key(url: str) -> str:
    """A destination's name in the catalog: a hash of its URL (a webhook URL often holds its secret)."""
    return hashlib.sha256(url.encode()).hexdigest()


def label(url: str) -> str:
    """The URL without its path and query (where webhooks keep their secret), safe to show."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}/..."


def split_list(values: Iterable[str] | str | None) -> tuple[str, ...]:
    """``["hang,mismatch", "straggler"]`` or ``"hang, mismatch"`` -> ``("hang", "mismatch", "straggler")``."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    return tuple(v.strip() for item in values for v in str(item).split(",") if v.strip())


_KEYS = {"url", "on", "jobs", "secret", "public_url", "timeout_s", "max_queue", "max_tries", "backoff_s",
         "backoff_max_s", "poll_s"}


def read_config_file(path: str | os.PathLike) -> dict[str, dict]:
    """A TOML config file's sections (``[notify]``), checked: an unknown section or key is an error that
    names it."""
    import tomllib

    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read the config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"the config file {path} is not valid TOML: {exc}") from None
    for name, section in data.items():
        if name not in SECTIONS or not isinstance(section, dict):
            raise UsageError(f"the config file {path}: unknown section [{name}]; frlake reads "
                             + ", ".join(f"[{s}]" for s in SECTIONS))
    unknown = sorted(set(data.get("notify", {})) - _KEYS)
    if unknown:
        raise UsageError(f"the config file {path}: unknown key(s) in [notify]: {', '.join(unknown)}; known: "
                         + ", ".join(sorted(_KEYS)))
    return data


def notify_config(urls: Iterable[str] = (), on: Iterable[str] | None = None, jobs: Iterable[str] | None = None,
                  secret: str | None = None, public_url: str | None = None,
                  config_file: str | os.PathLike | None = None) -> NotifyConfig | None:
    """The notify settings from the command line, over the config file's ``[notify]`` section; None when
    neither names a receiver. Given values win; a list given replaces the file's."""
    section = read_config_file(config_file).get("notify", {}) if config_file else {}
    urls = split_list(list(urls)) or split_list(section.get("url"))
    if not urls:
        if on or jobs or public_url:
            raise UsageError("--notify-on, --notify-jobs and --public-url need --notify URL (or [notify] url)")
        return None
    numbers = {k: section[k] for k in _KEYS - {"url", "on", "jobs", "secret", "public_url"} if k in section}
    for k, v in numbers.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UsageError(f"[notify] {k} = {v!r}: a number")
    config = NotifyConfig(
        urls=tuple(dict.fromkeys(urls)),
        on=split_list(on) or split_list(section.get("on")) or ANNOUNCED,
        jobs=split_list(jobs) or split_list(section.get("jobs")),
        secret=secret or section.get("secret") or None,
        public_url=(public_url or section.get("public_url") or None),
    )
    return replace(config, **numbers) if numbers else config
