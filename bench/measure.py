"""Run a command as a child process and measure its wall time and peak RSS."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time


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
