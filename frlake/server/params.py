"""Reading a request's parameters, shared by the pages and the API: each
wrong value is a 400 (or 404) with a message that says what is expected, and
a parameter the route does not take is a 400 that names the ones it does
(``takes``), never silently ignored."""

from __future__ import annotations

import difflib
import heapq
from datetime import date, datetime
from typing import TYPE_CHECKING
from urllib.parse import urlencode

from flask import Flask, request, url_for

from frlake.entities import REASONS, VERDICTS, Diagnosis
from frlake.query.window import WHEN_HINT, Window, parse_when
from frlake.server.context import config, memoized, session, views
from frlake.server.errors import ApiError

if TYPE_CHECKING:
    from frlake.diagnose.standing import StackGroup
    from frlake.query.attempt import Arrivals, GroupProgress
    from frlake.query.causes import Cause
    from frlake.query.side_by_side import SideBySide


EXPORT = ("_format", "_table")  # every page's CSV and JSON exports (tables.py)
JOBS = ("q", "job", "host", "verdict", "reason", "since", "until", "page", "per_page")  # the jobs list's


def takes(*names: str, by=None):
    """The query parameters a view reads (``by``: a function of the route's variables that gives them,
    for a route whose pages differ): a request with any other is a 400 (``check_known``)."""
    def mark(view):
        view.query_params = by or frozenset(names)
        return view
    return mark


def check_known(allowed: frozenset[str] | set[str], what: str | None = None) -> None:
    """A 400 for a query parameter not in ``allowed``: a mistyped filter (``?hots=b03``) would
    otherwise show everything as if it had matched. Its message and error page name the ones taken."""
    unknown = sorted(set(request.args) - set(allowed))
    if not unknown:
        return
    kept = [(k, v) for k, v in request.args.items(multi=True) if k in allowed]
    what = what or request.path
    raise ApiError(400, "unknown_parameter",
                   f"{what} takes no parameter {', '.join(repr(u) for u in unknown)}; it takes "
                   + (", ".join(sorted(allowed)) if allowed else "none"),
                   see=[(f"{request.path} without {', '.join(unknown)}",
                         request.path + ("?" + urlencode(kept) if kept else ""))])


def register(app: Flask) -> None:
    @app.before_request
    def _known_parameters():
        if request.routing_exception is not None:
            return  # a 404 or 405 says so itself
        allowed = getattr(app.view_functions.get(request.endpoint), "query_params", None)
        if callable(allowed):
            allowed = allowed(**(request.view_args or {}))
        if allowed is not None:  # every page and API route says what it takes (the static files do not)
            check_known(allowed)


def when_arg(name: str) -> date | datetime | None:
    text = request.args.get(name)
    if not text:
        return None
    try:
        return parse_when(text)
    except ValueError:
        raise ApiError(400, "bad_request", f"'{name}' must be {WHEN_HINT}, not {text!r}") from None


def int_arg(name: str, default: int, lo: int = 0, hi: int = 10**9) -> int:
    text = request.args.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(400, "bad_request", f"'{name}' must be a whole number") from None
    if not lo <= value <= hi:
        raise ApiError(400, "bad_request", f"'{name}' must be between {lo} and {hi}")
    return value


def choice_arg(name: str, choices: tuple[str, ...]) -> str | None:
    """One of ``choices``, or None when absent; anything else is a 400."""
    text = request.args.get(name)
    if not text:
        return None
    if text not in choices:
        raise ApiError(400, "bad_request", f"'{name}' must be one of {', '.join(choices)}, not {text!r}")
    return text


def window() -> Window:
    return Window(when_arg("since"), when_arg("until"))


def host_arg() -> str | None:
    """A part of a host's name (any case)."""
    return (request.args.get("host") or "").strip() or None


def list_attempts_args() -> dict:
    """The jobs list's filters and page, as ``catalog.attempts.page`` takes them: ``q`` searches (a part of
    a job's or a host's name, any case, or a verdict), ``job`` is one job exactly."""
    since_ns, until_ns = window().bounds_ns()
    per_page = int_arg("per_page", config().page_size, 1, 500)
    page = int_arg("page", 1, 1)
    return {"q": (request.args.get("q") or "").strip() or None, "job": request.args.get("job") or None,
            "host": host_arg(), "verdict": choice_arg("verdict", VERDICTS), "reason": choice_arg("reason", REASONS),
            "since_ns": since_ns, "until_ns": until_ns, "offset": (page - 1) * per_page, "limit": per_page,
            "page": page, "per_page": per_page}


def similar(word: str, known: list[str], n: int = 8) -> list[str]:
    """The ``n`` known names nearest a mistyped one, nearest first: those that hold it (or that it holds),
    any case, then by difflib's likeness; never merely the first ones. The likeness is computed for the 64
    names its quick bound ranks highest, so a lake of 100,000 jobs answers a 404 at once."""
    w = word.lower()

    def held(k: str) -> bool:
        return w in k.lower() or k.lower() in w

    matcher = difflib.SequenceMatcher(None, b=w)
    bound = []
    for k in known:
        matcher.set_seq1(k.lower())
        bound.append((not held(k), -matcher.quick_ratio(), k))
    scored = []
    for _, _, k in heapq.nsmallest(max(64, n), bound):
        matcher.set_seq1(k.lower())
        scored.append((not held(k), -matcher.ratio(), k))
    return [k for _, _, k in sorted(scored)[:n]]


def known_job(job: str) -> list[int]:
    """The job's attempt numbers; a 404 that names jobs there are if it has none."""
    numbers = [a for _, a in session().attempt_keys(job)]
    if not numbers:
        jobs = sorted({j for j, _ in session().attempt_keys()})
        near = similar(job, jobs)
        raise ApiError(404, "not_found", f"no job {job!r} in the lake"
                       + (f"; the {len(near)} nearest of its {len(jobs):,} job(s) are below" if jobs
                          else "; the lake is empty"),
                       see=[(j, url_for("ui.job", job=j)) for j in near]
                       + ([(f"search the jobs for {job!r}", url_for("ui.jobs", q=job))] if len(jobs) > len(near) else []))
    return numbers


def known_attempt(job: str, attempt: int) -> None:
    if not memoized("has_attempt", (job, attempt), lambda: session().has_attempt(job, attempt)):
        numbers = known_job(job)
        raise ApiError(404, "not_found", f"no attempt {attempt} of job {job!r} in the lake; it has attempt(s) "
                       + ", ".join(map(str, numbers)),
                       see=[(f"{job} attempt {n}", url_for("ui.attempt", job=job, attempt=n)) for n in numbers[:20]])


def diagnosis(job: str, attempt: int) -> Diagnosis:
    """The stored diagnosis, or one computed now and not stored: a GET never writes."""
    known_attempt(job, attempt)
    return memoized("diagnosis", (job, attempt), lambda: session().stored_diagnosis(job, attempt))


def cause(job: str, attempt: int) -> Cause | None:
    """Host or code? The attempt's call, a judgement from history (frlake.query.causes); None when healthy."""
    known_attempt(job, attempt)
    return memoized("cause", (job, attempt), lambda: session().cause(job, attempt, con=views()))


def progress(job: str, attempt: int, pgs: list[str] | None = None) -> tuple[GroupProgress, ...]:
    """Per group and rank, the last sequence ids."""
    return memoized("progress", (job, attempt, None if pgs is None else tuple(pgs)),
                    lambda: session().progress(job, attempt, pgs, con=views()))


def entry_filter():
    """?ranks=0,1,8-15&pg=dp&pg=0&seq=A:B as an EntryFilter."""
    from frlake.query.side_by_side import EntryFilter

    ranks = rank_list()
    try:
        lo_seq, hi_seq = EntryFilter.parse_seq(request.args.get("seq"))
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    return EntryFilter(ranks=ranks, pgs=pg_list(), seq_from=lo_seq, seq_to=hi_seq)


def entries_view(job: str, attempt: int) -> tuple[SideBySide, tuple[StackGroup, ...]]:
    """The side-by-side view for the request's filter and where each rank stands.
    Where the ranks stand reads the whole attempt (most of the cost on a large one): once per catalog version."""
    flt = entry_filter()
    view = memoized("entries", (job, attempt, flt), lambda: session().entries(job, attempt, flt))
    return view, memoized("stack_diff", (job, attempt), lambda: session().stack_diff(job, attempt))


def pg_list() -> tuple[str, ...] | None:
    """?pg=dp&pg=0 as group names (None when absent)."""
    return tuple(p for p in request.args.getlist("pg") if p) or None


def rank_list(name: str = "ranks") -> tuple[int, ...] | None:
    """?ranks=0,1,8-15 as sorted ranks (None when absent)."""
    ranks: list[int] = []
    text = request.args.get(name) or ""
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not (lo.isdigit() and (not sep or hi.isdigit())) or (sep and int(hi) - int(lo) > 1 << 20):
            raise ApiError(400, "bad_request", f"'{name}' is like 0,1,8-15, not {text!r}")
        ranks.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return tuple(sorted(set(ranks))) or None


def arrivals_view(job: str, attempt: int, diag: Diagnosis | None = None) -> Arrivals:
    """The arrivals of one group: ?pg=NAME, ?last=N, ?max_ranks=N, and ?seq=A:B or ?around=N."""
    from frlake.query.attempt import ArrivalsWindow
    from frlake.query.side_by_side import EntryFilter

    try:
        seq = EntryFilter.parse_seq(request.args.get("seq"))
    except ValueError as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    around = request.args.get("around")
    if around and (seq[0] is not None or seq[1] is not None):
        raise ApiError(400, "bad_request", "give 'seq' or 'around', not both")
    window = ArrivalsWindow(request.args.get("pg") or None, int_arg("last", 40, 1, 500),
                            int_arg("max_ranks", 256, 1, 2048), seq[0], seq[1],
                            int_arg("around", 0, 0, 2**62) if around else None)
    # centred on the stored diagnosis, which is the same at one catalog version
    return memoized("arrivals", (job, attempt, window),
                    lambda: session().arrivals(job, attempt, window, diagnosis=diag, con=views()))


def trace_window():
    """?ranks=0,1,8-15&pg=dp&around=N&max_events=N as a TraceWindow."""
    from frlake.query.trace import DEFAULT_MAX_EVENTS, TraceWindow

    around = request.args.get("around")
    return TraceWindow(ranks=rank_list(), pgs=pg_list(),
                       around=int_arg("around", 0, 0, 10**6) if around else None,
                       max_events=int_arg("max_events", DEFAULT_MAX_EVENTS, 1, 2_000_000))
