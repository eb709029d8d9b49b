"""Server-rendered pages; each has its JSON twin under /api/."""

from __future__ import annotations

from flask import Blueprint, render_template, request

from frlake.query.reports import REPORTS, Window
from frlake.server import api, catalog, config, lake

bp = Blueprint("ui", __name__)
VERDICTS = ("healthy", "hang", "mismatch", "straggler", "incomplete")


@bp.get("/")
def jobs():
    args = api.list_attempts_args()
    page, per_page = args.pop("page"), args.pop("per_page")
    total, rows = catalog().list_attempts(**args)
    return render_template("jobs.html", rows=rows, total=total, page=page, per_page=per_page,
                           pages=max(1, -(-total // per_page)), filters=request.args, verdicts=VERDICTS)


@bp.get("/jobs/<job>/attempts/<int:attempt>")
def attempt(job: str, attempt: int):
    api._known_attempt(job, attempt)
    from frlake.query.attempt import progress

    d = api._diagnosis(job, attempt)
    return render_template("attempt.html", job=job, attempt=attempt, d=d, progress=progress(lake(), job, attempt))


@bp.get("/hosts")
def hosts():
    rows = REPORTS["flaky-hosts"](lake(), Window(api._date("since"), api._date("until")))
    return render_template("hosts.html", rows=rows, filters=request.args)


@bp.get("/hosts/<host>")
def host(host: str):
    return render_template("host.html", h=api.host_history(host))


@bp.get("/reports/slow-ranks")
def slow_ranks():
    rows = REPORTS["slow-ranks"](lake(), Window(api._date("since"), api._date("until")))
    return render_template("slow_ranks.html", rows=rows, filters=request.args)


@bp.get("/reports/hangs")
def hangs():
    rows = REPORTS["hangs"](lake(), Window(api._date("since"), api._date("until")))
    return render_template("hangs.html", rows=rows, filters=request.args)


@bp.get("/sql")
def sql():
    return render_template("sql.html", examples=api.EXAMPLES, needs_token=bool(config().token))


@bp.get("/upload")
def upload():
    return render_template("upload.html", needs_token=bool(config().token))
