"""Small attempts diagnosed in batches, on one connection and stored together (``Frlake._diagnose_all``,
frlake.query.batch), get the diagnoses they get one at a time: byte for byte (their JSON without
``seconds``), with the same summary tables, for every attempt of the corpus and of every fixture."""

from __future__ import annotations

import json

import pytest

from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.schema import SUMMARY_TABLES
from frlake.session import BATCH_DUMPS, Frlake
from tests.helpers import CORPUS, FIXTURES


def _stored(fl: Frlake) -> dict:
    """Every stored diagnosis as JSON (without ``seconds``), and every summary table's rows."""
    out = {}
    for job, attempt in fl.attempt_keys():
        data = fl.catalog.diagnoses.get(job, attempt).to_dict()
        data.pop("seconds")
        out[f"{job}/{attempt}"] = json.dumps(data, sort_keys=True)
    con = fl.connect(catalog_views=("incidents", "culprits", "rank_stats"))
    for table in SUMMARY_TABLES:
        out[table] = sorted(map(repr, con.execute(f"SELECT * FROM {table}").fetchall()))
    for view in ("incidents", "culprits", "rank_stats"):  # the catalog's rows of them (catalog.diagnoses)
        out[view] = sorted(map(repr, con.execute(f"SELECT * EXCLUDE (diagnosed_at) FROM {view}"
                                                 if view == "incidents" else f"SELECT * FROM {view}").fetchall()))
    return out


@pytest.fixture(scope="module")
def everything(tmp_path_factory) -> Settings:
    """The corpus and every fixture's dumps (the hostile ones are rejected) in one lake, not diagnosed."""
    settings = Settings.resolve(tmp_path_factory.mktemp("batch") / "lake")
    folders = [CORPUS, *sorted(p for p in FIXTURES.iterdir() if p.is_dir() and p.name != "bad")]
    with Frlake(settings) as fl:
        fl.ingest(folders, IngestOptions(workers=1, diagnose=False))
    return settings


def test_batches_give_the_diagnoses_of_one_at_a_time(everything):
    with Frlake(everything) as fl:
        states = fl.catalog.diagnoses.states(fl.attempt_keys())
        small = [k for k, (_, _, _, dumps) in states.items() if dumps <= BATCH_DUMPS]
        assert len(small) >= 50, "the lake holds few small attempts: a batch would prove little"
        one_by_one = fl.rediagnose(batch=1)
        alone = _stored(fl)
        batched = fl.rediagnose()
        together = _stored(fl)
    assert [(d.job, d.attempt) for d in batched] == [(d.job, d.attempt) for d in one_by_one]
    assert sum(1 for k in alone if "/" in k) == len(states)
    assert any(alone[t] for t in SUMMARY_TABLES) and alone["culprits"] and alone["rank_stats"]
    differ = [k for k in alone if alone[k] != together.get(k)]
    assert not differ, f"diagnosed differently in a batch: {differ[:5]}"


def test_a_batch_stores_what_one_at_a_time_stores_in_either_catalog(any_db):
    """The catalog's rows of a batch (catalog.diagnoses.save_many: a few statements for every attempt) are
    those of one attempt at a time (save), on SQLite and on PostgreSQL."""
    with Frlake(any_db) as fl:
        fl.ingest([CORPUS], IngestOptions(workers=1, diagnose=False))
        fl.rediagnose(batch=1)
        alone = _stored(fl)
        fl.rediagnose()
        together = _stored(fl)
        fl.rediagnose()  # again over stored diagnoses: replaced, not added to
        again = _stored(fl)
    assert alone["culprits"] and alone["rank_stats"]
    assert alone == together == again
