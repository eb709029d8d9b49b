"""A culprit's part in an incident in words, the same in the terminal and
on the attempt page: its role, whom it waits for, who waits for it."""

from __future__ import annotations

from frlake.entities import WAIT_LIST


def ranks_on_hosts(ranks: list[dict] | None, most_hosts: int = 6) -> str:
    """[{"rank", "host"}] as "ranks 0-7 on gpu-a01; rank 9 on an unknown host":
    each host's ranks in runs, at most ``most_hosts`` hosts (then "...")."""
    if not ranks:
        return ""
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        by_host.setdefault(r.get("host") or "an unknown host", []).append(r["rank"])
    parts = [f"rank{'s' if len(rs) > 1 else ''} {ranks_text(rs)} on {h}" for h, rs in list(by_host.items())[:most_hosts]]
    more = len(by_host) > most_hosts or len(ranks) >= WAIT_LIST
    return "; ".join(parts) + (" ..." if more else "")


def host_words(c) -> str:
    """Where a culprit (a Culprit or its dict) ran, as the summary says it: its host, marked where it is
    inferred; the hosts whose folders all hold its dump; or "an unknown host"."""
    get = c.get if isinstance(c, dict) else lambda k: getattr(c, k)
    if get("hosts_claimed"):
        return " or ".join(get("hosts_claimed")) + " (its dump is in each one's folder)"
    if get("host"):
        return get("host") + (" (host inferred)" if get("host_inferred") else "")
    return "an unknown host"


def hosts_text(hosts, most: int = 6) -> str:
    """Host names, at most ``most`` of them, then how many in all."""
    hosts = list(hosts)
    return ", ".join(hosts[:most]) + (f" ... ({len(hosts)} hosts)" if len(hosts) > most else "")


def seconds_text(seconds: float) -> str:
    """A span of time as a reader says it: 850 ms, 12.5 s, 15 min 0 s, 2 h 5 min."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if minutes else f"{hours} h"


def ranks_text(ranks, most: int = 24) -> str:
    """Ranks, sorted, with each run of three or more consecutive ones as "first-last": 0-7, 9, 12 (16,383
    ranks waiting at a hang read as "0-11999, 12001-16383"); past ``most`` pieces, how many ranks in all."""
    out: list[str] = []
    ranks = sorted(set(ranks))
    start = 0
    for i in range(1, len(ranks) + 1):
        if i == len(ranks) or ranks[i] != ranks[i - 1] + 1:
            run = ranks[start:i]
            out += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else list(map(str, run))
            start = i
    if len(out) > most:
        return ", ".join(out[:most]) + f" ... ({len(ranks)} ranks)"
    return ", ".join(out)


def waiting_text(c: dict) -> str:
    """Who waits for a culprit: directly, by name; in all, counted."""
    waited_by = c.get("waited_by")
    if not waited_by:
        return ""
    text = ranks_on_hosts(waited_by)
    if c.get("waiters") and c["waiters"] > len(waited_by):
        text += f" ({c['waiters']} in all, with those who wait for them)"
    return text


def weaker_text(c: dict) -> str:
    """The label of a culprit named on weaker evidence ("weaker evidence (no dump)"), or "" on direct evidence."""
    evidence = c.get("evidence")
    return f"weaker evidence ({evidence.replace('_', ' ')})" if evidence else ""


def detail_text(c: dict) -> str | None:
    """What a culprit's detail adds to its role, to who waits for it and to its weaker-evidence label (which
    is shown beside it: the detail's own "weaker evidence (...): " is left out): the evidence of a
    straggler, why a suspect is only one, what the weaker evidence is. None when it only counts the waiters
    already named."""
    detail = c.get("detail")
    if detail and c.get("evidence") and detail.startswith("weaker evidence (") and "): " in detail:
        detail = detail.split("): ", 1)[1]
    if not detail or (c.get("waited_by") and detail == f"{c.get('waiters')} rank(s) wait for it"):
        return None
    return detail


def role_text(c: dict) -> str:
    """A culprit's part in the incident."""
    reason, role = c.get("reason"), c.get("role")
    if role == "suspect":  # the data cannot tell which of the suspects it is
        return "suspect: " + {"no_dump": "left no dump (crashed?)", "missing": "never joined"}.get(
            str(reason), str(reason).replace("_", " "))
    if reason == "no_dump" and role != "root":
        return "left no dump: stuck too, or crashed"
    if role == "root":
        if reason == "no_dump":
            return "root cause: left no dump (crashed?)"
        if reason == "missing":
            return "root cause: never joined"
        return f"root cause: {str(reason).replace('_', ' ')}"
    if c.get("waiting_for"):
        return "victim: waits for " + ranks_on_hosts(c["waiting_for"])
    return "victim: behind, waiting for another rank"


def stack_label(c: dict) -> str:
    """Which entry a culprit's FR stack is of: the collective it is named at, or (a rank that never joined
    it) its last entry, with the collective it never reached."""
    entry = c.get("stack_entry")
    if not entry:
        return f"its {c.get('op') or 'collective'} at sequence id {c.get('seq')}" if c.get("seq") is not None \
            else "its last entry"
    where = f"{entry.get('pg_desc') or 'group'} {entry.get('pg')}, sequence id {entry.get('seq')}"
    never = f"; it never reached the {c.get('op')}" if c.get("reason") == "missing" and c.get("op") else ""
    return f"its last entry, {entry.get('op')} in {where}{never}"


def split_stack(frames: list[dict] | None) -> dict:
    """A stack for a page: the user's frames, and torch's and Python's (folded)."""
    from frlake.entities import user_frames_first

    own, library = user_frames_first(frames)
    return {"own": own, "library": library}
