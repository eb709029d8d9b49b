"""Small attempts diagnosed in batches, on one connection and stored together (``Frlake._diagnose_all``,
frlake.query.batch), get the diagnoses they get one at a time: byte for byte (their JSON without
``seconds``), with the same summary tables, for every attempt of the corpus and of every fixture."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_two_workers_store_what_one_process_stores(everything):
    """Batches diagnosed by two worker processes and stored by the session, in order: the same stored
    diagnoses and summary tables as in one process, returned in the same order."""
    with Frlake(everything) as fl:
        one = fl.rediagnose(batch=4)
        alone = _stored(fl)
        two = fl.rediagnose(batch=4, workers=2)
        spread = _stored(fl)
    assert [(d.job, d.attempt) for d in two] == [(d.job, d.attempt) for d in one]
    differ = [k for k in alone if alone[k] != spread.get(k)]
    assert not differ, f"stored differently by two workers: {differ[:5]}"


def test_a_killed_worker_leaves_its_batches_to_the_session(everything, tmp_path):
    """SIGKILL of a diagnosis worker as it works: the session diagnoses what it left, and the lake ends as
    one process leaves it (its files committed only, nothing pending)."""
    import os
    import shutil
    import signal
    import threading
    from multiprocessing import forkserver

    from frlake.storage.files import LakeFiles
    from tests.helpers import visible_parquet

    settings = Settings.resolve(tmp_path / "lake")
    shutil.copytree(everything.lake, settings.lake)
    with Frlake(settings) as fl:
        fl.rediagnose(batch=4)
        alone = _stored(fl)
    killed: list[int] = []
    stop = threading.Event()

    def cpu_s(pid: str) -> float:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def kill_a_worker() -> None:
        """SIGKILL a child of the forkserver (the only ones here are the workers) once it is diagnosing (its
        start, when the pool hands it its first task, is past: a kill there can hang Python's pool)."""
        while not stop.is_set() and not killed:
            server = forkserver._forkserver._forkserver_pid
            children = Path(f"/proc/{server}/task/{server}/children") if server else None
            busy = [pid for pid in (children.read_text().split() if children and children.exists() else [])
                    if cpu_s(pid) >= 0.3]
            if busy:
                os.kill(int(busy[0]), signal.SIGKILL)
                killed.append(int(busy[0]))
            stop.wait(0.01)

    watcher = threading.Thread(target=kill_a_worker)
    watcher.start()
    try:
        with Frlake(settings) as fl:
            diagnoses = fl.rediagnose(batch=4, workers=2)
            after = _stored(fl)
            files = LakeFiles(fl.catalog)
            committed = {f.path for f in files.committed()}
            assert files.pending() == [] and files.publishing() == []
            assert fl.catalog.diagnoses.pending() == []
    finally:
        stop.set()
        watcher.join()
    assert killed, "no worker was seen to kill"
    assert len(diagnoses) == sum(1 for k in alone if "/" in k)
    assert visible_parquet(settings) == committed
    differ = [k for k in alone if alone[k] != after.get(k)]
    assert not differ, f"stored differently after a worker was killed: {differ[:5]}"


def test_each_batch_is_stored_behind_the_next_in_order_and_told_on_the_callers_thread(everything, tmp_path):
    """Ingest's diagnosis in batches of 4: stored on a thread of their own while the next is diagnosed, and
    its progress told on the caller's thread (a progress bar or a server's status is never called from
    another), attempt after attempt up to the total; the diagnoses those of one at a time."""
    import shutil
    import threading

    from frlake.ingest.pipeline import Step

    settings = Settings.resolve(tmp_path / "lake")
    shutil.copytree(everything.lake, settings.lake)
    told: list[tuple[int, int, str]] = []

    def progress(step: Step) -> None:
        if step.phase == "diagnosing":
            told.append((step.done, step.total, threading.current_thread().name))

    with Frlake(settings) as fl:
        one_by_one = fl.rediagnose(batch=1)
        alone = _stored(fl)
        stored = fl._diagnose_all(fl.attempt_keys(), lambda done, total: progress(Step("diagnosing", done, total)),
                                  batch=4)
        together = _stored(fl)
    assert [(d.job, d.attempt) for d in stored] == [(d.job, d.attempt) for d in one_by_one]
    assert {name for *_, name in told} == {threading.current_thread().name}
    assert [done for done, *_ in told] == list(range(len(one_by_one) + 1))
    differ = [k for k in alone if alone[k] != together.get(k)]
    assert not differ, f"stored differently behind the next batch: {differ[:5]}"


def test_a_store_that_fails_is_raised_and_what_was_stored_before_it_stays():
    """The storing thread (session._StoredBehind): batches stored in the order given, one behind at most;
    a failed store raised to the caller at its next batch, after which nothing more is stored."""
    import threading
    import time

    from frlake.session import _StoredBehind

    stored_on, told, storing = [], [], threading.Event()

    def store(batch: list) -> None:
        storing.set()
        time.sleep(0.05)
        if batch == ["b"]:
            raise OSError("the disk is full")
        stored_on.append((batch, threading.current_thread().name))

    with pytest.raises(OSError, match="the disk is full"):
        with _StoredBehind(store, told.append) as behind:
            behind(["a"])
            assert storing.wait(5)
            behind(["b"])  # waits for "a" to be stored first
            assert told == [["a"]]
            behind(["c"])  # "b" failed: raised here, "c" never stored
    assert [batch for batch, _ in stored_on] == [["a"]]
    assert stored_on[0][1] != threading.current_thread().name
    assert told == [["a"]]
