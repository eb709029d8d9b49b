"""The migrations shipped with this frlake, one file each, named by their revision
("0013_files_by_attempt.py"): read from the folder, so that neither Alembic nor SQLAlchemy is imported
to ask which revision is the newest."""

from __future__ import annotations

from pathlib import Path

VERSIONS = Path(__file__).resolve().parent.parent / "migrations" / "versions"


def migration_files() -> dict[str, Path]:
    return {p.name[:4]: p for p in VERSIONS.glob("[0-9][0-9][0-9][0-9]_*.py")}


def head_revision() -> str:
    """The newest migration shipped with this frlake: its highest-numbered file (Alembic itself is only
    imported when a migration runs: every command checks the revision)."""
    return max(migration_files())
