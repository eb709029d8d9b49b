"""Server-rendered pages; each has its JSON twin under /api/."""

from __future__ import annotations

from flask import Blueprint, render_template, request

from frlake.diagnose.model import VERDICTS
from frlake.query.reports import REPORTS
from frlake.server.api import EXAMPLES, host_history
from frlake.server.context import catalog, config, lake, session
from frlake.server.errors import ApiError
from frlake.server.params import arrivals_view, diagnosis, entry_filter, known_attempt, list_attempts_args, window

bp = Blueprint("ui", __name__)
PROGRESS_GROUPS = 32  # groups whose per-rank progress the attempt page details


@bp.app_context_processor
def _registries() -> dict:
    return {"reports": REPORTS, "verdicts": VERDICTS}


@bp.get("/")
def jobs():
    args = list_attempts_args()
    page, per_page = args.pop("page"), args.pop("per_page")
    total, rows = catalog().list_attempts(**args)
    return render_template("jobs.html", rows=rows, total=total, page=page, per_page=per_page,
                           pages=max(1, -(-total // per_page)), filters=request.args)


@bp.get("/jobs/<path:job>/attempts/<int:attempt>")
def attempt(job: str, attempt: int):
    from frlake.query.attempt import page_groups

    diag = diagnosis(job, attempt)
    d = diag.to_dict()
    # thousands of groups at 16,384 ranks: the page lists the culprits' groups first, then those behind
    d["groups_total"], d["groups"] = len(d["groups"]), page_groups(d["groups"], d["culprits"])
    shown = [g["pg"] for g in d["groups"][:PROGRESS_GROUPS]]
    return render_template("attempt.html", job=job, attempt=attempt, d=d, progress=session().progress(job, attempt, shown),
                           arrivals=arrivals_view(job, attempt, diag), view_args=request.args.to_dict())


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/entries")
def attempt_entries(job: str, attempt: int):
    known_attempt(job, attempt)
    view = session().entries(job, attempt, entry_filter())
    return render_template("entries.html", job=job, attempt=attempt, v=view,
                           stacks=session().stack_diff(job, attempt), filters=request.args)


@bp.get("/reports/<name>")
def report(name: str):
    spec = REPORTS.get(name)
    if spec is None:
        raise ApiError(404, "not_found", f"no report {name!r}; there are {', '.join(REPORTS)}")
    return render_template(spec.page, rows=spec.run(lake(), window(), None), filters=request.args, report=spec)


@bp.get("/hosts")
def hosts():
    return report("flaky-hosts")


@bp.get("/hosts/<host>")
def host(host: str):
    return render_template("host.html", h=host_history(host))


@bp.get("/sql")
def sql():
    return render_template("sql.html", examples=EXAMPLES, needs_token=bool(config().token))


@bp.get("/upload")
def upload():
    return render_template("upload.html", needs_token=bool(config().token))
