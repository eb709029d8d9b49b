"""One bad file never stops the rest (issue 9): dumps whose values Arrow,
UTF-8 or int() cannot take are rejected each with its own reason, beside
real dumps that ingest, in-process and in worker processes, and a re-run
changes nothing. A dump over the per-worker memory budget is rejected while
its worker lives on."""

from __future__ import annotations

import json
import pickle
import re
import shutil
import threading
import time
from multiprocessing import forkserver
from pathlib import Path

import pytest

from frlake.config import Settings
from frlake.errors import MAX_MESSAGE, REJECT_REASONS
from frlake.ingest import IdentityOptions, IngestOptions, Limits
from frlake.session import Frlake
from tests.helpers import ROOT

GOOD = [f"job-223715/attempt-0/gpu-b03/rank_{r}" for r in (0, 1)] + ["job-f70c5d/attempt-2/gpu-b04/rank_2.json"]
LAYOUT = IdentityOptions(layout="{job}/attempt-{attempt}/{host}/{*}rank_{rank}")
BIG = 10**5000  # more digits than int() and str() convert (sys.get_int_max_str_digits)


def _entry(**overrides):
    base = {"record_id": 0, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 1,
            "p2p_seq_id": 0, "op_id": 1, "profiling_name": "nccl:all_reduce", "time_created_ns": 10,
            "input_sizes": [[4]], "output_sizes": [[4]], "input_dtypes": ["Float"], "output_dtypes": ["Float"],
            "state": "completed", "retired": True, "is_p2p": False,
            "frames": [{"name": "step", "filename": "train.py", "line": 7}]}
    base.update(overrides)
    return base


def _old_entry(**overrides):  # torch <= 2.2: time_created_us, no time_created_ns
    entry = _entry(**overrides)
    del entry["time_created_ns"]
    return entry


def _dump(entries=None, **top):
    return {"version": "2.10", "entries": [_entry()] if entries is None else entries, **top}


def _status(value):
    return _dump(pg_status={"0": {"last_enqueued_collective": value, "last_started_collective": 1}})


# name -> (decoded dump, reason). Each is written as a pickle, and as JSON text where JSON can say it.
PICKLED = {
    "us_infinity": ([_old_entry(time_created_us=float("inf"))], "bad_value"),
    "us_nan": ([_old_entry(time_created_us=float("nan"))], "bad_value"),
    "us_2_70": ([_old_entry(time_created_us=2**70)], "out_of_range"),
    "status_infinity": (_status(float("inf")), "bad_value"),
    "status_nan": (_status(float("nan")), "bad_value"),
    "status_2_70": (_status(2**70), "out_of_range"),
    "status_30_digits": (_status("1" * 30), "out_of_range"),
    "config_rank_2_31": (_dump(pg_config={"0": {"name": "0", "desc": "default_pg", "ranks": [0, 2**31]}}), "out_of_range"),
    "config_rank_text": (_dump(pg_config={"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 2147483648]"}}),
                         "out_of_range"),
    "frame_line_2_70": (_dump([_entry(frames=[{"name": "f", "filename": "a.py", "line": 2**70}])]), "out_of_range"),
    "pg_id_2_70": (_dump([_entry(pg_id=2**70)]), "out_of_range"),
    "rank_digits": (_dump(rank=BIG), "out_of_range"),
    "version_digits": (_dump(version=BIG), "out_of_range"),
    "thread_id_digits": (_dump([_entry(thread_id=BIG)]), "out_of_range"),
    "group_name_digits": (_dump([_entry(process_group=(BIG, "default_pg"))]), "out_of_range"),
    "extra_digits": (_dump([_entry(new_field=BIG)]), "out_of_range"),
    "job_surrogate": (_dump(job="job-\ud800"), "bad_text"),
    "host_surrogate": (_dump(host="\udcff"), "bad_text"),
    "desc_surrogate": (_dump([_entry(process_group=("0", "pg-\ud800"))]), "bad_text"),
    "frame_surrogate": (_dump([_entry(frames=[{"name": "\ud800", "filename": "a.py", "line": 1}])]), "bad_text"),
    "status_key_surrogate": (_dump(pg_status={"\ud800": {"last_enqueued_collective": 1}}), "bad_text"),
    "op_surrogate": (_dump([_entry(profiling_name="nccl:\udc80")]), "bad_text"),
    "dtype_surrogate": (_dump([_entry(input_dtypes=["\ud800"])]), "bad_text"),
    "config_desc_surrogate": (_dump(pg_config={"0": {"name": "0", "desc": "\ud800", "ranks": "[0]"}}), "bad_text"),
    "shared_entries": ([_entry()] * 50_000, "too_many_nodes"),
}
_JSON_SAYS = {  # JSON cannot hold tuples or 2**31 in a pickle-only field, but most of these it can
    "us_infinity", "us_nan", "us_2_70", "status_infinity", "status_nan", "status_2_70", "status_30_digits",
    "config_rank_2_31", "config_rank_text", "frame_line_2_70", "pg_id_2_70", "job_surrogate", "host_surrogate",
    "desc_surrogate", "frame_surrogate", "status_key_surrogate", "op_surrogate", "dtype_surrogate",
    "config_desc_surrogate",
}
# JSON text that decodes to a value int() refuses: rejected before parsing.
JSON_TEXT = {
    f"json_{what}_digits": (json.dumps(_dump(**{what: 0})).replace(f'"{what}": 0', f'"{what}": {"9" * 5000}'),
                            "out_of_range")
    for what in ("rank", "version")
}


def _shared_key_pickle(depth: int = 22) -> bytes:
    """~500 bytes: a pg_status key that is a tuple of shared nested tuples; its
    repr() would be 2**depth leaves long (this made a 400 MB catalog row)."""
    out = [b"\x80\x02}q\x00(X\x07\x00\x00\x00entries]q\x01X\x09\x00\x00\x00pg_status}q\x02"
           b"X\x01\x00\x00\x000)q\x030"]  # {"entries": [], "pg_status": {  then "0" and t_3 = () memoised
    for i in range(4, depth + 4):  # t_i = (t_i-1, t_i-1), memoised, popped
        out.append(b"h" + bytes([i - 1]) + b"h" + bytes([i - 1]) + b"\x86q" + bytes([i]) + b"0")
    out.append(b"h" + bytes([depth + 3]) + b"\x86K\x01su.")  # ("0", t_last): 1}}
    return b"".join(out)


def _pickle_bytes(obj) -> bytes:
    return pickle.dumps(obj, protocol=4)


def _json_bytes(obj) -> bytes:
    # json.dumps escapes lone surrogates as "\ud800" and writes Infinity / NaN: what a hostile file would hold
    return json.dumps(obj, allow_nan=True).encode("ascii")


def _bad_files() -> dict[str, tuple[bytes, str]]:
    files = {f"{name}.pkl": (_pickle_bytes(obj), reason) for name, (obj, reason) in PICKLED.items()}
    files.update({f"{name}.json": (_json_bytes(PICKLED[name][0]), PICKLED[name][1]) for name in _JSON_SAYS})
    files.update({f"{name}.json": (text.encode(), reason) for name, (text, reason) in JSON_TEXT.items()})
    files["shared_tuple_key.pkl"] = (_shared_key_pickle(), "bad_schema")
    return files


def _tree(root: Path, corpus: Path) -> tuple[dict[str, str], list[str]]:
    """Bad files sorted before the good ones in one folder, so they share a batch."""
    folder = root / "job-h" / "attempt-0" / "host-a"
    folder.mkdir(parents=True)
    expected = {}
    for i, (name, (data, reason)) in enumerate(sorted(_bad_files().items())):
        path = folder / f"a{name.rsplit('.', 1)[0]}_rank_{100 + i}.{name.rsplit('.', 1)[1]}"
        path.write_bytes(data)
        expected[path.name] = reason
    good = []
    for rank, src in enumerate(GOOD):
        path = folder / f"z_rank_{rank}{'.json' if src.endswith('.json') else ''}"
        shutil.copy(corpus / src, path)
        good.append(path.name)
    return expected, good


def _catalog_files(settings: Settings):
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        return fl.catalog.files.records()


@pytest.mark.parametrize("workers", [1, 2])
def test_each_hostile_value_is_rejected_with_its_reason_and_the_rest_ingests(tmp_path, corpus, workers, fl):
    expected, good = _tree(tmp_path / "nfs", corpus)
    assert len(expected) >= 45
    options = IngestOptions(identity=LAYOUT, workers=workers, diagnose=False)
    summary = fl.ingest([tmp_path / "nfs"], options)

    files = {Path(f.path).name: f for f in _catalog_files(fl.settings)}
    rejected = {name: f.reason for name, f in files.items() if f.status == "rejected"}
    assert rejected == expected
    assert sorted(name for name, f in files.items() if f.status == "ingested") == sorted(good)
    assert (summary.ingested, summary.rejected) == (len(good), len(expected))
    for f in files.values():
        assert f.reason in REJECT_REASONS or f.status != "rejected"
        assert f.detail is None or (0 < len(f.detail) <= MAX_MESSAGE and f.detail.isprintable())
    shared = files[next(n for n in files if "shared_tuple_key" in n)]
    assert "pg_status key" in shared.detail and "tuple" in shared.detail

    again = fl.ingest([tmp_path / "nfs"], options)
    assert (again.unchanged, again.skipped_rejected, again.ingested, again.rejected) == (
        len(good), len(expected), 0, 0), "a rejection is not read again by the same frlake with the same options"
    forced = fl.ingest([tmp_path / "nfs"], IngestOptions(identity=LAYOUT, workers=workers, force=True, diagnose=False))
    assert (forced.ingested, forced.already_present, forced.rejected_by_reason) == (
        0, len(good), {r: list(expected.values()).count(r) for r in set(expected.values())})


def test_an_upload_with_a_hostile_value_keeps_the_good_files(corpus, fl):
    bad = _bad_files()
    files = [("rank_5", bad["status_infinity.pkl"][0]), ("rank_6", bad["frame_surrogate.json"][0]),
             ("rank_1", (corpus / GOOD[1]).read_bytes())]
    options = IngestOptions(identity=IdentityOptions(job="up", attempt=0, host="h"), workers=1, isolate=True,
                            diagnose=False)
    summary = fl.ingest_upload(files, options)
    assert summary.ingested == 1
    assert summary.rejected_by_reason == {"bad_value": 1, "bad_text": 1}


def test_a_stack_checked_under_one_limit_is_checked_again_under_another():
    """A worker remembers the stacks it has checked; what it remembers holds for the limits it checked them by."""
    from frlake.errors import DumpRejected
    from frlake.ingest.parse import parse_dump

    frames = [{"name": "n" * 100, "filename": "train.py", "line": 7}]
    dump = _dump([_entry(frames=frames)])
    assert len(parse_dump(dump, "pickle", 4096, Limits()).stacks) == 1
    with pytest.raises(DumpRejected) as refused:
        parse_dump(dump, "pickle", 4096, Limits(max_string=50))
    assert (refused.value.reason, refused.value.message) == ("bad_schema", "a frame's name or filename is not a short string")


def test_reason_codes_are_documented():
    text = (ROOT / "docs" / "security.md").read_text()
    section = text.split("## Dumps", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", section, re.M))
    assert documented == set(REJECT_REASONS)


def _honest_big_dump(n_entries: int) -> bytes:
    """Distinct entries, no shared references: a dump whose honest expansion
    (about 15-23x its size) is what the memory budget is for."""
    entries = [_entry(record_id=i, collective_seq_id=i, input_sizes=[[i, 2]], output_sizes=[[i, 2]],
                      frames=[{"name": f"f{i}", "filename": "a.py", "line": i}]) for i in range(n_entries)]
    return _pickle_bytes(_dump(entries))


class _PeakRss(threading.Thread):
    """The largest resident size any pool worker (a child of the forkserver) reaches."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.stop = 0, threading.Event()

    def run(self):
        parent = str(forkserver._forkserver._forkserver_pid)
        while not self.stop.is_set():
            for status in Path("/proc").glob("[0-9]*/status"):
                try:
                    fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
                except OSError:
                    continue
                if fields.get("PPid", "").strip() == parent and "VmRSS" in fields:
                    self.peak = max(self.peak, int(fields["VmRSS"].split()[0]) * 1024)
            time.sleep(0.02)


@pytest.mark.slow
def test_a_dump_over_the_memory_budget_is_rejected_and_its_worker_goes_on(tmp_path, corpus, fl):
    budget = 96 << 20
    folder = tmp_path / "nfs" / "job-m" / "attempt-0" / "host-a"
    folder.mkdir(parents=True)
    big = _honest_big_dump(120_000)
    assert 8 << 20 < len(big) < budget / 4  # small beside the budget: only its expansion is over it
    (folder / "a_rank_9").write_bytes(big)
    for rank in (0, 1):
        shutil.copy(corpus / GOOD[rank], folder / f"z_rank_{rank}")
    # The file cap is set high so that the budget, not the cap, is what stops the file.
    limits = Limits(memory_bytes=budget, max_file_bytes=1 << 30)
    options = IngestOptions(identity=LAYOUT, workers=2, limits=limits, chunk_files=8, diagnose=False)
    with Frlake(Settings.resolve(tmp_path / "warm")) as warm:
        warm.ingest([], options)  # start the forkserver before watching its children
    watch = _PeakRss()
    watch.start()
    try:
        summary = fl.ingest([tmp_path / "nfs"], options)
    finally:
        watch.stop.set()
        watch.join()
    # One batch, one worker: the good dumps after the bomb were read by the worker that refused it.
    assert summary.rejected_by_reason == {"over_memory_budget": 1}
    assert summary.rejected_files[0]["path"].endswith("a_rank_9")
    assert summary.ingested == 2
    print(f"peak worker RSS {watch.peak / 2**20:.0f} MiB with a {budget >> 20} MiB budget")
    assert 0 < watch.peak < budget + (200 << 20)  # the worker's own baseline (pyarrow, SQLAlchemy) is ~100 MiB
    # The same file ingests under the default budget of this machine.
    again = fl.ingest([tmp_path / "nfs"], IngestOptions(identity=LAYOUT, workers=2, force=True, diagnose=False))
    assert again.ingested == 1


def test_the_default_file_cap_follows_the_memory_budget():
    limits = Limits(memory_bytes=1 << 30).resolved(workers=4)
    assert limits.max_file_bytes == (1 << 30) // 32
    auto = Limits().resolved(workers=2)
    assert 256 << 20 <= auto.memory_bytes <= 16 << 30
    assert auto.max_file_bytes == min(2 << 30, auto.memory_bytes // 32)
    assert Limits(max_file_bytes=5).resolved().max_file_bytes == 5
