"""Values from the lake and the catalog as plain JSON/CSV scalars."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal


def plain(value: object) -> object:
    """ISO 8601 for times, float for decimals, hex for bytes; anything else unchanged."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    return value
