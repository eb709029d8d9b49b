"""One JSON error shape for every API error:
``{"error": {"status": 404, "code": "not_found", "message": "..."}}``; pages
get the same status with an error page that links back and says what exists."""

from __future__ import annotations

from flask import Flask, jsonify, render_template, request
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from frlake.errors import CatalogError, FrlakeError, QueryError


class ApiError(Exception):
    """An error answer. ``see``: (label, url) pairs an error page offers
    instead (the jobs or attempts that do exist)."""

    def __init__(self, status: int, code: str, message: str, *, see: list[tuple[str, str]] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.see = see or []
        self.headers = headers or {}


def error_body(status: int, code: str, message: str):
    return jsonify({"error": {"status": status, "code": code, "message": message}}), status


def _wants_json() -> bool:
    return request.path.startswith("/api/") or request.args.get("_format") in ("json", "csv")


def register(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return _render(exc.status, exc.code, exc.message, exc.see, exc.headers)

    @app.errorhandler(QueryError)
    def _query_error(exc: QueryError):
        return _render(exc.status, exc.code, str(exc))

    @app.errorhandler(CatalogError)
    def _catalog_error(exc: CatalogError):
        return _render(503, "catalog_unavailable", str(exc))

    @app.errorhandler(FrlakeError)
    def _frlake_error(exc: FrlakeError):
        return _render(400, "bad_request", str(exc))

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        code = (exc.name or "error").lower().replace(" ", "_")
        headers = {}
        if isinstance(exc, MethodNotAllowed) and exc.valid_methods:
            headers["Allow"] = ", ".join(sorted(exc.valid_methods))
        return _render(exc.code or 500, code, exc.description or exc.name, None, headers)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        app.logger.exception("unexpected error")
        return _render(500, "internal_error", f"{type(exc).__name__}: the server failed; see its log")


def _render(status: int, code: str, message: str, see: list[tuple[str, str]] | None = None,
            headers: dict[str, str] | None = None):
    if _wants_json():
        body, status = error_body(status, code, message)
    else:
        body = render_template("error.html", status=status, code=code, message=message, see=see or [],
                               back=request.referrer if _same_site(request.referrer) else None)
    return body, status, headers or {}


def _same_site(url: str | None) -> bool:
    return bool(url) and url.startswith(request.host_url)
