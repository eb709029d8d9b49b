"""Settings of the web service, as plain values (no module-global app)."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field

from frlake.config import Settings
from frlake.errors import FrlakeError
from frlake.ingest.upload import UploadLimits
from frlake.query import QueryLimits

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class ServerConfig:
    settings: Settings
    token: str | None = None  # required for uploads and SQL when set
    max_upload_bytes: int = 1 << 30
    query_limits: QueryLimits = field(default_factory=lambda: QueryLimits(timeout_s=30.0, max_rows=5_000))
    max_queries: int = 2  # users' SQL queries run at once; the rest wait QUERY_WAIT_S, then 429
    page_size: int = 50
    upload_limits: UploadLimits = UploadLimits()
    # Host names a request may name in its Host header (None: any, for a
    # server bound to every address without --public-host), and the port.
    allowed_hosts: tuple[str, ...] | None = LOOPBACK_NAMES
    port: int | None = None
    watch: object = None  # a frlake.server.watch.WatchConfig: paths ingested on an interval
    notify: object = None  # a frlake.notify.config.NotifyConfig: where alerts on new incidents go


WILDCARD_ADDRESSES = ("", "0.0.0.0", "::", "[::]")


def allowed_hosts(bind: str, public_hosts: Sequence[str] = ()) -> tuple[str, ...] | None:
    """The Host names a server bound to ``bind`` answers to: loopback names,
    the bound address, and ``public_hosts``. A server bound to every address
    (0.0.0.0, ::) without public host names answers to any name: it has a token
    (see check_binding), and whoever can reach it can send any name anyway."""
    names = [n.strip().lower().rstrip(".") for n in public_hosts if n.strip()]
    if bind in WILDCARD_ADDRESSES:
        return tuple(dict.fromkeys(LOOPBACK_NAMES + tuple(names))) if names else None
    address = f"[{bind}]" if ":" in bind and not bind.startswith("[") else bind
    return tuple(dict.fromkeys(LOOPBACK_NAMES + (address.lower(),) + tuple(names)))


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuse to serve uploads and SQL to a network without a token."""
    if not is_loopback(host) and not token:
        raise FrlakeError(
            f"refusing to listen on {host} without a token: anyone who can reach it could upload dumps and run SQL; "
            "give --token (or FRLAKE_TOKEN), or bind to 127.0.0.1"
        )
