"""Run torch's own Flight Recorder analyzer on a dump folder and parse what it says.

This is a test and benchmark harness, not product code: it lets us compare
frlake's diagnosis with the reference analyzer that ships with PyTorch
(``python -m torch.distributed.flight_recorder.fr_trace``, installed as the
``torchfrtrace`` console script). Studied and checked against torch 2.13.0
(CPU build).

Torch runs in a SUBPROCESS, always. Three reasons: the interpreter running
frlake's tests usually has no torch (give ``python=`` one that does, e.g.
``/tmp/torch-venv/bin/python``); the analyzer does a plain ``pickle.load`` of
every file, which executes code from an untrusted dump; and it calls
``sys.exit``/raises on bad input.

Command line we run
-------------------
``<python> -m torch.distributed.flight_recorder.fr_trace <folder> --prefix rank_ [extra_args...]``

* ``<folder>`` must hold one pickle per rank, ``rank_<r>``, for ONE attempt.
  The analyzer ``os.walk``s the folder recursively, but it infers the prefix
  per directory (a folder whose top level holds only host sub-folders fails
  with "Unable to automatically determine the common prefix") and it tries to
  read *every* file whose name contains the prefix, so ``rank_0.json`` crashes
  it (``int('0.json')``). Hence :func:`flatten_attempt`, which symlinks
  ``<attempt>/<host>/rank_<r>`` pickles into a private flat folder.
* ``--prefix rank_`` (``-p``): names the file prefix so torch does not have to
  guess it (its guess is a regex over the file names and gives up on mixed
  names). Files are matched with ``name.find(prefix)``, rank = the rest of the
  name as an int.
* Nothing else by default, so we measure torch as people run it:

  - no ``--allow-incomplete-ranks``: by default torch refuses (exit 1,
    ``AssertionError: Missing dump files from ranks {2}``) when a member of any
    group in ``pg_config`` has no dump. With the flag it goes on and, for each
    collective touching the missing rank, only says "We cannot decide what's
    wrong ... missed FR dumps from ranks ({2})". Pass it in ``extra_args`` to
    get that behaviour.
  - ``--mismatch_cap`` left at its default 10: torch counts findings per
    process group and, once one group exceeds the cap, logs "Too many
    mismatches ... aborting" and stops the WHOLE analysis (all groups).
  - no ``-j/--just_print_entries``: it only prints a rank-by-rank table of
    entries and exits 0, no diagnosis; in 2.13 it also crashes with
    ``NameError: name 'tabulate' is not defined`` unless the optional
    ``tabulate`` package is installed. ``--selected-ranks``, ``--pg-filters``
    and ``--print_stack_trace`` only work together with ``-j`` (torch asserts).
  - no ``-v/--verbose``: it dumps the whole groups / memberships / collectives
    / nccl-calls tables at DEBUG level (megabytes for a big job) and changes
    how ops are printed; nothing in it is needed to find culprits.
  - no ``-o/--output``: it pickles torch's flat DB (namedtuples from torch
    modules, so reading it back needs torch); more time, nothing we use.
  - no ``--transform-ft/--group-world-size``: torchft only.

Where the output goes
---------------------
Everything torch reports goes through the logger "Flight Recorder" to a
``logging.StreamHandler()``, i.e. to STDERR. Stdout stays empty. A healthy
attempt prints no finding at all. Stderr also carries noise we skip: torch's
"Failed to initialize NumPy" warning (2 lines) and "tabulate is not installed.
Proceeding without it.". On failure a Python traceback ends stderr; exit code 1.

Findings, one block per collective torch gives up matching (order = torch's
matching order, see "first rank" below)::

    Not all ranks joining collective, sequence number: 4       <- kind MISSING_RANKS
    internal record id: 9
    group info: 1:tp                                            <- "<pg name>:<pg desc>"
    collective: gloo:all_gather
    missing ranks: {1}                                          <- ranks that never enqueued it
    input sizes: [[64, 32]]
    output sizes: [[2, 64, 32]]
    world size: 2
    expected ranks: {0, 1}
    collective state: scheduled
    collective stack trace:
     all_gather at .../distributed_c10d.py:4280                 <- frames of the first rank's entry
    ...

    Collective sequence number: 2 has errors                    <- mismatch block
    ... (same header lines, no "missing ranks")
    error msg: Culprit rank 0; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: '[[64, 32]]' does not match found input sizes: '[[32, 32]]'

* ``error msg`` lists ``Culprit rank R; Error type: KIND[, detail]`` items
  joined by ", " (details contain commas too, so we split on the "Culprit
  rank" marker). KIND is a ``MatchState`` name: ``COLLECTIVE_TYPE_MISMATCH``,
  ``SIZE_OR_SYNTAX_MISMATCH`` (also any send/recv that does not pair up),
  ``COLLECTIVE_DTYPE_MISMATCH``, ``COLLECTIVE_STATE_MISMATCH``.
* "Input/output mismatch in the collective sequence number: N" (all_to_all
  numel check, with "total input numel"/"total output numel" lines) is kind
  ``INPUT_OUTPUT_NUMEL_MISMATCH``; it names no culprit.
* "We cannot decide what's wrong with this collective entry because we missed
  FR dumps from ranks ({2}) ..." (only with --allow-incomplete-ranks) is a
  finding of kind ``UNDECIDED_MISSING_DUMPS``; those ranks go to
  ``missing_dump_ranks``, not to ``missing_ranks``.
* "No errors found for this collective entry, There could be some other
  reasons why we see collective timeout." is kind ``NO_ERRORS_FOUND``.
* "Too many mismatches for process_group <hashed guid>: <desc> aborting" ends
  the analysis; kept in ``aborted_groups``.
* Coalesced-group matching also logs "Match"/"MISMATCH" followed by a table,
  "Rank N has an empty op list." and "Rank N does not have a coalesced end.";
  they are kept in ``notes``.

What "culprit" means to torch (read this before comparing)
----------------------------------------------------------
Torch matches greedily, starting from the FIRST rank in its dict of dumps,
which is the order ``os.walk``/``os.listdir`` returns the files (on ext4:
hash order, neither rank nor creation order). For a mismatch it compares every
other member against that first rank's entry and names as "Culprit rank" each
member that DIFFERS from it. So if the real culprit is the first rank, torch
names all its healthy peers instead (measured: the same size-mismatch attempt
gives "Culprit rank 0" or "Culprit rank 2" depending only on directory order).
We record that listing order in ``TorchVerdict.file_order``; its first element
is torch's reference rank. When several culprits are named in one "error msg"
their order comes from iterating a set of (rank, MatchInfo) whose hash depends
on object ids, so it is not reproducible run to run. "missing ranks" are
printed from a set of ints (ascending for small ranks). Torch ignores all
timestamps (it never sees a straggler) and, for gloo dumps (every entry stays
"scheduled"), can only see missing or mismatching entries. Plain (uncoalesced)
send/recv on a big group is matched like a collective of the whole group, so
every member other than the pair is named "Culprit rank ...;
SIZE_OR_SYNTAX_MISMATCH", ten times, and the cap then aborts the analysis
before the real hang is reached. A recv must be named ``recv <me><-<peer>``
as ProcessGroupNCCL writes it; ``recv <peer>-><me>`` crashes torch
(``ValueError: not enough values to unpack``).

Parsed fields
-------------
``culprit_ranks``: every "Culprit rank R", in output order, without repeats.
``missing_ranks``: every rank in a "missing ranks: {...}" line, in output
order, without repeats. ``mismatch_kinds``: finding kinds in first-seen order
(MISSING_RANKS, the MatchState names, INPUT_OUTPUT_NUMEL_MISMATCH). Per group
details are in ``findings`` (one dict per block) and ``groups`` (keyed by
torch's "group info" text, e.g. "1:tp"). ``named_rank`` is the single rank a
reader would take as torch's answer: the first culprit if any, else the first
"missing ranks" set if it has exactly one rank, else None.

``gave_up`` is True when torch exits non-zero or times out (it raised, e.g.
missing dump file, empty or incomplete ``pg_config`` -> ``KeyError`` in
``build_collectives``, a JSON file, a profiling name it cannot parse, mixed
versions, no files); ``reason`` is a short classification plus the exception
line. Findings printed before a crash are still parsed.

Time and memory
---------------
``seconds`` is wall time from spawn to reap (includes importing torch,
~1 s). ``peak_rss_mb`` is ``ru_maxrss`` of THAT child from ``os.wait4`` (Linux
reports KiB; converted to MiB). We do not use ``/usr/bin/time -v`` (not always
installed, and it mixes its report into stderr) nor ``getrusage(RUSAGE_CHILDREN)``
deltas (``ru_maxrss`` of RUSAGE_CHILDREN is the max over all children ever
reaped, so a delta is 0 when an earlier child was bigger). Importing torch alone
costs ~210 MB of RSS.

CLI: ``python -m tests.torch_fr ATTEMPT_DIR [--python P] [--no-raw] [-- FR_TRACE_FLAGS...]``
prints the verdict as JSON; ``--truth TRUTH.json CORPUS_DIR [--json]`` runs every
pickle attempt of a truth file and prints a table. ``--python`` defaults to
``$FRLAKE_TORCH_PYTHON``, else the running interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MODULE = "torch.distributed.flight_recorder.fr_trace"

__all__ = [
    "TorchVerdict",
    "flatten_attempt",
    "run_torch_analyzer",
    "run_torch_on_attempt",
    "parse_torch_output",
    "main",
]


@dataclass
class TorchVerdict:
    returncode: int | None
    seconds: float
    peak_rss_mb: float | None
    culprit_ranks: list[int] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    mismatch_kinds: list[str] = field(default_factory=list)
    raw_stdout: str = ""
    raw_stderr: str = ""
    gave_up: bool = False
    reason: str = ""
    # extras
    argv: list[str] = field(default_factory=list)
    file_order: list[int] = field(default_factory=list)  # ranks as torch lists them; [0] = its reference rank
    findings: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing_dump_ranks: list[int] = field(default_factory=list)
    aborted_groups: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    timed_out: bool = False

    @property
    def named_rank(self) -> int | None:
        """First culprit; else the only rank of the first 'missing ranks' set; else None."""
        if self.culprit_ranks:
            return self.culprit_ranks[0]
        for f in self.findings:
            if f["kind"] == "MISSING_RANKS" and f["missing_ranks"]:
                return f["missing_ranks"][0] if len(f["missing_ranks"]) == 1 else None
        return None

    def to_json(self, raw: bool = True) -> dict[str, Any]:
        d = asdict(self)
        d["named_rank"] = self.named_rank
        if not raw:
            d.pop("raw_stdout")
            d.pop("raw_stderr")
        return d


# --------------------------------------------------------------------------- flatten

_JSON_START = (b"{", b"[")


def _looks_like_pickle(path: Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    if not head or head[:1] in _JSON_START:
        return False
    return True  # protocol >= 2 starts with 0x80; older text protocols are let through for torch to judge


def flatten_attempt(attempt_dir: Path | str, dest: Path | str, *, prefix: str = "rank_") -> dict[int, Path]:
    """Symlink ``<attempt>/<host>/<prefix><r>`` (and ``<attempt>/<prefix><r>``) into ``dest/<prefix><r>``.

    Only files named exactly ``<prefix><int>`` whose content is not JSON are
    linked (``rank_3.json`` and JSON bodies are skipped). Returns {rank: source}.
    Raises ValueError when two files claim the same rank.
    """
    attempt_dir, dest = Path(attempt_dir), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    name_re = re.compile(re.escape(prefix) + r"(\d+)$")
    found: dict[int, Path] = {}
    candidates = [p for p in attempt_dir.iterdir() if p.is_file()]
    for sub in sorted(p for p in attempt_dir.iterdir() if p.is_dir()):
        candidates += [p for p in sub.iterdir() if p.is_file()]
    for p in sorted(candidates):
        m = name_re.fullmatch(p.name)
        if not m or not _looks_like_pickle(p):
            continue
        rank = int(m.group(1))
        if rank in found:
            raise ValueError(f"rank {rank} appears twice: {found[rank]} and {p}")
        found[rank] = p
    for rank in sorted(found):
        link = dest / f"{prefix}{rank}"
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to(found[rank].resolve())
    return found


# --------------------------------------------------------------------------- parse

_HDR_MISSING = re.compile(r"^Not all ranks joining collective, sequence number: (-?\d+)\s*$")
_HDR_ERRORS = re.compile(r"^Collective sequence number: (-?\d+) has errors\s*$")
_HDR_NUMEL = re.compile(r"^Input/output mismatch in the collective sequence number: (-?\d+)\s*$")
_UNDECIDED = re.compile(r"^We cannot decide what's wrong with this collective entry because we missed "
                        r"FR dumps from ranks \((.*?)\)")
_NO_ERRORS = re.compile(r"^No errors found for this collective entry")
_TOO_MANY = re.compile(r"^Too many mismatches for process_group (\S+): (.*) aborting\s*$")
_CULPRIT = re.compile(r"Culprit rank (-?\d+); Error type: ([A-Z_]+)")
_FIELD = re.compile(r"^(internal record id|group info|collective|missing ranks|total input numel|"
                    r"total output numel|input sizes|output sizes|world size|expected ranks|"
                    r"collective state|error msg|collective stack trace): ?(.*)$")
_NOISE = (
    "tabulate is not installed",
    "UserWarning: Failed to initialize NumPy",
    "cpu = _conversion_method_template",
)
_NOTE = re.compile(r"^(Match|MISMATCH) ?$|^Rank -?\d+ has an empty op list\.|^Rank -?\d+ does not have a coalesced end\.")


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def _add_unique(dst: list, items: Iterable) -> None:
    for x in items:
        if x not in dst:
            dst.append(x)


def parse_torch_output(stderr: str, stdout: str = "") -> dict[str, Any]:
    """Parse torch 2.13 fr_trace log text (stderr; stdout is searched too, it is normally empty)."""
    findings: list[dict[str, Any]] = []
    notes: list[str] = []
    aborted: list[str] = []
    missing_dumps: list[int] = []
    cur: dict[str, Any] | None = None
    in_stack = False

    def new(kind: str, seq: int | None) -> dict[str, Any]:
        f = {"kind": kind, "seq": seq, "record_id": None, "group": None, "collective": None,
             "state": None, "expected_ranks": [], "missing_ranks": [], "culprit_ranks": [],
             "errors": [], "frames": []}
        findings.append(f)
        return f

    lines = (stdout + "\n" + stderr).splitlines() if stdout else stderr.splitlines()
    for line in lines:
        s = line.rstrip("\n")
        m = _HDR_MISSING.match(s) or _HDR_ERRORS.match(s) or _HDR_NUMEL.match(s)
        if m:
            kind = ("MISSING_RANKS" if m.re is _HDR_MISSING else
                    "ERRORS" if m.re is _HDR_ERRORS else "INPUT_OUTPUT_NUMEL_MISMATCH")
            cur, in_stack = new(kind, int(m.group(1))), False
            continue
        m = _UNDECIDED.match(s)
        if m:
            f = new("UNDECIDED_MISSING_DUMPS", None)
            f["missing_dump_ranks"] = _ints(m.group(1))
            _add_unique(missing_dumps, f["missing_dump_ranks"])
            cur, in_stack = None, False
            continue
        if _NO_ERRORS.match(s):
            new("NO_ERRORS_FOUND", None)
            cur, in_stack = None, False
            continue
        m = _TOO_MANY.match(s)
        if m:
            aborted.append(f"{m.group(2)} ({m.group(1)})")
            cur, in_stack = None, False
            continue
        if _NOTE.match(s):
            notes.append(s.strip())
            cur, in_stack = None, False
            continue
        if cur is not None:
            m = _FIELD.match(s)
            if m:
                key, val = m.group(1), m.group(2).strip()
                in_stack = key == "collective stack trace"
                if key == "internal record id":
                    cur["record_id"] = int(val) if val.lstrip("-").isdigit() else val
                elif key == "group info":
                    cur["group"] = val
                elif key == "collective":
                    cur["collective"] = val
                elif key == "collective state":
                    cur["state"] = val
                elif key == "expected ranks":
                    cur["expected_ranks"] = _ints(val)
                elif key == "missing ranks":
                    cur["missing_ranks"] = _ints(val)
                elif key == "error msg":
                    ms = list(_CULPRIT.finditer(val))
                    for i, em in enumerate(ms):
                        end = ms[i + 1].start() if i + 1 < len(ms) else len(val)
                        detail = val[em.end():end].strip().lstrip(",").strip().rstrip(",").strip()
                        cur["errors"].append({"rank": int(em.group(1)), "kind": em.group(2), "detail": detail})
                        _add_unique(cur["culprit_ranks"], [int(em.group(1))])
                continue
            if in_stack:
                if s.startswith("Traceback (most recent call last)"):
                    cur, in_stack = None, False
                elif s.strip() and not any(n in s for n in _NOISE):
                    cur["frames"].append(s.strip())
                continue

    culprits: list[int] = []
    missing: list[int] = []
    kinds: list[str] = []
    groups: dict[str, dict[str, Any]] = {}
    for f in findings:
        _add_unique(culprits, f["culprit_ranks"])
        _add_unique(missing, f["missing_ranks"])
        if f["kind"] == "ERRORS":
            fkinds = [e["kind"] for e in f["errors"]] or ["ERRORS"]
        elif f["kind"] in ("MISSING_RANKS", "INPUT_OUTPUT_NUMEL_MISMATCH"):
            fkinds = [f["kind"]]
        else:
            fkinds = []
        _add_unique(kinds, fkinds)
        if f["group"] is not None:
            g = groups.setdefault(f["group"], {"culprit_ranks": [], "missing_ranks": [],
                                               "mismatch_kinds": [], "seqs": []})
            _add_unique(g["culprit_ranks"], f["culprit_ranks"])
            _add_unique(g["missing_ranks"], f["missing_ranks"])
            _add_unique(g["mismatch_kinds"], fkinds)
            g["seqs"].append(f["seq"])
    return {"findings": findings, "culprit_ranks": culprits, "missing_ranks": missing,
            "mismatch_kinds": kinds, "groups": groups, "missing_dump_ranks": missing_dumps,
            "aborted_groups": aborted, "notes": notes}


def _classify_failure(stderr: str) -> str:
    """Short label for why torch exited non-zero, plus its exception line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    in_loader = "in read_dump" in stderr or "in read_dir" in stderr
    checks = [
        (r"Missing dump files from ranks", "missing dump file(s)"),
        (r"Unable to automatically determine the common prefix", "no usable file names (prefix)"),
        (r"no files loaded from", "no dump files in folder"),
        (r"folder .* does not exist", "folder does not exist"),
        (r"UnpicklingError|invalid load key|pickle data was truncated|^EOFError", "not a (complete) pickle"),
        (r"has different version", "ranks have different FR versions"),
        (r"mismatch in (desc|membership) for group", "pg_config disagrees across ranks"),
        (r"^KeyError: \(", "process group not in pg_config (empty or incomplete pg_config)"),
        (r"^KeyError: '(entries|version|pg_config)'", "dump lacks a top-level key"),
        (r"^TypeError: list indices must be integers", "bare-list dump (torch <= 2.2 format)"),
        (r"name formatting error|is not a supported operation", "unsupported backend/op name"),
        (r"Invalid version", "unparseable version"),
        (r"NameError: name 'tabulate'", "needs the tabulate package (-j)"),
        (r"MemoryError", "out of memory"),
    ]
    for pat, label in checks:
        if re.search(pat, last):
            return f"{label}: {last}"
    if re.search(r"invalid literal for int\(\)|not enough values to unpack", last):
        label = ("file name is not <prefix><rank> (e.g. rank_0.json)" if in_loader
                 else "unparseable profiling_name (p2p 'send a->b' / 'recv a<-b')")
        return f"{label}: {last}"
    return last or "no output"


# --------------------------------------------------------------------------- run

def _listing_ranks(folder: Path, prefix: str) -> list[int]:
    out = []
    try:
        names = os.listdir(folder)  # same order as the os.walk torch does
    except OSError:
        return out
    for n in names:
        off = n.find(prefix)
        if off != -1 and n[off + len(prefix):].isdigit():
            out.append(int(n[off + len(prefix):]))
    return out


def run_torch_analyzer(
    folder: Path | str,
    *,
    prefix: str = "rank_",
    python: str = sys.executable,
    timeout: float = 600,
    extra_args: Sequence[str] = (),
) -> TorchVerdict:
    """Run ``python -m torch.distributed.flight_recorder.fr_trace FOLDER --prefix PREFIX *extra_args``.

    FOLDER must be flat: ``FOLDER/<prefix><rank>`` pickles of one attempt
    (use :func:`flatten_attempt`). Never raises for torch's failures: they
    come back as ``gave_up=True`` with a ``reason``.
    """
    folder = Path(folder)
    argv = [python, "-m", MODULE, str(folder), "--prefix", prefix, *extra_args]
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    with tempfile.TemporaryFile() as out_f, tempfile.TemporaryFile() as err_f:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f,
                                env=env, start_new_session=True)
        killed = threading.Event()

        def _kill() -> None:
            killed.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, _kill)
        timer.start()
        try:
            while True:
                try:
                    _, status, ru = os.wait4(proc.pid, 0)
                    break
                except InterruptedError:
                    continue
        finally:
            timer.cancel()
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out_f.seek(0)
        err_f.seek(0)
        stdout = out_f.read().decode("utf-8", "replace")
        stderr = err_f.read().decode("utf-8", "replace")

    kib = ru.ru_maxrss if sys.platform != "darwin" else ru.ru_maxrss / 1024
    parsed = parse_torch_output(stderr, stdout)
    v = TorchVerdict(
        returncode=proc.returncode,
        seconds=round(seconds, 3),
        peak_rss_mb=round(kib / 1024, 1),
        culprit_ranks=parsed["culprit_ranks"],
        missing_ranks=parsed["missing_ranks"],
        mismatch_kinds=parsed["mismatch_kinds"],
        raw_stdout=stdout,
        raw_stderr=stderr,
        argv=argv,
        file_order=_listing_ranks(folder, prefix),
        findings=parsed["findings"],
        groups=parsed["groups"],
        missing_dump_ranks=parsed["missing_dump_ranks"],
        aborted_groups=parsed["aborted_groups"],
        notes=parsed["notes"],
        timed_out=killed.is_set(),
    )
    if v.timed_out:
        v.gave_up, v.reason = True, f"timeout after {timeout:g} s (killed)"
    elif proc.returncode != 0:
        v.gave_up, v.reason = True, _classify_failure(stderr)
        m = re.search(r"^AssertionError: Missing dump files from ranks (\{[^}]*\})", stderr, re.M)
        if m:
            _add_unique(v.missing_dump_ranks, _ints(m.group(1)))
    return v


def run_torch_on_attempt(attempt_dir: Path | str, **kwargs: Any) -> TorchVerdict:
    """Flatten ``attempt_dir`` into a temp folder, run torch on it, remove the folder."""
    prefix = kwargs.get("prefix", "rank_")
    tmp = Path(tempfile.mkdtemp(prefix="torch-fr-"))
    try:
        flat = tmp / "flat"
        flatten_attempt(attempt_dir, flat, prefix=prefix)
        return run_torch_analyzer(flat, **kwargs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------- CLI

def _truth_table(truth_path: Path, corpus: Path, python: str, timeout: float,
                 extra: Sequence[str]) -> list[dict[str, Any]]:
    rows = []
    for t in json.loads(truth_path.read_text()):
        if t.get("format", "pickle") != "pickle":
            continue
        adir = corpus / t["job"] / f"attempt-{t['attempt']}"
        v = run_torch_on_attempt(adir, python=python, timeout=timeout, extra_args=extra)
        truth = t.get("culprit_rank")
        named = v.named_rank
        if v.gave_up:
            outcome = "gave up"
        elif truth is None:
            outcome = "right (nothing named)" if not (v.culprit_ranks or v.missing_ranks) else "wrong (false alarm)"
        elif named == truth:
            outcome = "right"
        elif not (v.culprit_ranks or v.missing_ranks):
            outcome = "wrong (nothing named)"
        else:
            outcome = "wrong"
        rows.append({"job": t["job"], "attempt": t["attempt"], "scenario": t["scenario"],
                     "truth": truth, "culprits": v.culprit_ranks, "missing": v.missing_ranks,
                     "kinds": v.mismatch_kinds, "groups": sorted(v.groups), "named": named,
                     "first_listed": v.file_order[:1], "gave_up": v.gave_up, "reason": v.reason,
                     "outcome": outcome, "seconds": v.seconds, "peak_rss_mb": v.peak_rss_mb})
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.torch_fr", description=__doc__.splitlines()[0])
    ap.add_argument("attempt_dir", nargs="?", help="<job>/attempt-<n> folder (host sub-folders or flat)")
    ap.add_argument("--python", default=os.environ.get("FRLAKE_TORCH_PYTHON", sys.executable),
                    help="interpreter that has torch (default $FRLAKE_TORCH_PYTHON or this one)")
    ap.add_argument("--prefix", default="rank_")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--no-raw", action="store_true", help="omit raw_stdout/raw_stderr from the JSON")
    ap.add_argument("--truth", nargs=2, metavar=("TRUTH_JSON", "CORPUS_DIR"),
                    help="run every pickle attempt of a truth file; print a table (JSON with --json)")
    ap.add_argument("--json", action="store_true", help="with --truth: print rows as JSON")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:  # everything after "--" goes to fr_trace, e.g. -- --allow-incomplete-ranks
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    a = ap.parse_args(argv)
    if a.truth:
        rows = _truth_table(Path(a.truth[0]), Path(a.truth[1]), a.python, a.timeout, extra)
        if a.json:
            print(json.dumps(rows, indent=1))
            return 0
        hdr = f"{'job':11} {'att':>3} {'scenario':15} {'truth':>5} {'culprits':14} {'missing':10} {'gave up / reason':40} {'outcome':22} {'s':>5}"
        print(hdr)
        for r in rows:
            why = r["reason"][:40] if r["gave_up"] else ""
            print(f"{r['job']:11} {r['attempt']:>3} {r['scenario']:15} {str(r['truth']):>5} "
                  f"{str(r['culprits']):14} {str(r['missing']):10} {why:40} {r['outcome']:22} {r['seconds']:5.2f}")
        return 0
    if not a.attempt_dir:
        ap.error("ATTEMPT_DIR or --truth is required")
    v = run_torch_on_attempt(a.attempt_dir, prefix=a.prefix, python=a.python, timeout=a.timeout,
                             extra_args=extra)
    print(json.dumps(v.to_json(raw=not a.no_raw), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
