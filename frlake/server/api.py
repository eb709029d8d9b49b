"""The JSON API: every page's twin under /api/ (docs/api.md)."""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, jsonify, request, stream_with_context

from frlake.ingest import IdentityOptions, IngestOptions
from frlake.ingest.upload import UploadOverBudget, UploadRefused
from frlake.query.reports import REPORTS
from frlake.server.context import catalog, config, lake, sandbox, session, upload_budget
from frlake.server.errors import ApiError
from frlake.server.params import (
    arrivals_view,
    diagnosis,
    entry_filter,
    int_arg,
    known_attempt,
    list_attempts_args,
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


def attempt_dict(a) -> dict:
    return {
        "job": a.job, "attempt": a.attempt, "verdict": a.verdict, "summary": a.summary, "n_dumps": a.n_dumps,
        "hosts": list(a.hosts), "started_ns": a.started_ns, "last_seen_at": a.last_seen_at,
        "root": None if a.root_rank is None else {"rank": a.root_rank, "host": a.root_host, "reason": a.root_reason},
    }


@bp.get("/health")
def health():
    return jsonify({"status": "ok"})


@bp.get("/jobs")
def jobs():
    args = list_attempts_args()
    page, per_page = args.pop("page"), args.pop("per_page")
    total, rows = catalog().list_attempts(**args)
    grouped: dict[str, list] = {}
    for a in rows:
        grouped.setdefault(a.job, []).append(attempt_dict(a))
    return jsonify({"total_attempts": total, "page": page, "per_page": per_page,
                    "jobs": [{"job": j, "attempts": atts} for j, atts in grouped.items()],
                    "attempts": [attempt_dict(a) for a in rows]})


@bp.get("/jobs/<path:job>")
def job(job: str):
    total, rows = catalog().list_attempts(job=job, limit=10_000)
    if not total:
        raise ApiError(404, "not_found", f"no job {job!r} in the lake")
    return jsonify({"job": job, "attempts": [attempt_dict(a) for a in rows]})


@bp.get("/jobs/<path:job>/attempts/<int:attempt>")
def attempt_detail(job: str, attempt: int):
    known_attempt(job, attempt)
    d = diagnosis(job, attempt)
    return jsonify({"job": job, "attempt": attempt, "verdict": d.verdict.value, "summary": d.summary,
                    "diagnosis": d.to_dict(), "progress": session().progress(job, attempt)})


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/progress")
def attempt_progress(job: str, attempt: int):
    known_attempt(job, attempt)
    return jsonify({"job": job, "attempt": attempt, "groups": session().progress(job, attempt)})


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/diagnosis")
def attempt_diagnosis(job: str, attempt: int):
    return jsonify(diagnosis(job, attempt).to_dict())


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/entries")
def attempt_entries(job: str, attempt: int):
    known_attempt(job, attempt)
    view = session().entries(job, attempt, entry_filter())
    return jsonify({**view, "stacks": session().stack_diff(job, attempt)})


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/arrivals")
def attempt_arrivals(job: str, attempt: int):
    known_attempt(job, attempt)
    return jsonify(arrivals_view(job, attempt))


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/trace")
def attempt_trace(job: str, attempt: int):
    known_attempt(job, attempt)
    stream = session().trace(job, attempt, trace_window())  # its own connection: the stream outlives the request's g
    name = f"{job}-attempt-{attempt}.trace.json".replace('"', "")
    return Response(stream_with_context(stream), mimetype="application/json",
                    headers={"Content-Disposition": f'attachment; filename="{name}"'})


@bp.get("/reports/<name>")
def report(name: str):
    if name not in REPORTS:
        raise ApiError(404, "not_found", f"no report {name!r}; there are {', '.join(REPORTS)}")
    rows = REPORTS[name].run(lake(), window(), int_arg("limit", 0, 0) or None)
    return jsonify({"report": name, "rows": rows})


@bp.get("/hosts")
def hosts():
    return jsonify({"hosts": REPORTS["flaky-hosts"].run(lake(), window(), None)})


@bp.get("/hosts/<host>")
def host(host: str):
    return jsonify(host_history(host))


def host_history(host: str) -> dict:
    con = lake()
    summary = con.execute("SELECT * FROM hosts WHERE host = ?", [host]).fetchone()
    if summary is None:
        raise ApiError(404, "not_found", f"no host {host!r} in the lake")
    cols = [d[0] for d in con.description]
    total, attempts = catalog().list_attempts(host=host, limit=500)
    blamed = con.execute(
        "SELECT job, attempt, reason, role, position, pg_desc, seq, op FROM culprits WHERE host = ? ORDER BY started DESC",
        [host],
    ).fetchall()
    return {
        "host": host, "summary": dict(zip(cols, summary)), "attempts_total": total,
        "attempts": [attempt_dict(a) for a in attempts],
        "culprit_of": [dict(zip(("job", "attempt", "reason", "role", "position", "pg_desc", "seq", "op"), r)) for r in blamed],
    }


@bp.get("/query/examples")
def examples():
    return jsonify({"examples": [{"title": t, "sql": q} for t, q in EXAMPLES]})


@bp.post("/query")
def query():
    require_token()
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("sql"), str) or not body["sql"].strip():
        raise ApiError(400, "bad_request", 'send JSON {"sql": "SELECT ..."}')
    result = sandbox().run(body["sql"])
    return jsonify({"columns": result.columns, "rows": [list(r) for r in result.rows],
                    "truncated": result.truncated, "seconds": round(result.seconds, 4)})


@bp.post("/dumps")
def upload():
    require_token()
    form = request.form

    def number(name: str) -> int | None:
        text = form.get(name, "").strip()
        if not text:
            return None
        if not text.isdigit():
            raise ApiError(400, "bad_request", f"'{name}' must be a whole number")
        return int(text)

    identity = IdentityOptions(job=form.get("job") or None, attempt=number("attempt"), host=form.get("host") or None,
                               rank=number("rank"), layout=form.get("layout") or None)
    files = request.files.getlist("file")
    if not files:
        raise ApiError(400, "bad_request", "send one or more 'file' parts (multipart/form-data)")
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
    return jsonify({
        "ingested": summary.ingested, "already_present": summary.already_present, "rejected": summary.rejected,
        "files": summary.ingested_files, "rejected_files": summary.rejected_files, "diagnosed": summary.diagnosed,
    }), 201 if summary.ingested else 200
