"""Who may talk to the server: the Host check (against DNS rebinding) and the
same-origin check (against cross-site requests), run before every request.

* Every request must name the server in its ``Host`` header: a loopback name
  (``127.0.0.1``, ``localhost``, ``[::1]``), the address it is bound to, or a
  name given with ``frlake serve --public-host``; on the server's port. Anything
  else is a 421: a page on another site whose name was rebound to 127.0.0.1
  sends its own name.
* A request that changes state (any method but GET, HEAD and OPTIONS) needs,
  when the server has a token, that token (``Authorization: Bearer``), which a
  page on another site cannot send; and without a token, an ``Origin`` (or,
  failing that, a ``Referer``) naming this server, which every browser sends
  with a POST and no page can forge, or an ``Authorization: Bearer`` header.
  Anything else is a 401 or a 403.

A request with ``Authorization: Bearer`` needs no Origin from any client
(curl, a script, another site's server): a browser sends that header only when
a page sets it, and a page on another site can set it only after a CORS
preflight, which this server never grants (it answers no ``Access-Control-*``
header). So the header itself shows that no browser was tricked into sending
the request. Forms and the browser's own requests carry no such header and
keep the Origin check.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from flask import Flask, request

from frlake.server.config import ServerConfig
from frlake.server.errors import ApiError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_host(value: str) -> tuple[str, int | None] | None:
    """``"[::1]:8750"`` -> ``("[::1]", 8750)``; None if it is not a host[:port]."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[: end + 1], value[end + 1 :]
    else:
        name, _, port_text = value.partition(":")
        rest = ":" + port_text if _ else ""
    if not name:
        return None
    if not rest:
        return name.rstrip("."), None
    if not rest.startswith(":") or not rest[1:].isdigit():
        return None
    return name.rstrip("."), int(rest[1:])


def host_allowed(config: ServerConfig, host_header: str) -> bool:
    if config.allowed_hosts is None:
        return True
    parsed = split_host(host_header)
    if parsed is None:
        return False
    name, port = parsed
    if name not in config.allowed_hosts:
        return False
    return config.port is None or port is None or port == config.port


def has_token(config: ServerConfig) -> bool:
    given = request.headers.get("Authorization", "")
    return bool(config.token) and given.startswith("Bearer ") and hmac.compare_digest(
        given[7:].encode(), config.token.encode())


def has_bearer() -> bool:
    """The request carries ``Authorization: Bearer ...``: set by a program, or by a page of this server."""
    return request.headers.get("Authorization", "").startswith("Bearer ")


def _endpoint(netloc: str, scheme: str) -> tuple[str, int | None] | None:
    parsed = split_host(netloc.rpartition("@")[2])
    return None if parsed is None else (parsed[0], parsed[1] or _DEFAULT_PORTS.get(scheme))


def same_origin() -> bool:
    """The request's Origin (or, without one, its Referer) names the host it was sent to."""
    origin = request.headers.get("Origin")
    if origin is None:
        origin = request.headers.get("Referer")
    if not origin or origin == "null":
        return False
    url = urlsplit(origin)
    if url.scheme not in _DEFAULT_PORTS:
        return False
    theirs = _endpoint(url.netloc, url.scheme)
    return theirs is not None and theirs == _endpoint(request.host, request.scheme)


def check_sql_read(config: ServerConfig) -> None:
    """Users' SQL run by a GET (``/sql?sql=...&_format=csv``): with a token, the token, as for
    ``POST /api/query``; without one, not from another site's page that embeds or fetches it (an image,
    a frame, a script: each could hold a thread and the sandbox's memory for the time limit). A click on
    a shared link is a top-level navigation and runs it; the Fetch metadata headers tell them apart."""
    if config.token:
        if not has_token(config):
            raise ApiError(401, "unauthorized", "this needs 'Authorization: Bearer <token>' with the server's token "
                                                "(the SQL page's own links send it)")
        return
    elsewhere = request.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site")
    opened = request.headers.get("Sec-Fetch-Mode") == "navigate" and request.headers.get("Sec-Fetch-Dest") == "document"
    if elsewhere and not opened and not has_bearer():
        raise ApiError(403, "cross_origin", "a page of another site cannot run SQL on this server; open the link "
                                            "itself, or send 'Authorization: Bearer' from a script")


def register(app: Flask) -> None:
    @app.before_request
    def _check_request():
        config: ServerConfig = app.config["FRLAKE"]
        if not host_allowed(config, request.host):
            raise ApiError(421, "misdirected_request",
                           f"this server does not answer to the host name {request.host[:100]!r}; use "
                           f"{', '.join(config.allowed_hosts or ())} (or start it with --public-host NAME)")
        if request.method in SAFE_METHODS or request.routing_exception is not None:
            return  # reads, and requests for no route (404, 405), change nothing
        if config.token:
            if not has_token(config):
                raise ApiError(401, "unauthorized", "this needs 'Authorization: Bearer <token>' with the server's token")
            return
        if not (has_bearer() or same_origin()):  # without a token there is no value to check: the header suffices
            raise ApiError(403, "cross_origin",
                           "this server has no token, so a request that changes the lake must come from its own "
                           "pages: its Origin (or Referer) must name this server. A script sends "
                           f"'Origin: {request.scheme}://{request.host}' or any 'Authorization: Bearer' header, "
                           "or the server is started with --token")
