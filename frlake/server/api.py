"""The JSON API: every page's twin under /api/ (docs/api.md)."""

from __future__ import annotations

import hmac
import re

from flask import Blueprint, Response, current_app, jsonify, request, stream_with_context

from frlake.errors import FrlakeError
from frlake.ingest import IdentityOptions, IngestOptions
from frlake.ingest.upload import UploadOverBudget, UploadRefused
from frlake.query.attempt import UnknownGroup
from frlake.query.history import AttemptSummary, HostHistory
from frlake.query.reports import REPORTS
from frlake.server.context import attempt_facets, config, sandbox, session, upload_budget, views
from frlake.server.errors import ApiError
from frlake.server.params import (
    JOBS,
    arrivals_view,
    cause,
    diagnosis,
    entries_view,
    int_arg,
    known_attempt,
    known_job,
    list_attempts_args,
    progress,
    similar,
    takes,
    trace_window,
    window,
)

bp = Blueprint("api", __name__)

EXAMPLES = [
    ("Jobs, attempts and what was found", "SELECT job, attempt, verdict, summary FROM incidents ORDER BY started DESC NULLS LAST"),
    ("Root causes by host", "SELECT host, reason, count(*) AS attempts FROM culprits WHERE position = 0 GROUP BY ALL ORDER BY attempts DESC"),
    ("Entries per op", "SELECT op, count(*) AS entries, count(DISTINCT job) AS jobs FROM entries GROUP BY op ORDER BY entries DESC"),
    ("Ranks that were first to be late", "SELECT job, attempt, rank, host, root_late_events, root_late_ms FROM rank_stats WHERE root_late_events > 0 ORDER BY root_late_events DESC"),
    ("Files set aside", "SELECT path, reason, detail FROM files WHERE status = 'rejected'"),
    ("Hosts", "SELECT * FROM hosts ORDER BY attempts DESC"),
]


def require_token() -> None:
    token = config().token
    if not token:
        return
    given = request.headers.get("Authorization", "")
    if not (given.startswith("Bearer ") and hmac.compare_digest(given[7:].encode(), token.encode())):
        raise ApiError(401, "unauthorized", "this needs 'Authorization: Bearer <token>' with the server's token")


@bp.get("/health")
@takes()
def health():
    return jsonify({"status": "ok"})


@bp.get("/watch")
@takes()
def watch():
    """The watched paths' scanner (``frlake serve --watch``): its last scan, errors and next run."""
    watcher = current_app.extensions.get("frlake_watch")
    if watcher is None:
        return jsonify({"watching": False})
    return jsonify({"watching": True, **watcher.status().to_dict()})


@bp.get("/notify")
@takes()
def notify():
    """The alerts (``--notify URL``): this server's passes, and every receiver's queue, deliveries, failures and
    last error (kept in the catalog: a cron ingest's receivers are listed too)."""
    return jsonify(notify_state())


def notify_state() -> dict:
    alerts = current_app.extensions.get("frlake_alerts")
    return {"notifying": alerts is not None, **(alerts.status().to_dict() if alerts else {}),
            "destinations": [d.to_dict() for d in session().notify_status()]}


@bp.get("/jobs")
@takes(*JOBS)
def jobs():
    args = list_attempts_args()
    page, per_page = args.pop("page"), args.pop("per_page")
    total, rows = session().list_attempts(**args)
    grouped: dict[str, list] = {}
    for a in rows:
        grouped.setdefault(a.job, []).append(AttemptSummary.of(a))
    facets = attempt_facets(**{k: v for k, v in args.items() if k not in ("offset", "limit")})
    return jsonify({"total_attempts": total, "page": page, "per_page": per_page,
                    "jobs": [{"job": j, "attempts": atts} for j, atts in grouped.items()],
                    "attempts": [AttemptSummary.of(a) for a in rows], "facets": facets})


@bp.get("/jobs/<path:job>")
@takes()
def job(job: str):
    known_job(job)
    return jsonify(session().job_history(job, views()))


@bp.get("/jobs/<path:job>/attempts/<int:attempt>")
@takes()
def attempt_detail(job: str, attempt: int):
    known_attempt(job, attempt)
    d, c = diagnosis(job, attempt), cause(job, attempt)
    return jsonify({"job": job, "attempt": attempt, "verdict": d.verdict.value, "summary": d.summary,
                    "diagnosis": d.to_dict(), "progress": progress(job, attempt),
                    "cause": None if c is None else c.to_dict()})


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/progress")
@takes()
def attempt_progress(job: str, attempt: int):
    known_attempt(job, attempt)
    return jsonify({"job": job, "attempt": attempt, "groups": progress(job, attempt)})


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/diagnosis")
@takes()
def attempt_diagnosis(job: str, attempt: int):
    return jsonify(diagnosis(job, attempt).to_dict())


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/entries")
@takes("ranks", "pg", "seq")
def attempt_entries(job: str, attempt: int):
    known_attempt(job, attempt)
    view, stacks = entries_view(job, attempt)
    return jsonify({**view.to_dict(), "stacks": stacks})


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/arrivals")
@takes("pg", "last", "seq", "around", "max_ranks")
def attempt_arrivals(job: str, attempt: int):
    known_attempt(job, attempt)
    try:
        return jsonify(arrivals_view(job, attempt))
    except UnknownGroup as exc:
        raise ApiError(404, "not_found", str(exc)) from None


@bp.post("/jobs/<path:job>/attempts/<int:attempt>/complete")
@takes()
def attempt_complete(job: str, attempt: int):
    """No more dumps of this attempt will come: diagnose it with the ones there are, and keep the mark."""
    require_token()
    known_attempt(job, attempt)
    d = session().mark_complete(job, attempt)
    return jsonify({"job": job, "attempt": attempt, "complete": True, "verdict": d.verdict.value,
                    "summary": d.summary, "diagnosis": d.to_dict()})


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/trace")
@takes("ranks", "pg", "around", "max_events")
def attempt_trace(job: str, attempt: int):
    known_attempt(job, attempt)
    stream = session().trace(job, attempt, trace_window())  # its own connection: the stream outlives the request's g
    name = f"{job}-attempt-{attempt}.trace.json".replace('"', "")
    return Response(stream_with_context(stream), mimetype="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


@bp.get("/reports/<name>")
@takes("since", "until", "limit")
def report(name: str):
    if name not in REPORTS:
        raise ApiError(404, "not_found", f"no report {name!r}; there are {', '.join(REPORTS)}")
    rows = session().report(name, window(), int_arg("limit", 0, 0) or None, con=views())
    return jsonify({"report": name, "columns": rows.columns, "rows": rows})


@bp.get("/hosts")
@takes("since", "until")
def hosts():
    return jsonify({"hosts": session().report("flaky-hosts", window(), con=views())})


@bp.get("/hosts/<host>")
@takes()
def host(host: str):
    return jsonify(known_host(host))


def known_host(host: str) -> HostHistory:
    """The host's history; a 404 that names hosts there are if the lake never saw it."""
    h = session().host_history(host, views())
    if h is None:
        hosts = [r[0] for r in views().execute("SELECT host FROM hosts WHERE host IS NOT NULL ORDER BY host").fetchall()]
        from flask import url_for

        raise ApiError(404, "not_found", f"no host {host!r} in the lake; there are {len(hosts)} host(s)",
                       see=[(h, url_for("ui.host", host=h)) for h in similar(host, hosts)])
    return h


@bp.get("/query/examples")
@takes()
def examples():
    return jsonify({"examples": [{"title": t, "sql": q} for t, q in EXAMPLES]})


@bp.post("/query")
@takes()
def query():
    require_token()
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("sql"), str) or not body["sql"].strip():
        raise ApiError(400, "bad_request", 'send JSON {"sql": "SELECT ..."} (and "next" for the rows after a cap)')
    offset = body.get("next") or 0
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ApiError(400, "bad_request", f'"next" is the "next" of the answer before (a row number), not {offset!r}')
    from frlake.values import deep_plain

    result = run_query(body["sql"], offset)
    return jsonify({**result, "rows": [deep_plain(list(r)) for r in result["rows"]]})


QUERY_WAIT_S = 2.0  # how long a query waits for one of the server's --max-queries slots before its 429


def run_query(sql: str, offset: int = 0) -> dict:
    """Users' SQL in this thread's sandbox, from row ``offset`` on: ``columns``, ``rows``, ``truncated``,
    ``seconds`` and ``next`` (the offset of the rows after a cap, None when there are none)."""
    slots = current_app.extensions["frlake_query_slots"]
    if not slots.acquire(timeout=QUERY_WAIT_S):
        raise ApiError(429, "too_many_queries",
                       f"{config().max_queries} queries are running, the most this server runs at once "
                       "(frlake serve --max-queries); try again in a moment", headers={"Retry-After": "1"})
    try:
        result = sandbox().run(sql, offset=offset)
    finally:
        slots.release()
    more = result.truncated and bool(result.rows)  # a first row over the byte cap cannot be paged past
    return {"columns": result.columns, "rows": result.rows, "truncated": result.truncated,
            "seconds": round(result.seconds, 4), "next": offset + len(result.rows) if more else None}


@bp.get("/host-maps")
@takes("job")
def host_maps():
    return jsonify({"attached": [dict(a, attached_at=a["attached_at"].isoformat() if a["attached_at"] else None)
                                 for a in session().catalog.dumps.attached(request.args.get("job") or None)]})


@bp.post("/host-maps")
@takes()
def attach_host_map():
    """Attach a host map (the multipart 'file' part; fields 'job', optional 'attempt' and 'kind') to attempts
    in the lake: frlake hosts attach."""
    require_token()
    form = request.form
    job = (form.get("job") or "").strip()
    attempt_text = (form.get("attempt") or "").strip()
    if not job:
        raise ApiError(400, "bad_request", "say which job the host map is of (the 'job' field)")
    if attempt_text and not attempt_text.isdigit():
        raise ApiError(400, "bad_request", f"the attempt field must be a whole number, not {attempt_text!r}")
    upload = request.files.get("file")
    if upload is None or not upload.filename:
        raise ApiError(400, "bad_request", "choose the host map to attach (the 'file' part of a multipart/form-data "
                                           "request)")
    from frlake.ingest import hostmaps

    data = upload.stream.read(hostmaps.MAX_BYTES + 1)
    try:
        attach_id, diagnoses = session().attach_host_map(
            f"upload:{upload.filename}", data, job, int(attempt_text) if attempt_text else None,
            form.get("kind") or None)
    except FrlakeError as exc:
        raise ApiError(422, "bad_host_map", str(exc)) from None
    return jsonify({"attach_id": attach_id, "attempts": [
        {"job": d.job, "attempt": d.attempt, "verdict": d.verdict.value, "summary": d.summary,
         "hosts_known": d.hosts_known} for d in diagnoses]})


@bp.delete("/host-maps/<attach_id>")
@takes()
def detach_host_map(attach_id: str):
    require_token()
    try:
        diagnoses = session().detach_hosts(attach_id)
    except FrlakeError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    return jsonify({"detached": attach_id, "attempts": [
        {"job": d.job, "attempt": d.attempt, "verdict": d.verdict.value, "summary": d.summary} for d in diagnoses]})


@bp.post("/dumps")
@takes()
def upload():
    require_token()
    form = request.form

    def number(name: str) -> int | None:
        text = form.get(name, "").strip()
        if not text:
            return None
        if not text.isdigit():
            raise ApiError(400, "bad_request", f"the {name} field must be a whole number (0, 1, 2, ...), not {text!r}")
        return int(text)

    identity = IdentityOptions(job=form.get("job") or None, attempt=number("attempt"), host=form.get("host") or None,
                               rank=number("rank"), layout=form.get("layout") or None)
    files = request.files.getlist("file")
    if not files or not any(f.filename for f in files):
        raise ApiError(400, "bad_request", "choose one or more files to upload (the 'file' parts of a "
                                           "multipart/form-data request)")
    options = IngestOptions(identity=identity, workers=1, isolate=True)
    try:
        # a bad layout is refused before a byte is saved (400)
        summary = session().ingest_upload([(f.filename or "upload", f.stream) for f in files], options,
                                          config().upload_limits, upload_budget())
    except UploadRefused as exc:
        raise ApiError(400, "upload_refused", str(exc)) from None
    except UploadOverBudget as exc:
        raise ApiError(503, "upload_budget_exceeded", str(exc)) from None
    finally:
        for f in files:
            f.close()
    from flask import url_for

    touched = sorted({(f["job"], f["attempt"]) for f in summary.ingested_files if f.get("job") is not None})
    diagnosed = {(d.job, d.attempt): d for d in summary.diagnosed}
    attempts = [{"job": j, "attempt": a, "url": url_for("ui.attempt", job=j, attempt=a),
                 "verdict": diagnosed[(j, a)].verdict if (j, a) in diagnosed else None,
                 "summary": diagnosed[(j, a)].summary if (j, a) in diagnosed else None}
                for j, a in touched]
    return jsonify({
        "ingested": summary.ingested, "already_present": summary.already_present, "rejected": summary.rejected,
        "files": summary.ingested_files, "rejected_files": [_in_form_words(f) for f in summary.rejected_files],
        "diagnosed": [d.to_dict() for d in summary.diagnosed], "attempts": attempts,
    }), 201 if summary.ingested else 200


_FLAG = re.compile(r"--(job|attempt|hosts FILE|host|rank|layout)\b")
_FIELD = {"hosts FILE": "the host field"}


def _in_form_words(f: dict) -> dict:
    """A rejection's detail as the upload form names things: fields, not the CLI's flags."""
    detail = _FLAG.sub(lambda m: _FIELD.get(m.group(1), f"the {m.group(1)} field"), f.get("detail") or "")
    detail = detail.replace("the host field, the host field", "the host field")
    return dict(f, detail=detail)
