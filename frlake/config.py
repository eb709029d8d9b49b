"""Where the lake and the catalog live."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_LAKE = "frlake-lake"
CATALOG_FILE = "catalog.db"


@dataclass(frozen=True)
class Settings:
    """The two settings every command shares: the lake folder and the catalog URL."""

    lake: Path
    db_url: str

    @classmethod
    def resolve(cls, lake: str | os.PathLike | None = None, db_url: str | None = None) -> Settings:
        """Explicit values win, then FRLAKE_LAKE / FRLAKE_DB_URL, then the defaults
        (``./frlake-lake`` and a SQLite file inside it)."""
        lake_path = Path(lake or os.environ.get("FRLAKE_LAKE") or DEFAULT_LAKE).expanduser().resolve()
        url = db_url or os.environ.get("FRLAKE_DB_URL") or f"sqlite:///{lake_path / CATALOG_FILE}"
        return cls(lake=lake_path, db_url=url)
