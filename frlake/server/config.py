"""Settings of the web service, as plain values (no module-global app)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from frlake.config import Settings
from frlake.errors import FrlakeError
from frlake.ingest.upload import UploadLimits
from frlake.query import QueryLimits


@dataclass(frozen=True)
class ServerConfig:
    settings: Settings
    token: str | None = None  # required for uploads and SQL when set
    max_upload_bytes: int = 1 << 30
    query_limits: QueryLimits = field(default_factory=lambda: QueryLimits(timeout_s=30.0, max_rows=5_000))
    page_size: int = 50
    upload_limits: UploadLimits = UploadLimits()


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
