"""The message of one diagnosis: the structured fields a program reads, and ``text``, which Slack,
Mattermost and Teams incoming webhooks show. Built in one function, so a field is one line."""

from __future__ import annotations

from urllib.parse import quote

from frlake.entities import Culprit, Diagnosis, Kind


def root_cause(diagnosis: Diagnosis) -> Culprit | None:
    """The culprit a message names: the first root cause, else the first suspect (the data cannot tell)."""
    for role in ("root", "suspect"):
        for c in diagnosis.culprits:
            if c.role == role:
                return c
    return None


def culprit_words(c: Culprit | None) -> str | None:
    """The root cause in words, as the outbox keeps it to tell what changed: ``rank 3 on gpu-b03 (missing)``."""
    if c is None:
        return None
    host = c.host or " or ".join(c.hosts_claimed or []) or "an unknown host"
    return f"{'suspect ' if c.role == 'suspect' else ''}rank {c.rank} on {host} ({c.reason})"


def is_partial(diagnosis: Diagnosis) -> bool:
    """Made before every rank the dumps imply had dumped, and before the attempt settled (a watch marks it
    complete after its quiet period; a user with ``frlake diagnose --complete``)."""
    return not diagnosis.complete and bool(diagnosis.ranks_missing_dump)


def named_directly(diagnosis: Diagnosis) -> bool:
    """A root cause its own dump names (not only the absence of a dump, which a slow writer also shows)."""
    c = root_cause(diagnosis)
    return c is not None and c.role == "root" and c.evidence in (None, "pending_tail", "pg_status")


def dumped_words(diagnosis: Diagnosis) -> str:
    return f"{len(diagnosis.ranks_dumped)} of {diagnosis.world_size} ranks dumped"


def attempt_url(public_url: str | None, job: str, attempt: int) -> str | None:
    if not public_url:
        return None
    return f"{public_url.rstrip('/')}/jobs/{quote(job, safe='')}/attempts/{attempt}"


def message(diagnosis: Diagnosis, *, revision: int, public_url: str | None = None, drain: dict | None = None,
            previous: tuple[str | None, str | None] | None = None, cause: dict | None = None,
            was_partial: bool = False, timeline: dict | None = None) -> dict:
    """The JSON posted for one diagnosis. ``drain``: the drain list's row of the culprit's host ({"action",
    "score", ...}; None: the host is on no list). ``previous``: the verdict and root cause announced before,
    for an update (None: the attempt is announced for the first time); ``was_partial``: what was announced
    was partial. ``cause``: host or code?, the call of frlake.query.causes (``Cause.to_dict()``; None: no
    call). ``timeline``: when the attempt's newest dump was written, ingested and diagnosed ({"last_dump_at",
    "ingested_at", "diagnosed_at"}: ISO 8601)."""
    c = root_cause(diagnosis)
    verdict = diagnosis.verdict.value
    url = attempt_url(public_url, diagnosis.job, diagnosis.attempt)
    partial = is_partial(diagnosis)
    changes = {}
    if previous is not None:
        if previous[0] != verdict:
            changes["verdict"] = {"was": previous[0], "now": verdict}
        if previous[1] != culprit_words(c):
            changes["root_cause"] = {"was": previous[1], "now": culprit_words(c)}
        if was_partial and not partial:
            changes["settled"] = {"was": "partial", "now": "complete" if not diagnosis.ranks_missing_dump
                                  else f"settled with {dumped_words(diagnosis)}"}
    host = c.host if c is not None else None
    drain_state = None if host is None else {
        "host": host, "action": (drain or {}).get("action", "ok"), "score": (drain or {}).get("score", 0.0)}
    body = {
        "event": "update" if previous is not None else "new",
        "job": diagnosis.job,
        "attempt": diagnosis.attempt,
        "revision": revision,
        "verdict": verdict,
        "kind": diagnosis.kind,
        "kind_why": diagnosis.kind_why,
        "root_cause": None if c is None else {
            "rank": c.rank, "host": c.host, "host_inferred": bool(c.host_inferred), "group": c.pg,
            "group_desc": c.pg_desc, "seq": c.seq, "op": c.op, "reason": c.reason, "role": c.role,
            # how it died, where the launcher's failure summary says (exitcode, signal, time, message, words)
            "died": c.died},
        "summary": diagnosis.summary,
        "url": url,
        "drain": drain_state,
        "changed": changes or None,
        "cause": cause,
        # made before every rank dumped: the root cause is named by its own dump, and more may come
        "partial": partial,
        "ranks_dumped": len(diagnosis.ranks_dumped),
        "world_size": diagnosis.world_size,
        "timeline": timeline or {},
    }
    body["text"] = _text(body)
    return body


def _text(body: dict) -> str:
    """One or two lines for a chat channel (Slack's mrkdwn: *bold*, <url|label>)."""
    where = f"{body['job']} attempt {body['attempt']}"
    title = f"<{body['url']}|{where}>" if body["url"] else where
    lead = "frlake update" if body["event"] == "update" else "frlake"
    summary = body["summary"].removeprefix(f"{where}: ")  # the summary opens with the same words
    kind = f" ({Kind(body['kind']).label})" if body["kind"] else ""
    verdict = f"{body['verdict']} suspected" if body["partial"] else body["verdict"]
    lines = [f"*{lead}: {verdict}{kind}* in {title}: {summary}"]
    if body["partial"]:
        lines.append(f"partial: {body['ranks_dumped']} of {body['world_size']} ranks dumped; the root cause is "
                     "named by its own dump, and an update follows when the attempt settles")
    if body["changed"]:
        lines.append("changed: " + "; ".join(f"{k.replace('_', ' ')} {v['was'] or 'none'} -> {v['now'] or 'none'}"
                                              for k, v in body["changed"].items()))
    root = body["root_cause"]
    if root and root.get("died"):
        lines.append(f"rank {root['rank']} on {root['host'] or 'an unknown host'} {root['died']['words']}")
    cause = body["cause"]
    if cause:
        confidence = f", {cause['confidence']} confidence" if cause.get("confidence") else ""
        lines.append(f"host or code? {cause['call']}{confidence} ({cause['label']}): {cause['why']}")
    drain = body["drain"]
    if drain and drain["action"] != "ok":
        lines.append(f"host {drain['host']} is on the drain list: {drain['action']} (score {drain['score']})")
    return "\n".join(lines)
