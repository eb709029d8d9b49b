"""The same dumps give the same diagnosis, byte for byte (its JSON without ``seconds``), whatever the order
of ingest, the number of workers and whatever else is in the lake: one attempt's diagnosis never depends
on other attempts."""

from __future__ import annotations

import json
import random

import pytest

from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.session import Frlake
from tests.helpers import CORPUS, FIXTURES

WATCHED = {  # the attempts whose diagnoses are compared, and where their dumps are
    ("split5", 0): FIXTURES / "real" / "split_group" / "split5",
    ("split5", 1): FIXTURES / "real" / "split_group" / "split5",
    ("split5_missing", 0): FIXTURES / "producers" / "split5_missing",
    ("torchcomms_hang", 0): FIXTURES / "producers" / "torchcomms_hang",
    ("straggler_100ms", 0): FIXTURES / "producers" / "straggler_100ms",
    ("job-65a07f", 0): CORPUS / "job-65a07f",  # a real straggler
    ("job-f70c5d", 1): CORPUS / "job-f70c5d",  # a real type mismatch
}
OTHERS = [FIXTURES / "real" / "split_group" / "newgroup", FIXTURES / "producers" / "torchcomms_healthy",
          FIXTURES / "producers" / "wobble_8_ranks", CORPUS / "job-223715", CORPUS / "job-5f5228"]


def _files(folders) -> list:
    return sorted({p for folder in folders for p in folder.rglob("rank_*") if p.is_file()})


def _as_json(settings, keys) -> dict:
    out = {}
    with Frlake(settings) as fl:
        for job, attempt in keys:
            for kind, d in (("fresh", fl.diagnose(job, attempt, store=False)),
                            ("stored", fl.stored_diagnosis(job, attempt))):
                data = d.to_dict()
                data.pop("seconds")
                out[f"{job}/{attempt}/{kind}"] = json.dumps(data, sort_keys=True)
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """Each watched job ingested alone, in sorted order, by one worker."""
    out = {}
    for job in sorted({job for job, _ in WATCHED}):
        settings = Settings.resolve(tmp_path_factory.mktemp(f"alone-{job}") / "lake")
        folders = {WATCHED[k] for k in WATCHED if k[0] == job}
        with Frlake(settings) as fl:
            summary = fl.ingest(_files(folders), IngestOptions(workers=1))
        assert summary.rejected == 0, summary.rejected_files
        out.update(_as_json(settings, [k for k in WATCHED if k[0] == job]))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("seed, workers, beside", [(1, 1, False), (2, 2, False), (3, 1, True), (4, 2, True)])
def test_the_same_dumps_give_the_same_diagnosis(tmp_path, reference, seed, workers, beside):
    files = _files(set(WATCHED.values()) | (set(OTHERS) if beside else set()))
    random.Random(seed).shuffle(files)
    settings = Settings.resolve(tmp_path / "lake")
    cut = sorted(random.Random(seed).sample(range(1, len(files)), 2))
    with Frlake(settings) as fl:
        for batch in (files[:cut[0]], files[cut[0]:cut[1]], files[cut[1]:]):  # three runs, dumps in any order
            summary = fl.ingest(batch, IngestOptions(workers=workers))
            assert summary.rejected == 0, summary.rejected_files
    assert _as_json(settings, WATCHED) == reference
