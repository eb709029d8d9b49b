"""Members read from ``group_runs`` (the rank lists as arithmetic runs) equal
the members read from ``groups.ranks``, which a lake ingested before
group_runs existed offers alone: on torch's own dumps (the corpus, real
split_group) and every producer's shape."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from frlake import schema
from frlake.config import Settings
from frlake.diagnose import evidence
from frlake.diagnose.analyze import diagnose_attempt
from frlake.ingest.parse import rank_runs
from frlake.query import vocabulary
from frlake.session import Frlake
from tests.helpers import FIXTURES


def test_runs_round_trip_any_list_within_one_and_a_half_numbers_per_rank():
    rng = random.Random(7)
    cases = [[], [5], [1, 3], [3, 3, 3], list(range(16384)), list(range(3, 16384, 8)), [-2**31, 2**31 - 1]]
    cases += [[rng.randint(-9, 60) for _ in range(rng.randint(0, 40))] for _ in range(3000)]
    for ranks in cases:
        runs = rank_runs(ranks)
        assert vocabulary.expand_runs(runs) == ranks
        assert len(runs) <= 1.5 * len(ranks) + 3
    assert rank_runs(list(range(16384))) == [0, 1, 16384]
    assert rank_runs(list(range(3, 16384, 8))) == [3, 8, 2048]


@pytest.fixture(scope="module")
def shapes_lake(tmp_path_factory, corpus) -> Settings:
    settings = Settings.resolve(tmp_path_factory.mktemp("group-runs") / "lake")
    producers = FIXTURES / "producers"
    with Frlake(settings) as fl:
        summary = fl.ingest([corpus, FIXTURES / "real" / "split_group",
                             *sorted(p for p in producers.iterdir() if p.is_dir())])
    assert {r["reason"] for r in summary.rejected_files} <= {"debug_server_text"}, summary.rejected_files
    return settings


@pytest.mark.slow
def test_members_from_runs_equal_members_from_rank_lists(shapes_lake):
    with Frlake(shapes_lake) as fl:
        keys = fl.catalog.attempts.keys(None)
        assert len(keys) > 30
        runs_read = 0
        for job, attempt in keys:
            con = fl.connect(catalog_views=(), partition=(job, attempt))
            params = {"job": job, "attempt": attempt}
            lists = con.execute("SELECT count(*) FROM group_runs").fetchone()[0]
            new = evidence.load(con, job, attempt)
            new_diag = {**diagnose_attempt(con, job, attempt).to_dict(), "seconds": None}
            # what a lake from before group_runs offers: the rank lists alone
            con.register("_no_runs", pa.schema([*schema.GROUP_RUNS, *schema.PARTITION_FIELDS]).empty_table())
            con.execute("CREATE OR REPLACE VIEW group_runs AS SELECT * FROM _no_runs")
            assert vocabulary.member_lists(con, params, vocabulary.Relations()) == ("groups", "ranks") or not lists
            old = evidence.load(con, job, attempt)
            assert (new.members, new.desc, new.names) == (old.members, old.desc, old.names), (job, attempt)
            assert {**diagnose_attempt(con, job, attempt).to_dict(), "seconds": None} == new_diag
            runs_read += bool(lists)
        assert runs_read > 30
