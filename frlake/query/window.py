"""The window of time a fleet report covers, and how a user writes its ends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
QUICK_RANGES = ("1h", "24h", "7d", "30d")  # the web's buttons beside a since field
WHEN_HINT = ("an ISO 8601 date such as 2026-11-29 or date-time such as 2026-11-29T14:00:00+01:00 (without an "
             "offset: UTC), or a time back from now such as 7d or 12h")


def duration_seconds(text: str) -> float:
    """Seconds in ``90d``, ``12h``, ``10m``, ``30s``, ``2w`` or plain seconds; ValueError otherwise."""
    t = text.strip().lower()
    try:
        value = float(t[:-1]) * _UNITS[t[-1]] if t and t[-1] in _UNITS else float(t)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration; write e.g. 90d, 12h, 10m or 30s") from None
    if value < 0 or value != value:
        raise ValueError(f"{text!r}: a duration cannot be negative")
    return value


def parse_when(text: str) -> date | datetime:
    """A --since / --until / ?since= value: an ISO 8601 date (a whole day, UTC)
    or date-time, with an offset or ``Z`` (without one it is UTC), or a time
    back from now (7d, 12h: a duration). ValueError if it is none of them."""
    text = text.strip()
    if len(text) == 10 and text[4:5] == "-":
        return date.fromisoformat(text)
    if len(text) >= 13 and text[10] in "T ":
        return datetime.fromisoformat(text)
    try:
        back = duration_seconds(text)
    except ValueError:
        raise ValueError(f"not {WHEN_HINT}: {text!r}") from None
    return datetime.now(UTC) - timedelta(seconds=back)


@dataclass(frozen=True)
class Window:
    """Attempts that started in [since, until]: a date is a whole day (UTC)
    and both ends are inclusive; a date-time is that instant (without a zone,
    UTC), also inclusive."""

    since: date | datetime | None = None
    until: date | datetime | None = None

    def bounds_ns(self) -> tuple[int | None, int | None]:
        """[since_ns, until_ns): the half-open range of start times."""
        def ns(d: date | datetime | None, end: bool) -> int | None:
            if d is None:
                return None
            if not isinstance(d, datetime):
                d = datetime.combine(d + timedelta(days=1) if end else d, time.min)
                return int(d.replace(tzinfo=UTC).timestamp()) * 1_000_000_000
            if d.tzinfo is None:
                d = d.replace(tzinfo=UTC)
            whole = (d - datetime(1970, 1, 1, tzinfo=UTC))
            exact = (whole.days * 86_400 + whole.seconds) * 1_000_000_000 + whole.microseconds * 1_000
            return exact + 1_000 if end else exact  # a date-time is to the microsecond: all of it

        return ns(self.since, False), ns(self.until, True)
