"""A culprit's part in an incident in words, the same in the terminal and
on the attempt page: its role, whom it waits for, who waits for it."""

from __future__ import annotations

from frlake.diagnose.model import WAIT_LIST


def ranks_on_hosts(ranks: list[dict] | None) -> str:
    """[{"rank", "host"}] as "ranks 0, 2 on gpu-a01; rank 3 on an unknown host"."""
    if not ranks:
        return ""
    by_host: dict[str, list[int]] = {}
    for r in ranks:
        by_host.setdefault(r.get("host") or "an unknown host", []).append(r["rank"])
    parts = [f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))} on {h}" for h, rs in by_host.items()]
    return "; ".join(parts) + (" ..." if len(ranks) >= WAIT_LIST else "")


def waiting_text(c: dict) -> str:
    """Who waits for a culprit: directly, by name; in all, counted."""
    waited_by = c.get("waited_by")
    if not waited_by:
        return ""
    text = ranks_on_hosts(waited_by)
    if c.get("waiters") and c["waiters"] > len(waited_by):
        text += f" ({c['waiters']} in all, with those who wait for them)"
    return text


def role_text(c: dict) -> str:
    """A culprit's part in the incident."""
    reason, role = c.get("reason"), c.get("role")
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
