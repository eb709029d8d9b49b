"""Dumps as fleets keep them: flat folders with no host in the path, and hosts from the files beside them
(frlake.ingest.hostmaps): rank -> host tables, hostfiles, Slurm's environment, scontrol and sacct output,
torchrun's failure summary. A dump is never rejected for its host alone; two sources that disagree are
named in the diagnosis."""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from frlake.errors import DumpRejected
from frlake.ingest import IngestOptions, hostmaps
from frlake.session import Frlake
from tests.helpers import FIXTURES

GENUINE = FIXTURES / "genuine"
SLURM = FIXTURES / "hostmaps"


def _tree(dst: Path) -> dict[tuple[str, str], dict[int, str]]:
    """Every genuine case in frlake's host-folder layout under ``dst``; each attempt's rank -> host."""
    hosts: dict[tuple[str, str], dict[int, str]] = {}
    for p in sorted(GENUINE.rglob("rank_*")):
        _, job, attempt, host, name = p.relative_to(GENUINE).parts
        (dst / job / attempt / host).mkdir(parents=True, exist_ok=True)
        shutil.copy(p, dst / job / attempt / host / name)
        hosts.setdefault((job, attempt), {})[int(name.split("_")[1].split(".")[0])] = host
    return hosts


def _flat(tree: Path, dst: Path, by_attempt: bool) -> None:
    """The same dumps with no host folder, named as torch's default prefix names them: one folder per
    attempt (``<job>-<attempt>/nccl_trace_rank_<r>``) or ``<job>/attempt-<n>/nccl_trace_rank_<r>``."""
    for p in tree.rglob("rank_*"):
        job, attempt, _, name = p.relative_to(tree).parts
        folder = dst / job / attempt if by_attempt else dst / f"{job}-{attempt}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, folder / f"nccl_trace_{name}")


def _verdicts(fl: Frlake, flat_names: bool = False) -> dict[str, tuple]:
    out = {}
    for job, attempt in fl.attempt_keys():
        d = fl.stored_diagnosis(job, attempt)
        out[job if flat_names else f"{job}-attempt-{attempt}"] = (d.verdict.value, [c.rank for c in d.culprits])
    return out


@pytest.fixture(scope="module")
def genuine_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostmaps")
    hosts = _tree(root / "tree")
    with Frlake.open(root / "lake-tree") as fl:
        fl.ingest([root / "tree"], IngestOptions(workers=1))
        verdicts = _verdicts(fl)
        hosts_of = {(j, a): {c.rank: c.host for c in fl.stored_diagnosis(j, a).culprits} for j, a in fl.attempt_keys()}
    return root, hosts, verdicts, hosts_of


def test_a_flat_folder_per_attempt_ingests_whole_and_diagnoses_as_its_host_folders(genuine_tree):
    root, _, verdicts, _ = genuine_tree
    _flat(root / "tree", root / "flat", by_attempt=False)
    with Frlake.open(root / "lake-flat") as fl:
        summary = fl.ingest([root / "flat"], IngestOptions(workers=1))
        assert (summary.rejected, summary.ingested) == (0, 173)
        assert _verdicts(fl, flat_names=True) == verdicts
        d = fl.stored_diagnosis("dead-rank-attempt-0", 0)
        assert {c.host for c in d.culprits} == {None}
        flaky = fl.report("flaky-hosts")
        assert list(flaky) == [] and flaky.coverage == {"attempts": 30, "hosts_known": 0, "share": 0.0}
        assert flaky.coverage_words().startswith("hosts known for 0% of the attempts in the window (0 of 30)")
        assert d.hosts_known == {"ranks": 7, "known": 0, "from": {}}
        assert any(n.startswith("host unknown for 7 of 7 dumped ranks") for n in d.notes)
        assert "an unknown host" in d.summary
        con = fl.connect()
        assert con.execute("SELECT count(*) FROM dumps WHERE host IS NULL").fetchone()[0] == 173


def _write_maps(folder: Path, hosts: dict[int, str], kind: str) -> None:
    """A host map of ``kind`` for one attempt. Ranks no dump names a host for (they left none) take their
    block-mate's (the fixtures' jobs placed two ranks a host)."""
    ranks = range(max(hosts) + 1)
    full = {r: hosts.get(r) or hosts.get(r ^ 1) for r in ranks}  # two ranks a host: 0-1, 2-3, ...
    runs: list[list] = []
    for r in ranks:
        if runs and runs[-1][0] == full[r]:
            runs[-1][1] += 1
        else:
            runs.append([full[r], 1])
    if kind == "csv":
        (folder / "hosts.csv").write_text("rank,host\n" + "".join(f"{r},{h}\n" for r, h in full.items()))
    elif kind == "json":
        (folder / "hosts.json").write_text(json.dumps([{"rank": r, "host": h} for r, h in full.items()]))
    elif kind == "hostfile":
        (folder / "hostfile").write_text("# written by the job\n" + "".join(f"{h} slots={n}\n" for h, n in runs))
    elif kind == "slurm":
        (folder / "slurm.env").write_text(
            f"SLURM_JOB_ID=4242\nSLURM_JOB_NODELIST={','.join(h for h, _ in runs)}\n"
            f"SLURM_TASKS_PER_NODE={','.join(str(n) for _, n in runs)}\nSLURM_NTASKS={len(full)}\n")


@pytest.mark.parametrize("kind", ["csv", "json", "hostfile", "slurm"])
def test_hosts_beside_flat_dumps_name_the_culprits_hosts_as_host_folders_do(genuine_tree, kind):
    root, hosts, verdicts, hosts_of = genuine_tree
    flat = root / f"flat-{kind}"
    _flat(root / "tree", flat, by_attempt=True)
    for (job, attempt), ranks in hosts.items():
        _write_maps(flat / job / attempt if kind != "slurm" else flat / job / attempt, ranks, kind)
    with Frlake.open(root / f"lake-{kind}") as fl:
        summary = fl.ingest([flat], IngestOptions(workers=1))
        assert (summary.rejected, summary.ingested, summary.host_maps) == (0, 173, 30)
        assert _verdicts(fl) == verdicts
        for (job, attempt), expected in hosts_of.items():
            d = fl.stored_diagnosis(job, attempt)
            assert {c.rank: c.host for c in d.culprits} == expected, (job, attempt)
            assert d.host_disputes == []
            assert d.hosts_known["known"] == d.hosts_known["ranks"]
        con = fl.connect()
        assert con.execute("SELECT count(*) FROM dumps WHERE host IS NULL").fetchone()[0] == 0


def test_host_reports_over_flat_dumps_with_a_host_map_equal_those_over_host_folders(genuine_tree):
    """flaky-hosts, drain and causes row for row: the dumps flat with a hosts.csv beside them, against the
    same dumps in host folders with the same map (against folders without it, the map knows more: the host
    of a rank that left no dump, which the folders only infer from its neighbours)."""
    root, hosts, _, _ = genuine_tree
    folders, flat = root / "reports-folders", root / "reports-flat"
    shutil.copytree(root / "tree", folders)
    _flat(root / "tree", flat, by_attempt=True)
    for (job, attempt), ranks in hosts.items():
        _write_maps(folders / job / attempt, ranks, "csv")
        _write_maps(flat / job / attempt, ranks, "csv")
    reports = {}
    for name, tree in (("folders", folders), ("flat", flat)):
        with Frlake.open(root / f"lake-reports-{name}") as fl:
            fl.ingest([tree], IngestOptions(workers=1))
            reports[name] = {r: [dict(row) for row in fl.report(r)] for r in ("flaky-hosts", "causes", "drain")}
    for r in ("flaky-hosts", "causes"):
        assert reports["flat"][r] == reports["folders"][r], r
    # the drain score decays with the report's own clock: the two lakes are reported moments apart
    assert [(d["host"], d["action"], round(d["score"], 2)) for d in reports["flat"]["drain"]] == \
        [(d["host"], d["action"], round(d["score"], 2)) for d in reports["folders"]["drain"]]
    assert len(reports["flat"]["causes"]) == 14 and len(reports["flat"]["flaky-hosts"]) == 4


def test_sources_that_disagree_are_both_named(tmp_path):
    tree = {}
    for p in sorted((GENUINE / "straggler" / "straggler" / "attempt-0").rglob("rank_*")):
        tree[int(p.name.split("_")[1].split(".")[0])] = p
    folder = tmp_path / "nfs" / "straggler" / "attempt-0"
    folder.mkdir(parents=True)
    for r, p in tree.items():
        shutil.copy(p, folder / f"nccl_trace_rank_{r}")
    (folder / "hosts.csv").write_text("".join(f"{r},node-{r // 2}\n" for r in sorted(tree)))
    (folder / "hostfile").write_text("node-0 slots=2\nnode-1 slots=2\nnode-9 slots=2\nnode-3 slots=2\n")
    with Frlake.open(tmp_path / "lake") as fl:
        assert fl.ingest([tmp_path / "nfs"], IngestOptions(workers=1)).rejected == 0
        d = fl.stored_diagnosis("straggler", 0)
    assert d.verdict.value == "straggler" and d.culprits[0].host == "node-2"  # the table outranks the hostfile
    disputed = {x["rank"]: x for x in d.host_disputes}
    assert sorted(disputed) == [4, 5]
    assert disputed[5]["host"] == "node-2" and disputed[5]["used"] == "table"
    assert {(c["source"], c["host"]) for c in disputed[5]["claims"]} == {("table", "node-2"), ("hostfile", "node-9")}
    assert any("the host sources disagree" in n and "hostfile says node-9" in n for n in d.notes)


def test_a_rewritten_file_is_another_snapshot_never_an_overwrite(tmp_path):
    src = GENUINE / "snapshots" / "snapshots" / "attempt-0"
    ranks = sorted(src.rglob("rank_*"))
    folder = tmp_path / "nfs" / "job"
    folder.mkdir(parents=True)
    name = folder / "nccl_trace_rank_0"
    with Frlake.open(tmp_path / "lake") as fl:
        shutil.copy(ranks[0], name)
        assert fl.ingest([tmp_path / "nfs"]).ingested == 1
        other = next(p for p in ranks if p.read_bytes() != ranks[0].read_bytes())
        shutil.copy(other, name)  # the same path, other bytes: torch's next dump of it
        assert fl.ingest([tmp_path / "nfs"]).ingested == 1
        con = fl.connect()
        assert con.execute("SELECT count(*), count(DISTINCT sha256) FROM dumps WHERE job = 'job'").fetchone() == (2, 2)
        assert len(list((tmp_path / "lake").rglob("raw/**/*"))) >= 2


@pytest.mark.parametrize("job", ["dead-rank", "dead-rank-healthy"])
def test_a_restarted_job_rewriting_its_flat_files_is_its_next_attempt(tmp_path, genuine_tree, job):
    """torch's default prefix names no attempt: a job restarted by torchelastic rewrites the same
    ``nccl_trace_rank_<r>`` files. The new processes' record ids start again, so each rewritten file starts
    attempt 1 (never a later snapshot of attempt 0), and both attempts are diagnosed as in their own folders."""
    _, _, verdicts, _ = genuine_tree
    folder = tmp_path / "nfs" / job
    folder.mkdir(parents=True)
    # the first run (torch 2.13.0), then the same job run again after an upgrade (torch 2.14.1): new processes
    runs = [GENUINE / "dead_rank" / job / "attempt-0",
            FIXTURES / "genuine-versions" / "2.14.1" / "dead_rank" / job / "attempt-0"]
    with Frlake.open(tmp_path / "lake") as fl:
        for run in runs:
            for p in sorted(run.rglob("rank_*")):
                (folder / f"nccl_trace_{p.name.removesuffix('.json')}").write_bytes(p.read_bytes())
            assert fl.ingest([tmp_path / "nfs"]).rejected == 0
        assert sorted(fl.attempt_keys()) == [(job, 0), (job, 1)]
        for attempt in (0, 1):  # each run diagnosed as the first run is in its own folder
            d = fl.stored_diagnosis(job, attempt)
            assert (d.verdict.value, [c.rank for c in d.culprits]) == verdicts[f"{job}-attempt-0"]
            assert d.ranks_dumped == sorted(int(p.name.split("_")[1].split(".")[0])
                                            for p in runs[attempt].rglob("rank_*"))
        # the same files read again: nothing moves
        again = fl.ingest([tmp_path / "nfs"])
        assert again.ingested == 0 and sorted(fl.attempt_keys()) == [(job, 0), (job, 1)]


def test_a_later_snapshot_of_a_running_job_stays_in_its_attempt(tmp_path):
    """The same processes dumping again (torch's on-demand dumps): record ids that only grow, the same first
    entry. A later snapshot of attempt 0, not a new attempt."""
    src = GENUINE / "snapshots" / "snapshots" / "attempt-0"
    by_rank: dict[str, list[Path]] = {}
    for p in sorted(src.rglob("rank_*")):
        by_rank.setdefault(p.name.split("_")[1].split(".")[0], []).append(p)
    folder = tmp_path / "nfs" / "snapshots"
    folder.mkdir(parents=True)
    with Frlake.open(tmp_path / "lake") as fl:
        for round_ in range(max(len(v) for v in by_rank.values())):
            for rank, paths in by_rank.items():
                if round_ < len(paths):
                    (folder / f"nccl_trace_rank_{rank}").write_bytes(paths[round_].read_bytes())
            fl.ingest([tmp_path / "nfs"])
        assert fl.attempt_keys() == [("snapshots", 0)]


# -- the parsers, on what each source writes ---------------------------------------------------------------------


def test_a_hostfile_deals_its_slots_in_rank_order():
    assert hostmaps.hostfile("# DeepSpeed\nworker-1 slots=2\nworker-2 slots=1\n\nworker-3\n") == {
        0: "worker-1", 1: "worker-1", 2: "worker-2", 3: "worker-3"}
    with pytest.raises(DumpRejected, match="slots 'x'"):
        hostmaps.hostfile("worker-1 slots=x\n")


def test_slurm_node_lists_tasks_per_node_and_distributions():
    assert hostmaps.deal("gpu-[001-002,017]", "2(x2),1", None, "block") == {
        0: "gpu-001", 1: "gpu-001", 2: "gpu-002", 3: "gpu-002", 4: "gpu-017"}
    assert hostmaps.deal("gpu-[001-002,017]", "2(x2),1", None, "cyclic") == {
        0: "gpu-001", 1: "gpu-002", 2: "gpu-017", 3: "gpu-001", 4: "gpu-002"}
    assert hostmaps.deal("tux[1-3]", None, "7", "block") == {r: f"tux{1 + (r >= 3) + (r >= 5)}" for r in range(7)}
    with pytest.raises(DumpRejected, match="lists 2 node"):
        hostmaps.deal("a,b", "1(x3)", None, "block")
    # srun(1) -m: three nodes of two CPUs, four tasks: block puts "tasks one and two on the first node, task
    # three on the second node, and task four on the third node"; cyclic "tasks one and four on the first node,
    # task two on the second node, and task three on the third node" (the node names are ours)
    assert hostmaps.deal("n[1-3]", None, "4", "block") == {0: "n1", 1: "n1", 2: "n2", 3: "n3"}
    assert hostmaps.deal("n[1-3]", None, "4", "cyclic") == {0: "n1", 1: "n2", 2: "n3", 3: "n1"}
    # sbatch(1) SLURM_TASKS_PER_NODE: "2(x3),1": "the first three nodes will each execute two tasks and the
    # fourth node will execute one task"
    assert hostmaps.deal("n[1-4]", "2(x3),1", None, "block") == {r: f"n{1 + r // 2}" for r in range(7)}


@pytest.mark.parametrize("name, expected", [
    ("slurm.env", {r: f"gpu-{1 + r // 4:03d}" for r in range(8)}),  # an sbatch script's `env | grep SLURM_`
    ("scontrol.txt", {r: f"gpu-{1 + r // 4:03d}" for r in range(8)}),  # scontrol show job 4242
    ("sacct.json", {0: "gpu-001", 1: "gpu-002", 2: "gpu-001", 3: "gpu-002"}),  # sacct --json -j 4242, cyclic step
])
def test_slurm_outputs_as_slurm_writes_them(name, expected):
    found = hostmaps.read(str(SLURM / name), (SLURM / name).read_bytes())
    assert (found.kind, found.hosts) == ("slurm", expected)


@pytest.mark.parametrize("name, expected", [
    # scontrol(1) EXAMPLES, `show job 71701`: one node and no task count (CPUs/Task=2 changes srun's one task a
    # node by what it does not say): every task ran on snowflake0, and rank 0 is the one it vouches for
    ("scontrol-doc.txt", {0: "snowflake0"}),
    # heterogeneous_jobs "Environment Variables", `srun --het-group=0,1 env` in `salloc -N1 : -N2`: srun's one
    # task a node, the components' tasks in order, the step's node list theirs together
    ("hetjob-doc.slurm.env", {0: "nid00001", 1: "nid00011", 2: "nid00012"}),
])
def test_slurm_outputs_as_slurms_documentation_shows_them(name, expected):
    found = hostmaps.read(str(SLURM / name), (SLURM / name).read_bytes())
    assert (found.kind, found.hosts) == ("slurm", expected)


def test_a_torchrun_failure_summary_names_each_failed_worker():
    text = (SLURM / "torchrun-job" / "attempt-0" / "torchrun.log").read_text()
    failures = {f.rank: f for f in hostmaps.torchrun_failures(text)}
    assert sorted(failures) == [0, 1, 2, 3]
    killed, raised = failures[1], failures[2]
    assert (killed.exitcode, killed.host, killed.local_rank, killed.root_cause) == (-9, "localhost", 1, True)
    assert raised.exitcode == -15 and not raised.root_cause and raised.error_file.endswith("/2/error.json")
    assert raised.message == "RuntimeError: injected: rank 2 raises before its sixth all_reduce"
    from frlake.entities import exit_words
    assert exit_words(-9).startswith("exit -9 (SIGKILL; the kernel's OOM killer")
    assert exit_words(-6).startswith("exit -6 (SIGABRT; the process aborted itself: the NCCL watchdog")
    assert exit_words(-11).startswith("exit -11 (SIGSEGV")
    assert exit_words(1, "RuntimeError: injected").endswith(": RuntimeError: injected")
    assert exit_words(-15, raised.message).endswith("): RuntimeError: injected: rank 2 raises before its sixth all_reduce")


def test_a_single_agents_log_places_the_workers_its_lines_carry_on_its_host():
    """torchrun prefixes each worker's output with ``[rank<N>]:``: a worker that printed and did not fail
    ran under the same agent, on the host its failure summary names. A log that names several hosts (a
    job's merged logs) places none that way."""
    real = (SLURM / "torchrun-job" / "attempt-0" / "torchrun.log").read_text()
    summary = real[real.index("====="):]
    one = "[rank6]: step 10 loss 1.25\n[rank7]: step 10 loss 1.24\n" + summary.replace("localhost", "gpu-c02")
    found = hostmaps.read("torchrun.log", one.encode())
    assert found.hosts[6] == found.hosts[7] == "gpu-c02"
    assert {f.rank for f in found.failures} == {0, 1, 2, 3}  # the summary's own ranks, as before
    assert hostmaps.read("torchrun.log", real.encode()).hosts == {0: "localhost", 1: "localhost", 2: "localhost",
                                                                  3: "localhost"}
    two = one.replace("host      : gpu-c02\n  rank      : 3", "host      : gpu-c03\n  rank      : 3")
    assert 6 not in hostmaps.read("torchrun.log", two.encode()).hosts


def test_a_rank_torchrun_saw_die_has_its_exit_in_the_diagnosis(tmp_path):
    shutil.copytree(SLURM / "torchrun-job", tmp_path / "nfs" / "torchrun-job")
    with Frlake.open(tmp_path / "lake") as fl:
        summary = fl.ingest([tmp_path / "nfs"])
        assert (summary.ingested, summary.rejected, summary.host_maps) == (2, 0, 1)
        d = fl.stored_diagnosis("torchrun-job", 0)
    assert d.hosts_known == {"ranks": 2, "known": 2, "from": {"torchrun": 2}}
    died = {f["rank"]: f for f in d.launcher_failures}
    assert died[1]["signal"] == "SIGKILL" and died[1]["exitcode"] == -9 and died[1]["root_cause"]
    by_rank = {c.rank: c for c in d.culprits}
    assert 1 in by_rank and by_rank[1].host == "localhost"
    assert by_rank[1].died["words"].startswith("died: exit -9 (SIGKILL")
    assert "the launcher says it died: exit -9" in by_rank[1].detail
    from frlake.notify.message import message
    body = message(d, revision=1)
    root = body["root_cause"]
    assert root["rank"] in (1, 2) and root["died"]["exitcode"] == died[root["rank"]]["exitcode"]
    assert f"rank {root['rank']} on localhost died: exit {root['died']['exitcode']} (SIG" in body["text"]


def test_a_death_is_timed_against_the_waiting_ranks_dumps_and_named_in_the_causes_call(tmp_path):
    folder = tmp_path / "nfs" / "torchrun-job"
    shutil.copytree(SLURM / "torchrun-job", folder)
    # the dumps' own times are their files' (a checkout's are the checkout's): the waiters dumped 40 s after
    # the launcher saw rank 1 die (at 09:57:08, its time read as UTC)
    at = datetime(2026, 12, 7, 9, 57, 48, tzinfo=UTC).timestamp()
    for rank in (0, 3):
        os.utime(folder / "attempt-0" / f"nccl_trace_rank_{rank}", (at, at))
    with Frlake.open(tmp_path / "lake") as fl:
        fl.ingest([tmp_path / "nfs"])
        d = fl.stored_diagnosis("torchrun-job", 0)
        (cause,) = fl.report("causes")
    root = next(c for c in d.culprits if c.rank == 1)
    assert root.died["seconds_before_dumps"] == 40.0
    assert root.died["words"].endswith(", 40 s before the ranks waiting for it wrote their dumps (the launcher's "
                                       "time read as UTC)")
    assert (cause["culprit_rank"], cause["culprit_exitcode"], cause["culprit_failed_at"]) == (
        d.culprits[0].rank, -9 if d.culprits[0].rank == 1 else -15, "2026-12-07_09:57:08")
    assert f"rank {d.culprits[0].rank} died, its launcher says: exit " in cause["why"]
    # a launcher in another time zone: the gap would be hours off, and is not given
    later = at + 5 * 3600
    for rank in (0, 3):
        os.utime(folder / "attempt-0" / f"nccl_trace_rank_{rank}", (later, later))
    with Frlake.open(tmp_path / "lake2") as fl:
        fl.ingest([tmp_path / "nfs"])
        root = next(c for c in fl.stored_diagnosis("torchrun-job", 0).culprits if c.rank == 1)
    assert "seconds_before_dumps" not in root.died and "wrote their dumps" not in root.died["words"]


def test_a_file_named_as_a_host_map_that_is_not_one_is_rejected_with_what_is_wrong(tmp_path):
    folder = tmp_path / "nfs" / "job" / "attempt-0"
    folder.mkdir(parents=True)
    shutil.copy(next((GENUINE / "straggler").rglob("rank_0*")), folder / "nccl_trace_rank_0")
    (folder / "hosts.csv").write_text("rank,host\n0\n")
    with Frlake.open(tmp_path / "lake") as fl:
        summary = fl.ingest([tmp_path / "nfs"])
    assert summary.ingested == 1 and summary.rejected == 1
    assert summary.rejected_files[0]["reason"] == "bad_host_map" and "line 2" in summary.rejected_files[0]["detail"]


def test_hosts_attached_after_the_fact_are_followed_and_can_be_undone(tmp_path):
    folder = tmp_path / "nfs" / "straggler"
    folder.mkdir(parents=True)
    for p in sorted((GENUINE / "straggler" / "straggler" / "attempt-0").rglob("rank_*")):
        shutil.copy(p, folder / f"nccl_trace_{p.name.split('.')[0]}")
    table = tmp_path / "hosts.csv"
    table.write_text("".join(f"{r},gpu-{r // 2}\n" for r in range(8)))
    from typer.testing import CliRunner

    from frlake.cli.main import app
    lake = str(tmp_path / "lake")
    with Frlake.open(lake) as fl:
        fl.ingest([tmp_path / "nfs"])
        assert fl.stored_diagnosis("straggler", 0).culprits[0].host is None
    run = CliRunner().invoke(app, ["--lake", lake, "hosts", "attach", str(table), "--job", "straggler"])
    assert run.exit_code == 0, run.output
    said = " ".join(run.output.split())  # as the terminal wraps it
    attach_id = said.split(" as ")[1].split()[0]
    assert "hosts known for 8 of 8 dumped ranks" in said
    with Frlake.open(lake) as fl:
        d = fl.stored_diagnosis("straggler", 0)
        assert d.culprits[0].host == "gpu-2" and d.hosts_known["from"] == {"attached": 8}
        flaky = fl.report("flaky-hosts")
        assert [r["host"] for r in flaky] == ["gpu-2"] and flaky.coverage["share"] == 1.0
        assert flaky.coverage_words() is None  # every attempt's hosts known: nothing to say
        again, _ = fl.attach_hosts(table, "straggler")  # the same map again: once
        assert again == attach_id and len(fl.catalog.dumps.attached()) == 1
    listed = CliRunner().invoke(app, ["--lake", lake, "hosts", "list", "-f", "json"])
    assert json.loads(listed.output)[0]["id"] == attach_id
    run = CliRunner().invoke(app, ["--lake", lake, "hosts", "detach", attach_id])
    assert run.exit_code == 0, run.output
    with Frlake.open(lake) as fl:
        assert fl.stored_diagnosis("straggler", 0).culprits[0].host is None
        assert fl.report("flaky-hosts") == []
        fl.attach_hosts(table, "straggler")
        fl.forget(job="straggler")
        con = fl.connect()
        assert con.execute("SELECT count(*) FROM dumps").fetchone()[0] == 0
        assert fl.catalog.dumps.attached() == []
    bad = CliRunner().invoke(app, ["--lake", lake, "hosts", "detach", "nope"])
    assert bad.exit_code == 1 and "no host map is attached with id 'nope'" in bad.output


def test_a_host_map_attached_through_the_api(tmp_path):
    folder = tmp_path / "nfs" / "straggler"
    folder.mkdir(parents=True)
    for p in sorted((GENUINE / "straggler" / "straggler" / "attempt-0").rglob("rank_*")):
        shutil.copy(p, folder / f"nccl_trace_{p.name.split('.')[0]}")
    import io

    from frlake.server import create_app
    from frlake.server.config import ServerConfig
    with Frlake.open(tmp_path / "lake") as fl:
        fl.ingest([tmp_path / "nfs"])
    from frlake.config import Settings
    client = create_app(ServerConfig(Settings.resolve(tmp_path / "lake"))).test_client()
    origin = {"Origin": "http://localhost"}
    table = "".join(f"{r},gpu-{r // 2}\n" for r in range(8)).encode()
    r = client.post("/api/host-maps", headers=origin, content_type="multipart/form-data",
                    data={"job": "straggler", "file": (io.BytesIO(table), "hosts.csv")})
    assert r.status_code == 200, r.get_json()
    body = r.get_json()
    assert body["attempts"][0]["hosts_known"]["known"] == 8 and "gpu-2" in body["attempts"][0]["summary"]
    assert [a["attach_id"] for a in client.get("/api/host-maps").get_json()["attached"]] == [body["attach_id"]]
    bad = client.post("/api/host-maps", headers=origin, content_type="multipart/form-data",
                      data={"job": "straggler", "file": (io.BytesIO(b"rank,host\n0\n"), "hosts.csv")})
    assert bad.status_code == 422 and bad.get_json()["error"]["code"] == "bad_host_map"
    gone = client.delete(f"/api/host-maps/{body['attach_id']}", headers=origin)
    assert gone.status_code == 200 and "gpu-2" not in gone.get_json()["attempts"][0]["summary"]
    assert client.delete(f"/api/host-maps/{body['attach_id']}", headers=origin).status_code == 404


def test_the_commands_say_an_unknown_host(tmp_path):
    folder = tmp_path / "nfs" / "strag"
    folder.mkdir(parents=True)
    for p in sorted((GENUINE / "straggler" / "straggler" / "attempt-0").rglob("rank_*")):
        shutil.copy(p, folder / f"nccl_trace_{p.name.split('.')[0]}")
    from typer.testing import CliRunner

    from frlake.cli.main import app
    lake = str(tmp_path / "lake")
    said = " ".join(CliRunner().invoke(app, ["--lake", lake, "ingest", str(tmp_path / "nfs")]).output.split())
    assert "rank 5 on an unknown host" in said and "?" not in said.split("root cause")[-1]
    said = " ".join(CliRunner().invoke(app, ["--lake", lake, "diagnose", "strag"]).output.split())
    assert "Root cause: rank 5 on an unknown host (straggler)" in said
    listed = json.loads(CliRunner().invoke(app, ["--lake", lake, "jobs", "-f", "json"]).output)
    assert [(r["root_cause"], r["hosts"]) for r in listed] == [("rank 5 on an unknown host (straggler)", [])]


def test_a_host_map_is_claimed_once_however_many_chunks_and_workers_read_its_dumps(tmp_path):
    folder = tmp_path / "nfs" / "straggler" / "attempt-0"
    folder.mkdir(parents=True)
    for p in sorted((GENUINE / "straggler" / "straggler" / "attempt-0").rglob("rank_*")):
        shutil.copy(p, folder / f"nccl_trace_{p.name.split('.')[0]}")
    (folder / "hosts.csv").write_text("".join(f"{r},node-{r // 2}\n" for r in range(8)))
    with Frlake.open(tmp_path / "lake") as fl:
        summary = fl.ingest([tmp_path / "nfs"], IngestOptions(workers=2, chunk_files=1))
        assert (summary.ingested, summary.host_maps, summary.rejected) == (8, 1, 0)
        claims, _ = fl.catalog.dumps.host_sources([("straggler", 0)])[("straggler", 0)]
        assert sorted((c["rank"], c["host"]) for c in claims) == [(r, f"node-{r // 2}") for r in range(8)]
        con = fl.connect()
        assert con.execute("SELECT count(*) FROM dumps WHERE host IS NULL").fetchone()[0] == 0
