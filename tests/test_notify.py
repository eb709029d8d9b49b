"""Alerts on new incidents (docs/operations.md, "Alerts"), against a real HTTP receiver on loopback and real
dumps: delivery, dedup, updates, retries after 500s and timeouts, a restart in the middle, the signature."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.errors import UsageError
from frlake.ingest.pipeline import IngestOptions
from frlake.notify.config import NotifyConfig, label, notify_config
from frlake.session import Frlake
from tests.helpers import copy_attempt as _copy
from tests.receiver import Receiver

ONE = IngestOptions(workers=1)


@pytest.fixture
def receiver():
    with Receiver() as r:
        yield r


def _config(receiver: Receiver, **kw) -> NotifyConfig:
    return NotifyConfig(urls=(receiver.url,), **({"backoff_s": 0.05, "timeout_s": 2.0} | kw))


def test_a_new_hang_is_posted_once_with_its_root_cause_link_and_signature(fl, tmp_path, receiver):
    notifier = fl.notifier(_config(receiver, secret="s3cret", public_url="https://frlake.example.com/"))
    notifier.start()
    fl.ingest([_copy(tmp_path / "nfs", "job-223715", 0)], ONE)
    summary = notifier.run()
    assert (summary.queued, summary.sent, summary.failed) == (1, 1, 0)
    [got] = receiver.accepted
    m = got.json
    assert (m["event"], m["job"], m["attempt"], m["verdict"]) == ("new", "job-223715", 0, "hang")
    assert (m["root_cause"]["rank"], m["root_cause"]["host"]) == (1, "gpu-b03")  # the corpus' truth
    assert {"group", "seq", "op", "reason"} <= set(m["root_cause"])
    assert m["summary"] == fl.catalog.diagnoses.get("job-223715", 0).summary
    assert m["url"] == "https://frlake.example.com/jobs/job-223715/attempts/0"
    assert m["drain"]["host"] == "gpu-b03" and m["drain"]["action"] in ("ok", "suspect", "avoid", "exclude")
    assert m["text"].startswith("*frlake: hang (CPU-side)* in <https://frlake.example.com/jobs/job-223715/attempts/0|")
    # the kind of failure and its evidence: rank 1 never enqueued the all_gather its tp peer waits in
    assert m["kind"] == "cpu_side" and m["kind_why"].startswith("rank 1 never enqueued seq 4 of tp 1")
    # host or code?: the first incident of a lake has no history to judge from
    assert m["cause"] == fl.cause("job-223715", 0).to_dict()
    assert (m["cause"]["call"], m["cause"]["label"]) == ("unclear", "judgement from history")
    assert "host or code? unclear (judgement from history)" in m["text"]
    # the signature: HMAC-SHA256 of the raw body, as GitHub signs its webhooks
    expected = "sha256=" + hmac.new(b"s3cret", got.body, hashlib.sha256).hexdigest()
    assert got.headers["x-frlake-signature"] == expected
    assert len(got.headers["x-frlake-delivery"]) == 32
    # never twice: another pass, the same files again, the same diagnosis made again
    assert notifier.run().queued == 0
    fl.ingest([tmp_path / "nfs"], IngestOptions(workers=1, force=True))
    fl.rediagnose("job-223715")
    assert notifier.run().queued == 0
    assert len(receiver.got) == 1
    [status] = fl.notify_status()
    assert (status.sent, status.failed, status.queued, status.label) == (1, 0, 0, label(receiver.url))
    assert "secret-path" not in status.label  # a webhook's path holds its secret: never shown


def test_no_signature_without_a_secret_and_healthy_attempts_are_not_posted(fl, tmp_path, receiver):
    notifier = fl.notifier(_config(receiver))
    notifier.start()
    fl.ingest([_copy(_copy(tmp_path / "nfs", "job-223715", 0), "job-e79e4a", 0)], ONE)  # a hang, a healthy one
    notifier.run()
    assert [g.json["job"] for g in receiver.accepted] == ["job-223715"]
    assert "x-frlake-signature" not in receiver.accepted[0].headers


def test_a_changed_verdict_is_an_update_that_says_what_changed(fl, tmp_path, receiver):
    notifier = fl.notifier(_config(receiver))
    notifier.start()
    fl.ingest([_copy(tmp_path / "a", "job-5f5228", 1, ["rank_2", "rank_3"])], ONE)  # two ranks: a hang
    notifier.run()
    # its root cause is named only by the dumps it has not written (a slow writer looks the same): not
    # announced until the attempt settles (a watch's quiet period marks it complete)
    assert receiver.accepted == []
    fl.mark_complete("job-5f5228", 1)
    notifier.run()
    fl.ingest([_copy(tmp_path / "b", "job-5f5228", 1)], ONE)  # all of them: rank 0 sent another size
    notifier.run()
    first, update = (g.json for g in receiver.accepted)
    assert first["partial"] is False and first["ranks_dumped"] == 2
    assert (first["event"], first["verdict"]) == ("new", "hang")
    assert (update["event"], update["verdict"]) == ("update", "mismatch")
    assert update["changed"]["verdict"] == {"was": "hang", "now": "mismatch"}
    assert update["changed"]["root_cause"]["now"] == "rank 0 on gpu-b03 (size_mismatch)"
    assert "changed: verdict hang -> mismatch" in update["text"]
    assert first["revision"] < update["revision"]


def test_filters_by_verdict_and_job(fl, tmp_path, receiver):
    notifier = fl.notifier(_config(receiver, on=("mismatch",), jobs=("job-45*", "job-5f*")))
    notifier.start()
    nfs = tmp_path / "nfs"
    for job, attempt in [("job-223715", 0), ("job-457f71", 0), ("job-5f5228", 1), ("job-f70c5d", 1)]:
        _copy(nfs, job, attempt)
    fl.ingest([nfs], ONE)
    notifier.run()
    # job-223715 is a hang; job-f70c5d's mismatch is of a job no pattern matches
    assert sorted((g.json["job"], g.json["verdict"]) for g in receiver.accepted) == [
        ("job-457f71", "mismatch"), ("job-5f5228", "mismatch")]


def _next_try_in(fl) -> tuple[int, float]:
    """The waiting message's failed tries and the seconds until its next try."""
    from datetime import UTC, datetime

    from frlake.catalog.models import NotifyMessage

    [(tries, at)] = fl.catalog.rows(select(NotifyMessage.tries, NotifyMessage.next_try_at))
    return tries, ((at if at.tzinfo else at.replace(tzinfo=UTC)) - datetime.now(UTC)).total_seconds()


def _until_sent(notifier, deadline_s: float = 30.0) -> float:
    started = time.monotonic()
    while notifier.run().sent == 0:
        assert time.monotonic() - started < deadline_s
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_receiver_that_answers_500_is_retried_with_backoff_and_the_failure_shown(fl, tmp_path, receiver):
    receiver.answers = [(500, 0.0), (500, 0.0)]
    notifier = fl.notifier(_config(receiver, backoff_s=1.0))
    notifier.start()
    fl.ingest([_copy(tmp_path / "nfs", "job-223715", 0)], ONE)
    first = notifier.run()
    assert (first.queued, first.sent, first.failed) == (1, 0, 1)
    [status] = fl.notify_status()
    assert (status.queued, status.failed, status.sent) == (1, 1, 0)
    assert status.last_error == "HTTP 500 Internal Server Error (try 1)"
    tries, wait = _next_try_in(fl)
    assert tries == 1 and 0 < wait <= 1.0  # backoff_s
    assert notifier.run().failed == 0 or _next_try_in(fl)[0] == 2  # not due yet, unless this machine is slow
    time.sleep(max(0.0, _next_try_in(fl)[1]) + 0.05)
    assert notifier.run().failed == 1  # the second 500
    tries, wait = _next_try_in(fl)
    assert tries == 2 and 1.0 < wait <= 2.0  # doubled
    assert _until_sent(notifier) > 0.5
    assert len(receiver.got) == 3
    assert len({g.headers["x-frlake-delivery"] for g in receiver.got}) == 1  # one message, tried three times
    assert len({g.body for g in receiver.got}) == 1
    [status] = fl.notify_status()
    assert (status.queued, status.failed, status.sent) == (0, 2, 1)


def test_a_receiver_that_does_not_answer_in_time_is_tried_again(fl, tmp_path, receiver):
    receiver.answers = [(200, 3.0)]  # it takes the message, but answers after frlake stopped waiting
    notifier = fl.notifier(_config(receiver, timeout_s=0.3))
    notifier.start()
    fl.ingest([_copy(tmp_path / "nfs", "job-223715", 0)], ONE)
    assert notifier.enqueue(receiver.url) == 1
    started = time.monotonic()
    assert notifier.deliver(receiver.url).failed == 1
    assert time.monotonic() - started < 2.0  # the timeout holds: it did not wait for the answer
    assert fl.notify_status()[0].last_error == "no answer within 0.3 s (try 1)"
    _until_sent(notifier)
    # delivered at least once: both requests carry the same id, by which the receiver drops the copy
    assert len(receiver.got) == 2 and len({g.headers["x-frlake-delivery"] for g in receiver.got}) == 1


def test_a_restart_in_the_middle_loses_nothing_and_sends_nothing_twice(any_db, tmp_path, receiver):
    config, lake = _config(receiver), any_db
    with Frlake(lake) as fl:
        notifier = fl.notifier(config)
        notifier.start()
        fl.ingest([_copy(tmp_path / "nfs", "job-223715", 0)], ONE)
        assert notifier.enqueue(receiver.url) == 1  # queued, and the process stops before it sends
    receiver.answers = [(500, 0.0)]
    with Frlake(lake) as fl:  # a new process: the receiver fails once
        fl.ingest([_copy(tmp_path / "nfs", "job-24fdd5", 0)], ONE)  # meanwhile another hang
        summary = fl.notifier(config).run()
        assert (summary.queued, summary.sent, summary.failed) == (1, 0, 1)
    with Frlake(lake) as fl:  # and another, once the retry is due
        notifier = fl.notifier(config)
        deadline = time.monotonic() + 30
        while fl.notify_status()[0].sent < 2:
            assert time.monotonic() < deadline
            notifier.run()
            time.sleep(0.05)
        assert notifier.run().queued == 0
    assert sorted(g.json["job"] for g in receiver.accepted) == ["job-223715", "job-24fdd5"]
    assert len(receiver.got) == 3


def test_two_processes_that_pass_at_once_queue_each_message_once(any_db, tmp_path, receiver):
    config, lake = _config(receiver), any_db
    with Frlake(lake) as a, Frlake(lake) as b:
        a.notifier(config).start()
        a.ingest([_copy(tmp_path / "nfs", "job-223715", 0)], ONE)
        na, nb = a.notifier(config), b.notifier(config)
        dest = na._destination(receiver.url)
        seen_by_a = a.catalog.notify.candidates(dest)
        assert nb.enqueue(receiver.url) == 1
        # a decides on what it read before b recorded: its decisions are skipped
        assert a.catalog.notify.record(dest, [na._decide(c, {}) for c in seen_by_a], 100) == 0
        na.deliver(receiver.url)
        nb.deliver(receiver.url)
    assert len(receiver.got) == 1


def test_a_new_receiver_starts_from_what_the_lake_holds(fl, tmp_path, receiver):
    fl.ingest([_copy(tmp_path / "old", "job-223715", 0)], ONE)
    notifier = fl.notifier(_config(receiver))
    notifier.start()  # the old hang is not announced
    fl.ingest([_copy(tmp_path / "new", "job-24fdd5", 0)], ONE)
    notifier.run()
    assert [g.json["job"] for g in receiver.accepted] == ["job-24fdd5"]


def test_the_queue_is_bounded_and_what_it_drops_is_counted(fl, tmp_path, receiver):
    receiver.answers = [(503, 0.0)]
    notifier = fl.notifier(_config(receiver, max_queue=1, backoff_s=60))
    notifier.start()
    nfs = tmp_path / "nfs"
    for job in ("job-223715", "job-24fdd5", "job-f2518d"):
        _copy(nfs, job, 0)
    fl.ingest([nfs], ONE)
    notifier.run()
    [status] = fl.notify_status()
    assert (status.queued, status.dropped) == (1, 2)
    assert status.last_error.startswith("HTTP 503")


def test_bad_settings_are_refused_with_a_clear_error(tmp_path):
    with pytest.raises(UsageError, match="not an http"):
        NotifyConfig(urls=("ftp://x/y",))
    with pytest.raises(UsageError, match="healthy attempts are never announced"):
        NotifyConfig(urls=("http://x/",), on=("healthy",))
    bad = tmp_path / "frlake.toml"
    bad.write_text('[notify]\nurl = "http://x/"\nverdicts = ["hang"]\n')
    with pytest.raises(UsageError, match="unknown key.*verdicts"):
        notify_config(config_file=bad)
    bad.write_text('[notfy]\nurl = "http://x/"\n')
    with pytest.raises(UsageError, match=r"unknown section \[notfy\]"):
        notify_config(config_file=bad)


def test_ingest_notify_on_the_command_line_and_from_a_config_file(tmp_path, receiver):
    runner = CliRunner()
    nfs = _copy(tmp_path / "nfs", "job-223715", 0)
    lake = tmp_path / "lake"
    result = runner.invoke(app, ["ingest", str(nfs), "--lake", str(lake), "-q", "--workers", "1",
                                 "--notify", receiver.url, "--notify-on", "hang,mismatch",
                                 "--public-url", "https://frlake.example.com"])
    assert result.exit_code == 0, result.output
    assert [g.json["url"] for g in receiver.accepted] == ["https://frlake.example.com/jobs/job-223715/attempts/0"]
    config = tmp_path / "frlake.toml"
    config.write_text(f'[notify]\nurl = "{receiver.url}"\non = ["hang"]\nsecret = "k"\n')
    result = runner.invoke(app, ["ingest", str(_copy(tmp_path / "more", "job-24fdd5", 0)), "--lake", str(lake),
                                 "-q", "--workers", "1", "--config", str(config)])
    assert result.exit_code == 0, result.output
    assert [g.json["job"] for g in receiver.accepted] == ["job-223715", "job-24fdd5"]
    got = receiver.accepted[-1]
    assert got.headers["x-frlake-signature"] == "sha256=" + hmac.new(b"k", got.body, hashlib.sha256).hexdigest()


def test_a_root_cause_its_own_dump_names_is_announced_partial_then_settled(fl, tmp_path, receiver):
    """Three of four ranks dumped and the mismatch is in their dumps: announced at once, saying it is partial;
    once the fourth dump comes, an update says it settled (the verdict and root cause unchanged)."""
    notifier = fl.notifier(_config(receiver))
    notifier.start()
    fl.ingest([_copy(tmp_path / "a", "job-457f71", 0, ["rank_0", "rank_1", "rank_2"])], ONE)
    notifier.run()
    (first,) = (g.json for g in receiver.accepted)
    assert (first["event"], first["verdict"], first["partial"]) == ("new", "mismatch", True)
    assert (first["ranks_dumped"], first["world_size"]) == (3, 4)
    assert first["text"].startswith("*frlake: mismatch suspected")
    assert "partial: 3 of 4 ranks dumped" in first["text"]
    assert set(first["timeline"]) == {"last_dump_at", "ingested_at", "diagnosed_at"}
    fl.ingest([_copy(tmp_path / "b", "job-457f71", 0)], ONE)
    notifier.run()
    notifier.run()  # nothing more: exactly once per revision
    _, update = (g.json for g in receiver.accepted)
    assert (update["event"], update["verdict"], update["partial"]) == ("update", "mismatch", False)
    assert update["changed"] == {"settled": {"was": "partial", "now": "complete"}}
    assert "changed: settled partial -> complete" in update["text"]
    t = fl.timeline("job-457f71", 0)  # what the attempt page shows
    assert t.dumped_at <= t.ingested_at <= t.diagnosed_at <= t.alerted_at


def test_a_rank_named_only_by_its_missing_dump_waits_for_the_attempt_to_settle(fl, tmp_path, receiver):
    """Rank 3's dump has not come yet: the partial diagnosis blames it (it is what the others wait for), but
    rank 1 is the root cause. Nothing is posted until the attempt settles; then the right rank is."""
    notifier = fl.notifier(_config(receiver))
    notifier.start()
    fl.ingest([_copy(tmp_path / "a", "job-223715", 0, ["rank_0", "rank_1", "rank_2"])], ONE)
    partial = fl.stored_diagnosis("job-223715", 0)
    assert partial.culprits[0].rank == 3 and partial.culprits[0].evidence == "no_dump"
    notifier.run()
    assert receiver.accepted == []
    fl.ingest([_copy(tmp_path / "b", "job-223715", 0)], ONE)  # the last dump lands: settled
    notifier.run()
    (alert,) = (g.json for g in receiver.accepted)
    assert (alert["verdict"], alert["root_cause"]["rank"], alert["partial"]) == ("hang", 1, False)
