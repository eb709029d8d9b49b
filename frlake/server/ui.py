"""Server-rendered pages; each has its JSON twin under /api/, and each table
its CSV and JSON export (tables.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from flask import Blueprint, current_app, redirect, render_template, request, url_for

from frlake.entities import REASONS, VERDICTS, Kind
from frlake.query.attempt import Arrivals
from frlake.query.history import iso_ns
from frlake.query.reports import REPORTS
from frlake.query.side_by_side import state_legend
from frlake.server.api import EXAMPLES, known_host, notify_state, run_query
from frlake.server.context import attempt_facets, config, session, views
from frlake.server.errors import ApiError
from frlake.server.params import (
    EXPORT,
    JOBS,
    arrivals_view,
    cause,
    choice_arg,
    diagnosis,
    entries_view,
    host_arg,
    int_arg,
    known_attempt,
    known_job,
    list_attempts_args,
    progress,
    takes,
    window,
)
from frlake.server.security import check_sql_read
from frlake.server.tables import Export, check_format, export_url, exported, respond

bp = Blueprint("ui", __name__)
PROGRESS_GROUPS = 32  # groups whose per-rank progress the attempt page details


@bp.app_context_processor
def _registries() -> dict:
    return {"reports": REPORTS, "verdicts": VERDICTS, "reasons": REASONS, "export_url": export_url,
            "kind_labels": {k.value: k.label for k in Kind}}


def _root(a) -> str | None:
    return None if a.root_rank is None else f"rank {a.root_rank} on {a.root_host or 'an unknown host'} ({a.root_reason})"


@bp.get("/")
@takes(*JOBS, *EXPORT)
def jobs():
    args = list_attempts_args()
    page, per_page = args.pop("page"), args.pop("per_page")
    total, rows = session().list_attempts(**args)
    facets = attempt_facets(**{k: v for k, v in args.items() if k not in ("offset", "limit")})
    table = Export("jobs", ["job", "attempt", "verdict", "root_cause", "hosts", "dumps", "started_at"],
                   [[a.job, a.attempt, a.verdict, _root(a), " ".join(a.hosts), a.n_dumps, iso_ns(a.started_ns)]
                    for a in rows])
    watcher = current_app.extensions.get("frlake_watch")
    # the verdicts most severe first (Verdict's order of precedence), in the facets and the summary line
    severity = {v: i for i, v in enumerate(VERDICTS)}
    by_verdict = sorted(facets.verdict, key=lambda pair: (severity.get(pair[0], len(severity)), pair[0] or ""))
    facets = replace(facets, verdict=tuple(by_verdict))
    return respond("jobs.html", [table], rows=rows, total=total, page=page, per_page=per_page,
                   pages=max(1, -(-total // per_page)), filters=request.args, facets=facets, by_verdict=by_verdict,
                   severity=severity, watch=watcher.status() if watcher else None, notify=notify_state())


@bp.get("/jobs/<path:job>/attempts/<int:attempt>")
@takes("pg", "seq", "around", "last", "max_ranks", *EXPORT)
def attempt(job: str, attempt: int):
    diag = diagnosis(job, attempt)
    d = diag.to_dict()
    exporting = bool(request.args.get("_format"))
    every_group = d["groups"]
    # thousands of groups at 16,384 ranks: the page lists the culprits' groups first, then those behind
    d["groups_total"], d["groups"] = len(every_group), _page_groups(every_group, d["culprits"])
    shown = None if exporting else [g["pg"] for g in d["groups"][:PROGRESS_GROUPS]]  # an export has every group
    groups = progress(job, attempt, shown)
    if shown is not None:  # in the page's order: the culprits' groups first
        order = {pg: i for i, pg in enumerate(shown)}
        groups = sorted(groups, key=lambda g: order.get(g.pg, len(order)))
    tables = [
        Export("culprits", ["position", "rank", "host", "reason", "role", "pg", "pg_desc", "seq", "op", "waiters",
                            "waiting_for", "waited_by"],
               [[i, c["rank"], c.get("host"), c["reason"], c.get("role"), c.get("pg"), c.get("pg_desc"), c.get("seq"),
                 c.get("op"), c.get("waiters"), c.get("waiting_for"), c.get("waited_by")]
                for i, c in enumerate(d["culprits"])]),
        Export("groups", ["pg", "pg_desc", "members", "frontier", "behind"],
               [[g["pg"], g["pg_desc"], len(g["ranks"]), g["frontier"], g["behind"]] for g in every_group]),
        Export("progress", ["pg", "pg_desc", "rank", "host", "last_enqueued", "last_started", "last_completed"],
               [[g.pg, g.pg_desc, r.rank, r.host, r.last_enqueued, r.last_started, r.last_completed]
                for g in groups for r in g.ranks]),
    ]
    return respond("attempt.html", tables, job=job, attempt=attempt, d=d, progress=groups,
                   cause=cause(job, attempt), arrivals=None if exporting else _arrivals(job, attempt, diag),
                   timeline=session().timeline(job, attempt),
                   view_args=_view_args(),
                   needs_token=bool(config().token))


def _page_groups(groups: list[dict], culprits: Sequence[dict], limit: int = 200) -> list[dict]:
    """The groups a page lists when there are thousands (16,384 ranks make
    ~10,000): the culprits' groups, then those with ranks behind, then the
    largest; at most ``limit``."""
    first = {c.get("pg"): i for i, c in enumerate(culprits) if c.get("pg") is not None}
    ranked = sorted(groups, key=lambda g: (first.get(g["pg"], len(first)), not g.get("behind"),
                                           -len(g.get("ranks") or ()), g["pg"]))
    return ranked[:limit]


def _arrivals(job: str, attempt: int, diag) -> Arrivals:
    """The arrivals the page embeds (?pg=, ?seq=A:B, ?around=N, ?last=N); a
    group the attempt lacks, or a window that is not one (``abc``, ``9:1``),
    shows the default window and says why beside the form: the incident
    page stays."""
    from frlake.query.attempt import UnknownGroup

    try:
        return arrivals_view(job, attempt, diag)
    except (UnknownGroup, ApiError) as exc:
        if isinstance(exc, ApiError) and exc.status != 400:
            raise
        why = exc.message if isinstance(exc, ApiError) else str(exc)
        return replace(session().arrivals(job, attempt, diagnosis=diag, con=views()),
                       error=f"{why}; the chart shows the default window")


def _view_args() -> dict:
    """The arrivals' own query arguments, for the chart's later requests."""
    return {k: v for k, v in request.args.items() if k in ("pg", "seq", "around", "last", "max_ranks") and v}


@bp.get("/jobs/<path:job>")
@takes(*EXPORT)
def job(job: str):

    known_job(job)
    h = session().job_history(job, views())
    tables = [
        Export("attempts", ["attempt", "verdict", "root_rank", "root_host", "root_reason", "started_at", "ended_at",
                            "n_dumps", "summary"],
               [[a.attempt, a.verdict, a.root and a.root.rank, a.root and a.root.host, a.root and a.root.reason,
                 a.started_at, a.ended_at, a.n_dumps, a.summary] for a in h.attempts]),
        Export("recurring", ["kind", "value", "as_root_cause", "attempts"],
               [[r.kind, r.value, r.as_root_cause, r.attempts] for r in h.recurring]),
    ]
    return respond("job.html", tables, h=h)


def _with_host(rows: list[dict], part: str | None) -> list[dict]:
    """The rows naming a host that contains ``part`` (any case), as on the jobs list."""
    if not part:
        return rows
    part = part.lower()
    return [r for r in rows
            if any(part in (h or "").lower() for h in (r.get("hosts") or [r.get("host", r.get("culprit_host"))]))]


@bp.get("/jobs/<path:job>/attempts/<int:attempt>/entries")
@takes("ranks", "pg", "seq", *EXPORT)
def attempt_entries(job: str, attempt: int):
    known_attempt(job, attempt)
    view, stacks = entries_view(job, attempt)
    ranks = [r.rank for r in view.ranks]
    tables = [
        Export("stack-diff", ["ranks", "hosts", "op", "pg", "pg_desc", "top_frame", "odd_one_out"],
               [[g.ranks, g.hosts, g.op, g.pg, g.pg_desc, g.top_frame, g.odd_one_out] for g in stacks]),
        Export("entries", ["pg", "pg_desc", "seq", "part", "op", "agree", "missing", *[f"r{r}" for r in ranks]],
               [[c.pg, c.pg_desc, c.seq, c.part, c.op, c.agree, c.missing, *[c.cells.get(r) for r in ranks]]
                for c in view.collectives]),
    ]
    return respond("entries.html", tables, job=job, attempt=attempt, v=view, stacks=stacks, filters=request.args,
                   rank_headers=[f"r{r}" for r in ranks], legend=state_legend(view))


REPORT_FILTERS = {"hangs": ("reason", "op"), "drain": ("explain",)}  # beside host, since and until


def _report_params(name: str) -> frozenset[str]:
    return frozenset(("host", "since", "until", *REPORT_FILTERS.get(name, ()), *EXPORT))


@bp.get("/reports/<name>")
@takes(by=_report_params)
def report(name: str):
    spec = REPORTS.get(name)
    if spec is None:
        raise ApiError(404, "not_found", f"no report {name!r}; there are {', '.join(REPORTS)}",
                       see=[(r.title, f"/reports/{r.name}") for r in REPORTS.values()])
    all_rows = session().report(name, window(), con=views())
    rows = _with_host(all_rows, host_arg())
    columns = list(all_rows.columns)
    facets, explained = {}, None
    if name == "hangs":
        reason, op = choice_arg("reason", REASONS), request.args.get("op") or None
        rows = [r for r in rows if (reason is None or r["reason"] == reason) and (op is None or r["op"] == op)]
        facets = _facets(rows, ("reason", "op", "hosts"))
    if name == "drain" and request.args.get("explain"):
        explained = _drain_explained(all_rows, request.args["explain"])
    table_id = spec.page.removesuffix(".html").replace("_", "-")  # the page's table: hosts, slow-ranks, hangs
    return respond(spec.page, [Export(table_id, columns, [[r.get(c) for c in columns] for r in rows])],
                   rows=rows, filters=request.args, report=spec, facets=facets, explained=explained,
                   coverage=all_rows.coverage_words() if hasattr(all_rows, "coverage_words") else None)


def _drain_explained(rows, host: str) -> dict:
    """The evidence behind one host of the drain list and the arithmetic (``frlake report drain --explain``)."""
    from frlake.query.drain import DrainPolicy, explain

    row = next((r for r in rows if r["host"] == host), None)
    return {"host": host, "row": row,
            "text": explain(row, DrainPolicy()) if row else f"{host}: no evidence against it in this window "
                                                            "(it is not on the drain list)"}


def _facets(rows: list[dict], keys: tuple[str, ...]) -> dict[str, list[tuple[str, int]]]:
    """Counts of each value among the rows (a list column counts each of its values)."""
    out = {}
    for key in keys:
        counts: dict[str, int] = {}
        for r in rows:
            values = r.get(key)
            for v in values if isinstance(values, list) else [values]:
                if v is not None:
                    counts[v] = counts.get(v, 0) + r.get("attempts", 1)
        out[key.removesuffix("s") if key == "hosts" else key] = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return out


@bp.get("/hosts")
@takes("host", "since", "until", *EXPORT)
def hosts():
    return report("flaky-hosts")


@bp.get("/hosts/<host>")
@takes(*EXPORT)
def host(host: str):
    h = known_host(host)
    named = ("job", "attempt", "position", "rank", "reason", "role", "pg_desc", "seq", "op", "started_at")
    health = ("job", "attempt", "rank", "check_name", "status", "healthy", "output", "snapshot_at")
    tables = [
        Export("culprit-of", list(named), [[getattr(c, k) for k in named] for c in h.culprit_of]),
        Export("health", list(health), [[getattr(c, k) for k in health] for c in h.health]),
        Export("history", ["job", "attempt", "verdict", "root_rank", "root_host", "root_reason", "started_at"],
               [[a.job, a.attempt, a.verdict, a.root and a.root.rank, a.root and a.root.host, a.root and a.root.reason,
                 a.started_at] for a in h.attempts]),
        Export("weeks", ["week", "attempts", "root_cause", "involved"],
               [[w.week, w.attempts, w.root_cause, w.involved] for w in h.weeks]),
    ]
    drain = None
    if not request.args.get("_format"):  # the host's line of the drain list, as the drain page has it now
        drain = next((r for r in session().report("drain", con=views()) if r["host"] == h.host), None)
    return respond("host.html", tables, h=h, drain=drain)


@bp.get("/sql")
@takes("sql", "_next", "_format")
def sql():
    """The SQL console; with ``_format``, the query's result itself (datasette's ``.csv?sql=``), from row
    ``_next`` on: a link to share, a URL for curl."""
    from frlake.server.schema_browser import schema_browser

    text, offset = request.args.get("sql", ""), int_arg("_next", 0, 0, 2**62)
    fmt = request.args.get("_format")
    if fmt:
        return _query_export(text, offset, fmt)
    return render_template("sql.html", examples=EXAMPLES, needs_token=bool(config().token), query=text,
                           offset=offset, schema=schema_browser(views()))


def _query_export(text: str, offset: int, fmt: str):
    check_format(fmt)
    if not text.strip():
        raise ApiError(400, "bad_request", "give the query: /sql?sql=SELECT+...&_format=" + fmt)
    check_sql_read(config())  # the token, as POST /api/query needs it: in a header, never in the address
    result = run_query(text, offset)
    headers = {}
    if result["next"] is not None:  # RFC 8288, as GitHub pages its API
        headers["Link"] = f'<{url_for("ui.sql", sql=text, _format=fmt, _next=result["next"])}>; rel="next"'
    return exported(Export("sql-result", result["columns"], result["rows"]), fmt, headers,
                    truncated=result["truncated"], next=result["next"])


@bp.get("/upload")
@takes()
def upload():
    return render_template("upload.html", needs_token=bool(config().token))


@bp.get("/favicon.ico")
@takes()
def favicon():
    """Where a browser or a tool asks for the icon without reading the page's <link rel="icon">."""
    return redirect(url_for("static", filename="favicon.svg"), 301)
