"""Run a command as a child process and measure its wall time, CPU time and peak memory; check commits out
to measure them side by side."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@contextmanager
def checkouts(root: Path, work: Path, revs: dict[str, str]) -> Iterator[dict[str, Path]]:
    """Each of ``revs`` (a side's name: a commit) checked out of the repository at ``root`` into a git
    worktree ``work/<side>``, its compiled modules built in place (Cython: the test extra); the worktrees
    are removed after."""
    trees: dict[str, Path] = {}
    try:
        for side, rev in revs.items():
            trees[side] = work / side
            subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", "-q", str(trees[side]), rev],
                           check=True)
            if (trees[side] / "setup.py").exists():
                subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=trees[side],
                               check=True, capture_output=True)
        yield trees
    finally:
        for tree in trees.values():
            subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(tree)], capture_output=True)


def run_measured(cmd: list[str], env: dict | None = None, cwd: str | None = None) -> tuple[float, float, str, int]:
    """(seconds, peak RSS in MB of the child and its own children, stdout, exit code)."""
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    # ru_maxrss of wait4 covers the child; a pool's workers report through the child's own RUSAGE_CHILDREN
    return seconds, usage.ru_maxrss / 1024, text, proc.returncode


@dataclass
class TreeRun:
    """What :func:`run_tree_measured` saw of a command and every process it started."""

    seconds: float
    cpu_s: float  # user + sys of the whole tree: wait4's, or the sum over every process sampled, if larger
    peak_rss_mb: float  # the largest sum of RSS over the tree at one instant (counts shared pages twice)
    peak_pss_mb: float  # the same with PSS (shared pages split between the processes that share them)
    peak_one_mb: float  # ru_maxrss: the largest single process
    text: str
    code: int


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """utime + stime of one process (its own, not its children's)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def _memory_kb(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return rss, pss


def run_tree_measured(cmd: list[str], env: dict | None = None, cwd: str | None = None,
                      interval: float = 0.1) -> TreeRun:
    """Run ``cmd``; sample the memory and CPU time of it and all its
    descendants every ``interval`` seconds (a pool's workers are children of
    a forkserver, which wait4 of the command may never account for)."""
    peak = {"rss": 0, "pss": 0}
    cpu: dict[int, float] = {}
    done = threading.Event()
    with tempfile.TemporaryFile() as out:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)

        def sample() -> None:
            while not done.is_set():
                todo, tree = [proc.pid], []
                while todo:
                    p = todo.pop()
                    tree.append(p)
                    todo += _children(p)
                rss = pss = 0
                for p in tree:
                    r, s = _memory_kb(p)
                    rss, pss = rss + r, pss + s
                    cpu[p] = max(cpu.get(p, 0.0), _cpu_s(p))
                peak["rss"], peak["pss"] = max(peak["rss"], rss), max(peak["pss"], pss)
                done.wait(interval)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
        out.seek(0)
        text = out.read().decode(errors="replace")
    return TreeRun(seconds, max(usage.ru_utime + usage.ru_stime, sum(cpu.values())), peak["rss"] / 1024, peak["pss"] / 1024,
                   usage.ru_maxrss / 1024, text, os.waitstatus_to_exitcode(status))
