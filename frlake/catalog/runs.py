"""The catalog's runs (``ingest_runs``): every ingest, forget, compaction and diagnosis that writes, begun,
then finished or failed. A run's id names its staging folder and the Parquet files it writes."""

from __future__ import annotations

from sqlalchemy import update

from frlake.catalog.db import Store, utcnow
from frlake.catalog.models import IngestRun


class Runs(Store):
    """``catalog.runs``."""

    def begin(self, sources: str, options: str, kind: str = "ingest") -> int:
        with self.session(write=True) as s:
            run = IngestRun(
                started_at=utcnow(), status="running", sources=sources, options=options, kind=kind,
                n_ingested=0, n_duplicate=0, n_rejected=0, n_unchanged=0,
            )
            s.add(run)
            s.flush()
            return run.id

    def finish(self, run_id: int, status: str, counts: dict[str, int]) -> None:
        with self.session(write=True) as s:
            s.execute(
                update(IngestRun)
                .where(IngestRun.id == run_id)
                .values(finished_at=utcnow(), status=status, **{f"n_{k}": v for k, v in counts.items()})
            )
