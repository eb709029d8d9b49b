"""Diagnose attempts: name what went wrong and who caused it, root cause
first (see analyze.py), and keep the diagnoses in the catalog."""

from __future__ import annotations

from typing import Iterable

from frlake.catalog.store import Catalog
from frlake.config import Settings
from frlake.diagnose.analyze import diagnose_attempt
from frlake.diagnose.model import ALGORITHM_VERSION, Culprit, Diagnosis, stack_signature, top_frame
from frlake.errors import FrlakeError


def diagnose(settings: Settings, job: str, attempt: int | None = None, *, store: bool = True) -> Diagnosis:
    """Diagnose one attempt of a job (default: its latest attempt) and store it."""
    from frlake.query import connect

    catalog = Catalog(settings.db_url)
    try:
        numbers = [a for _, a in catalog.attempt_keys(job)] if attempt is None else []
        if attempt is None:
            if not numbers:
                raise FrlakeError(f"the lake has no dumps of job {job!r}")
            attempt = max(numbers)
        elif not catalog.has_attempt(job, attempt):
            raise FrlakeError(f"the lake has no dumps of job {job!r} attempt {attempt}")
        revision = catalog.attempt_revision(job, attempt) or 0  # read before the views: never newer than they are
        con = connect(settings.lake, settings.db_url, catalog_views=(), partition=(job, attempt))
        try:
            diag = diagnose_attempt(con, job, attempt)
        finally:
            con.close()
        if store:
            save(catalog, diag, revision)
        return diag
    finally:
        catalog.close()


def diagnose_many(settings: Settings, attempts: Iterable[tuple[str, int]] | None = None) -> list[Diagnosis]:
    """Diagnose and store the given attempts, or every attempt in the lake
    (after the algorithm improved: ``frlake rediagnose``). Each attempt is
    read through views over its own files only."""
    from frlake.query import connect

    catalog = Catalog(settings.db_url)
    try:
        out = []
        for job, attempt in (list(attempts) if attempts is not None else catalog.attempt_keys()):
            revision = catalog.attempt_revision(job, attempt) or 0
            con = connect(settings.lake, settings.db_url, catalog_views=(), partition=(job, attempt))
            try:
                diag = diagnose_attempt(con, job, attempt)
            finally:
                con.close()
            save(catalog, diag, revision)
            out.append(diag)
        return out
    finally:
        catalog.close()


def save(catalog: Catalog, diag: Diagnosis, revision: int = 0) -> None:
    rows = []
    for c in diag.culprits:
        rows.append({
            "rank": c.rank, "host": c.host, "reason": c.reason, "role": c.role, "pg": c.pg, "pg_desc": c.pg_desc,
            "seq": c.seq, "op": c.op, "lateness_ms": c.lateness_ms,
            "stack_signature": stack_signature(c.stack), "top_frame": top_frame(c.stack),
        })
    catalog.save_diagnosis(diag.to_dict(), rows, diag.rank_lateness, revision)


__all__ = ["ALGORITHM_VERSION", "Culprit", "Diagnosis", "diagnose", "diagnose_many", "save"]
