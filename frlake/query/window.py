"""The window of time a fleet report covers, and how a user writes its ends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta


def parse_when(text: str) -> date | datetime:
    """A --since / --until / ?since= value: an ISO 8601 date (a whole day, UTC)
    or date-time, with an offset or ``Z`` (without one it is UTC). ValueError
    if it is neither."""
    text = text.strip()
    if len(text) == 10:
        return date.fromisoformat(text)
    if len(text) < 13 or text[10] not in "T ":
        raise ValueError(f"not an ISO 8601 date or date-time: {text!r}")
    return datetime.fromisoformat(text)


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
