"""One JSON error shape for every API error:
``{"error": {"status": 404, "code": "not_found", "message": "..."}}``."""

from __future__ import annotations

from flask import Flask, jsonify, render_template, request
from werkzeug.exceptions import HTTPException

from frlake.errors import CatalogError, FrlakeError, QueryError


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_body(status: int, code: str, message: str):
    return jsonify({"error": {"status": status, "code": code, "message": message}}), status


def _wants_json() -> bool:
    return request.path.startswith("/api/")


def register(app: Flask) -> None:
    @app.errorhandler(ApiError)
    def _api_error(exc: ApiError):
        return _render(exc.status, exc.code, exc.message)

    @app.errorhandler(QueryError)
    def _query_error(exc: QueryError):
        return _render(400, "query_refused", str(exc))

    @app.errorhandler(CatalogError)
    def _catalog_error(exc: CatalogError):
        return _render(503, "catalog_unavailable", str(exc))

    @app.errorhandler(FrlakeError)
    def _frlake_error(exc: FrlakeError):
        return _render(400, "bad_request", str(exc))

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException):
        code = (exc.name or "error").lower().replace(" ", "_")
        return _render(exc.code or 500, code, exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        app.logger.exception("unexpected error")
        return _render(500, "internal_error", f"{type(exc).__name__}: the server failed; see its log")


def _render(status: int, code: str, message: str):
    if _wants_json():
        return error_body(status, code, message)
    return render_template("error.html", status=status, code=code, message=message), status
