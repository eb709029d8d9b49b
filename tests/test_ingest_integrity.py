"""What ingest commits stays right under crashes, concurrency and odd names:
diagnoses that a kill interrupted are finished by the next run, a new catalog
is created once however many ingests start together, job names round-trip
through the Hive folders, a second dump of a rank is kept and shown, and the
lake's write lock is held only to publish."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from frlake.config import Settings
from frlake.errors import LakeLocked
from frlake.ingest import IdentityOptions, IngestOptions
from frlake.session import Frlake
from frlake.storage.lake import Lake

ROOT = Path(__file__).resolve().parent.parent


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs (not gone, nor a zombie waiting to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _copy_attempt(corpus: Path, dst: Path, job: str, attempt: int) -> Path:
    target = dst / job / f"attempt-{attempt}"
    shutil.copytree(corpus / job / f"attempt-{attempt}", target)
    return target


@pytest.mark.slow
def test_a_run_killed_before_diagnosing_is_diagnosed_by_the_next(lake, corpus):
    # diagnose=False leaves the catalog exactly as a kill -9 between the commit and the diagnosis does
    with Frlake(lake) as run:
        summary = run.ingest([corpus / "job-223715", corpus / "job-f70c5d"], IngestOptions(diagnose=False))
    assert summary.ingested == 28 and summary.diagnosed == []
    with Frlake.open(lake.lake, lake.db_url, must_exist=True) as fl:
        diagnoses = fl.catalog.diagnoses
        assert diagnoses.pending() == [("job-223715", 0), ("job-f70c5d", 0), ("job-f70c5d", 1), ("job-f70c5d", 2)]
        with Frlake(lake) as run:  # the next run, a session of its own beside the reader's
            again = run.ingest([corpus / "job-223715"])  # nothing new to read, but the pending attempts are finished
        assert again.ingested == 0 and again.unchanged == 4
        assert sorted((d.job, d.attempt) for d in again.diagnosed) == [
            ("job-223715", 0), ("job-f70c5d", 0), ("job-f70c5d", 1), ("job-f70c5d", 2)]
        assert diagnoses.pending() == []
        assert diagnoses.get("job-223715", 0).verdict == "hang"


def test_new_dumps_make_a_stored_diagnosis_pending_again(lake, corpus, tmp_path):
    tree = tmp_path / "tree"
    attempt = _copy_attempt(corpus, tree, "job-223715", 0)
    late = attempt / "gpu-c04" / "rank_3"
    held = tmp_path / "rank_3"
    shutil.move(late, held)  # rank 3 arrives late
    with Frlake(lake) as run:
        run.ingest([tree])
    with Frlake.open(lake.lake, lake.db_url, must_exist=True) as fl:
        diagnoses = fl.catalog.diagnoses
        assert diagnoses.pending() == []
        assert diagnoses.get("job-223715", 0).ranks_missing_dump == [3]
        shutil.move(held, late)
        with Frlake(lake) as run:  # runs in sessions of their own: the reader's sees what they commit
            run.ingest([tree], IngestOptions(diagnose=False))
        assert diagnoses.pending() == [("job-223715", 0)]
        with Frlake(lake) as run:
            run.ingest([tree])
        assert diagnoses.pending() == []
        assert diagnoses.get("job-223715", 0).ranks_missing_dump == []


@pytest.mark.slow
def test_kill_between_commit_and_diagnosis_then_rerun(tmp_path, corpus):
    """A real kill -9 once the first dumps are committed: whatever the moment,
    the re-run leaves no attempt undiagnosed."""
    settings = Settings.resolve(tmp_path / "lake")
    cmd = [sys.executable, "-m", "frlake.cli.main", "--lake", str(settings.lake), "ingest", str(corpus),
           "--batch-files", "8", "--workers", "1", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (settings.lake / "catalog.db").exists():
            try:
                with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
                    if fl.catalog.attempts.keys():
                        break
            except Exception:
                pass
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        assert fl.catalog.diagnoses.pending() == []
        assert len(fl.catalog.attempts.keys()) == 30


def _first_ingest(args: tuple[str, str, str]) -> tuple[int, str]:
    lake, db_url, tree = args
    cmd = [sys.executable, "-m", "frlake.cli.main", "--lake", lake, "ingest", tree, "--workers", "1", "--quiet"]
    if db_url:
        cmd[3:3] = ["--db-url", db_url]
    done = subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
                          timeout=300)
    return done.returncode, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_three_concurrent_first_ingests_create_the_catalog_once(backend, tmp_path, corpus, request):
    db_url = request.getfixturevalue("pg_url") if backend == "postgresql" else ""
    trees = []
    for i, job in enumerate(("job-223715", "job-e211c0", "job-5f5228")):
        shutil.copytree(corpus / job, tmp_path / f"t{i}" / job)
        trees.append(str(tmp_path / f"t{i}"))
    lake = str(tmp_path / "lake")
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(_first_ingest, [(lake, db_url, t) for t in trees]))
    assert [code for code, _ in results] == [0, 0, 0], [err for _, err in results]
    with Frlake.open(lake, db_url or None, must_exist=True) as fl:
        assert sorted({job for job, _ in fl.catalog.attempts.keys()}) == ["job-223715", "job-5f5228", "job-e211c0"]


@pytest.mark.slow
@pytest.mark.parametrize("job", ["__HIVE_DEFAULT_PARTITION__", "team/a b", "100%", "null"])
def test_job_names_round_trip_through_the_partition_folders(corpus, job, fl):
    fl.ingest([corpus / "job-223715" / "attempt-0"],
              IngestOptions(identity=IdentityOptions(job=job, attempt=0, layout="{host}/rank_{rank}")))
    con = fl.connect()
    assert con.execute("SELECT DISTINCT job FROM entries").fetchall() == [(job,)]
    assert con.execute("SELECT count(*) FROM dumps WHERE job = ?", [job]).fetchone()[0] == 4
    con.close()
    d = fl.diagnose(job, 0)
    assert (d.verdict, d.root.rank, d.root.host) == ("hang", 1, "gpu-b03")


def _other_bytes_of(path: Path, dst: Path) -> None:
    """The same dump content written as other bytes (a rewrite by another pickler)."""
    dst.write_bytes(pickle.dumps(pickle.loads(path.read_bytes()), protocol=2))  # trusted: a corpus file


def _diagnosis_json(fl: Frlake, job: str, attempt: int) -> str:
    d = fl.diagnose(job, attempt, store=False).to_dict()
    d.pop("seconds")
    return json.dumps(d, sort_keys=True, default=str)


@pytest.mark.slow
def test_a_second_dump_of_a_rank_is_kept_shown_and_read_by_a_stated_rule(tmp_path, corpus, views):
    tree = tmp_path / "tree"
    _copy_attempt(corpus, tree, "job-e211c0", 0)
    # a dump of rank 2 from the next attempt lands in attempt 0's folder: a newer snapshot of that rank
    extra = tree / "extra" / "job-e211c0" / "attempt-0" / "gpu-d02"
    extra.mkdir(parents=True)
    _other_bytes_of(corpus / "job-e211c0" / "attempt-1" / "gpu-d02" / "rank_2", extra / "rank_2")
    first = tree / "job-e211c0"
    orders = {"original first": [[first], [tree / "extra"]], "newer first": [[tree / "extra"], [first]],
              "together": [[tree]]}
    answers = {}
    for name, runs in orders.items():
        settings = Settings.resolve(tmp_path / name.replace(" ", "-"))
        with Frlake(settings) as fl:
            summaries = [fl.ingest(paths) for paths in runs]
            assert sum(s.ingested for s in summaries) == 5
            assert summaries[-1].conflicts == [{"job": "job-e211c0", "attempt": 0, "rank": 2, "dumps": 2}]
            con = views(settings.lake, settings.db_url)
            (row,) = con.execute("SELECT job, attempt, rank, dumps, candidates FROM dump_conflicts").fetchall()
            assert row[:4] == ("job-e211c0", 0, 2, 2)
            assert row[4][0]["source_path"].endswith("extra/job-e211c0/attempt-0/gpu-d02/rank_2")  # the newest first
            con.close()
            answers[name] = _diagnosis_json(fl, "job-e211c0", 0)
        assert json.loads(answers[name])["several_dumps"] == [{"rank": 2, "dumps": 2}]
    assert len(set(answers.values())) == 1, "the same dumps give the same diagnosis whatever the order of ingest"


@pytest.mark.slow
def test_the_write_lock_is_held_only_to_publish(lake, corpus, tmp_path):
    """While one ingest runs (between its batches), another one commits."""
    other = Settings.resolve(lake.lake, lake.db_url)
    inner: list = []

    def progress(step) -> None:
        if step.phase == "reading" and step.done and not inner:  # between two batches
            with Frlake(other) as second:
                inner.append(second.ingest([corpus / "job-e211c0"], IngestOptions(lock_timeout_s=5)))

    with Frlake(lake) as first:
        first.ingest([corpus / "job-223715"], IngestOptions(chunk_files=1), progress)
    assert inner and inner[0].ingested == 12
    with Frlake.open(lake.lake, lake.db_url, must_exist=True) as fl:
        assert {j for j, _ in fl.catalog.attempts.keys()} == {"job-223715", "job-e211c0"}


@pytest.mark.slow
def test_a_busy_lake_makes_ingest_wait_then_fail_clearly(lake, corpus):
    Lake(lake.lake).create()
    with Lake(lake.lake).write_lock():
        started = time.monotonic()
        with Frlake(lake) as fl, pytest.raises(LakeLocked, match="busy"):
            fl.ingest([corpus / "job-223715"], IngestOptions(lock_timeout_s=0.5))
        assert 0.4 < time.monotonic() - started < 5
    with Frlake(lake) as fl:
        assert fl.ingest([corpus / "job-223715"]).ingested == 4


@pytest.mark.slow
def test_a_dead_runs_leftovers_are_removed_and_a_live_runs_kept(lake, corpus):
    with Frlake(lake) as fl:
        fl.ingest([corpus / "job-223715"])
    root = Lake(lake.lake)
    dead = root.root / ".staging" / "run-999"
    dead.mkdir()
    (dead / "x.parquet.tmp").write_bytes(b"left by a killed run")
    with root.run_staging(1000) as live:
        (live.staging / "y.parquet.tmp").write_bytes(b"being written")
        with Frlake(lake) as fl:
            fl.ingest([corpus / "job-e211c0"])
        assert not dead.exists()
        assert (live.staging / "y.parquet.tmp").exists()
    assert not (root.root / ".staging" / "run-1000").exists()


@pytest.mark.slow
def test_a_lake_made_again_at_the_same_path_in_one_process_gets_every_dump(tmp_path, corpus):
    """One process, two ingests with one worker (in-process), the lake deleted and made again at the same
    path between them (same catalog URL, a new catalog file, run 1 again): the second run reads its own
    catalog, not the first's through a connection the process kept, and ingests every dump again."""
    src = _copy_attempt(corpus, tmp_path / "nfs", "job-20d6d4", 0)
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        first = fl.ingest([src], IngestOptions(workers=1))
    shutil.rmtree(tmp_path / "lake")
    with Frlake(settings) as fl:  # a second session, as a second command in the same process
        again = fl.ingest([src], IngestOptions(workers=1))
    assert first.ingested > 0 and again.ingested == first.ingested and again.already_present == 0


def test_workers_start_with_their_modules_loaded_and_frozen():
    """The forkserver imports the worker's modules once (frlake.ingest.preload) and freezes them: a worker's
    garbage collector never walks them."""
    import gc
    from concurrent.futures import ProcessPoolExecutor

    from frlake.ingest.pool import pool_context

    context = pool_context()
    if context.get_start_method() != "forkserver":
        pytest.skip("no forkserver on this platform")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        frozen = pool.submit(gc.get_freeze_count).result()
    assert frozen > 10_000, frozen  # what importing the worker's modules made


def test_a_scripts_workers_start_with_the_script_imported_once(tmp_path, corpus):
    """Python's multiprocessing imports the script that started a pool in each worker; the forkserver imports
    it once instead (frlake.ingest.preload), so each worker of every pool starts with it."""
    script = tmp_path / "ingest_script.py"
    script.write_text(textwrap.dedent(f"""
        import os
        with open({str(tmp_path / "imports.txt")!r}, "a") as f:
            f.write(f"{{os.getpid()}}\\n")

        if __name__ == "__main__":
            from frlake.config import Settings
            from frlake.ingest import IngestOptions
            from frlake.session import Frlake

            with Frlake(Settings.resolve({str(tmp_path / "lake")!r})) as fl:
                for chunk_files in (2, 3):  # two pools, each with two fresh workers
                    summary = fl.ingest([{str(corpus)!r}], IngestOptions(workers=2, chunk_files=chunk_files,
                                                                          force=True, diagnose=False))
                    print(summary.ingested + summary.already_present, summary.rejected)
    """))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    total = len([p for p in corpus.rglob("rank_*") if p.is_file()])
    assert done.stdout.split() == [str(total), "0"] * 2
    imported = (tmp_path / "imports.txt").read_text().split()
    assert len(imported) == 2, imported  # the script, and its forkserver: no worker imported it again


@pytest.mark.slow
@pytest.mark.parametrize("failing", ["publish", "read"])
def test_an_in_process_ingest_that_fails_mid_run_keeps_the_batches_before_and_a_rerun_completes(
        lake, corpus, monkeypatch, failing):
    """One worker reads a batch while the one before is written: whether the third batch's commit or its
    reading fails, the two batches before it are committed (as batches run one after another would be),
    nothing is left staged, and a re-run ingests the rest."""
    from frlake.ingest import pipeline, worker
    from tests.helpers import assert_lake_is_clean

    module, name, nth = (pipeline, "publish", 3) if failing == "publish" else (worker, "_keep_raw", 9)
    real, calls = getattr(module, name), []

    def fail_once_there(*args, **kwargs):
        calls.append(1)
        if len(calls) == nth:
            raise OSError("the disk went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, fail_once_there)
    with Frlake(lake) as fl, pytest.raises(OSError, match="the disk went away"):
        fl.ingest([corpus], IngestOptions(chunk_files=4, diagnose=False))
    monkeypatch.setattr(module, name, real)
    with Frlake.open(lake.lake, lake.db_url, must_exist=True) as fl:
        assert len(fl.catalog.files.records()) == 8  # two batches of four files
    assert not any(p.is_file() for p in (lake.lake / ".staging").rglob("*") if "lock" not in p.name)
    with Frlake(lake) as fl:
        summary = fl.ingest([corpus], IngestOptions(chunk_files=4))
    total = len([p for p in corpus.rglob("rank_*") if p.is_file()])
    assert summary.unchanged == 8 and summary.rejected == 0
    assert summary.ingested + summary.already_present == total - 8
    assert_lake_is_clean(lake)


def test_two_worker_processes_ingest_what_one_worker_in_process_does(tmp_path, corpus):
    """Two worker processes, with and without ``isolate``, leave the lake and catalog that one worker in the
    session's process leaves (small batches: many of them, committed in the order they end)."""
    from tests.helpers import snapshot

    snaps = []
    for name, options in (("one", IngestOptions(workers=1, chunk_files=2, diagnose=False)),
                          ("two", IngestOptions(workers=2, chunk_files=2, diagnose=False)),
                          ("isolated", IngestOptions(workers=2, chunk_files=2, diagnose=False, isolate=True))):
        settings = Settings.resolve(tmp_path / name)
        with Frlake(settings) as fl:
            summary = fl.ingest([corpus], options)
        assert summary.rejected == 0 and summary.ingested > 8, summary
        snaps.append(snapshot(settings))
    assert snaps[1] == snaps[0]
    assert snaps[2] == snaps[0]


def test_a_process_keeps_its_workers_for_its_next_run_until_they_idle(tmp_path, corpus, monkeypatch):
    """A second run of the same process takes the workers the first one kept (warm: no new process, no
    first batch's cost); unused for IDLE_S they stop. A pool whose worker died is not kept."""
    import os
    import signal

    from frlake.ingest import pool as pools

    def workers() -> set[int]:
        held = list(pools._kept.values())
        return {pid for pool, _ in held for pid in pool._processes}

    monkeypatch.setattr(pools, "IDLE_S", 1.0)
    options = IngestOptions(workers=2, chunk_files=2, diagnose=False, force=True)
    with Frlake(Settings.resolve(tmp_path / "lake")) as fl:
        first = fl.ingest([corpus / "job-223715"], options)
        kept = workers()
        assert len(kept) == 2
        second = fl.ingest([corpus / "job-223715"], options)
        assert workers() == kept and first.ingested > 0 and second.already_present == first.ingested
        for pid in kept:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_running(pid) for pid in kept) and time.monotonic() < deadline:
            time.sleep(0.01)  # dead while idle, before the next run
        third = fl.ingest([corpus / "job-223715"], options)  # a new pool: the kept one broke while idle
        assert third.already_present == first.ingested and third.rejected == 0
        fresh = workers()
        assert len(fresh) == 2 and not fresh & kept
    deadline = time.monotonic() + 30
    while (pools._kept or any(_running(pid) for pid in fresh)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pools._kept and not any(_running(pid) for pid in fresh), "the idle workers were not stopped"


def test_kept_workers_exit_when_their_session_is_killed(tmp_path, corpus):
    """A session killed without its exit hooks (SIGKILL) while it keeps its workers between runs leaves
    none of them behind."""
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys
        from frlake.config import Settings
        from frlake.ingest import IngestOptions
        from frlake.ingest import pool as pools
        from frlake.session import Frlake

        if __name__ == "__main__":
            with Frlake(Settings.resolve({str(tmp_path / "lake")!r})) as fl:
                fl.ingest([{str(corpus / "job-223715")!r}], IngestOptions(workers=2, chunk_files=2, diagnose=False))
                print(*(pid for pool, _ in pools._kept.values() for pid in pool._processes), flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
    """))
    # (an orphaned worker would hold the script's stdout open: the run would time out)
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, done.stderr
    workers = [int(pid) for pid in done.stdout.split()]
    assert len(workers) == 2

    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(pid) for pid in workers), "a worker outlived its session"
