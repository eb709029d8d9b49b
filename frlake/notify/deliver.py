"""One delivery: a POST of the message's JSON with a timeout, signed when a secret is set (as GitHub signs
its webhooks): ``X-Frlake-Signature: sha256=<hex HMAC-SHA256 of the raw body>``; ``X-Frlake-Delivery`` is the
message's id, the same on every retry, so a receiver can drop a message it already has."""

from __future__ import annotations

import hashlib
import hmac
import urllib.error
import urllib.request

from frlake.version import __version__

SIGNATURE = "X-Frlake-Signature"
DELIVERY = "X-Frlake-Delivery"


class DeliveryFailed(Exception):
    """The receiver did not take the message: why, in words (shown on the jobs page and at /api/notify)."""


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post(url: str, body: bytes, delivery: str, *, secret: str | None = None, timeout_s: float = 10.0) -> int:
    """POST ``body``; the status of a 2xx answer, else DeliveryFailed."""
    headers = {"Content-Type": "application/json", "User-Agent": f"frlake/{__version__}", DELIVERY: delivery}
    if secret:
        headers[SIGNATURE] = signature(secret, body)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - http(s) only (config)
            answer.read(65536)
            return answer.status
    except urllib.error.HTTPError as exc:
        raise DeliveryFailed(f"HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            raise DeliveryFailed(f"no answer within {timeout_s:g} s") from None
        raise DeliveryFailed(f"cannot reach the receiver: {reason}") from None
    except TimeoutError:
        raise DeliveryFailed(f"no answer within {timeout_s:g} s") from None
    except OSError as exc:
        raise DeliveryFailed(f"cannot reach the receiver: {exc}") from None
