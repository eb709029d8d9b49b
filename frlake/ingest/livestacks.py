"""The torch debug server's periodic text files (``torch.distributed.debug``,
``start_debug_server(dump_dir=..., dump_interval=...)``).

Its PeriodicDumper writes ``<handler>_<YYYYmmdd_HHMMSS>.txt`` (the writer's
local time) every ``dump_interval`` seconds. Each file holds one block per
rank, headed ``=== Rank <i>: http://<host>:<port>/handler/<endpoint>? ===``
(a ``PARTIAL DATA: ...`` summary first when some rank did not answer):

- ``stacks_<ts>.txt``: each rank's ``faulthandler`` text (``Thread 0x... (most
  recent call first):`` then ``  File "f.py", line 12 in name``);
- ``pyspy_dump_<ts>.txt``: each rank's ``py-spy dump`` (``Thread 123 (idle):
  "MainThread"`` then ``    name (f.py:12)``);
- ``fr_trace_<ts>.txt`` (text tables torch derives from the per-rank dumps),
  ``wait_counters_<ts>.txt``, ``tcpstore_<ts>.txt``,
  ``torchcomms_health_check_<ts>.txt``: not read (see :data:`SKIPPED`).

The text is untrusted: it is decoded with replacement, and the number of
blocks, threads and frames is bounded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from frlake.errors import DumpRejected

LIVE_STACK_FILES = {"stacks": "faulthandler", "pyspy_dump": "py-spy"}
# The other handlers' files: text frlake does not read, skipped with the reason code "debug_server_text".
SKIPPED = ("fr_trace", "wait_counters", "tcpstore", "torchcomms_health_check")
_NAME = re.compile(r"^(?P<kind>stacks|pyspy_dump|fr_trace|wait_counters|tcpstore|torchcomms_health_check)"
                   r"_\d{8}_\d{6}\.txt$")
_HEADER = re.compile(r"^=== Rank (?P<rank>\d{1,9}): (?P<addr>\S*) ===\s*$")
_ADDR = re.compile(r"^[a-z]+://(?P<host>\[[^\]]*\]|[^:/]+)(?::\d+)?/")
_FH_THREAD = re.compile(r"^(?P<current>Current thread|Thread) (?P<id>0x[0-9a-fA-F]+) \(most recent call first\):")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<name>.*)$')
_PS_THREAD = re.compile(r'^Thread (?P<id>\S+)(?: \((?P<state>[^)]*)\))?(?:: "(?P<name>.*)")?\s*$')
_PS_FRAME = re.compile(r"^\s+(?P<name>\S.*?) \((?P<file>.*):(?P<line>\d+)\)\s*$")
MAX_BLOCKS = 1 << 16
MAX_THREADS = 4096
MAX_FRAMES = 512
MAX_FIELD = 4096


def debug_server_kind(path: str) -> str | None:
    """``stacks``, ``pyspy_dump``, a skipped handler's name, or None for any other file."""
    base = path.replace("\\", "/").rsplit("/", 1)[-1].rsplit("::", 1)[-1]
    m = _NAME.match(base) if len(base) < 128 else None
    return m.group("kind") if m else None


@dataclass
class Block:
    rank: int
    host: str | None
    threads: list[dict]  # thread, current, frames, error


def parse(data: bytes, kind: str) -> list[Block]:
    """The per-rank blocks of a ``stacks_*`` or ``pyspy_dump_*`` file."""
    text = data.decode("utf-8", "replace")
    if "\x00" in text:
        raise DumpRejected("unknown_encoding", "a debug server text file holds NUL bytes")
    blocks: list[Block] = []
    lines: list[str] = []
    current: Block | None = None

    def close() -> None:
        if current is not None:
            current.threads = _threads(lines, kind)
            blocks.append(current)

    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            close()
            if len(blocks) >= MAX_BLOCKS:
                raise DumpRejected("too_large", f"more than {MAX_BLOCKS:,} rank blocks in one file")
            a = _ADDR.match(m.group("addr"))
            host = a.group("host").strip("[]")[:255] if a else None
            current, lines = Block(int(m.group("rank")), host or None, []), []
        elif current is not None:
            lines.append(line)
    close()
    if not blocks:
        raise DumpRejected("not_flight_recorder",
                           "no '=== Rank <i>: <address> ===' block: not a torch debug server stacks file")
    return blocks


def _threads(lines: list[str], kind: str) -> list[dict]:
    thread_re, frame_re = (_FH_THREAD, _FH_FRAME) if kind == "stacks" else (_PS_THREAD, _PS_FRAME)
    threads: list[dict] = []
    for line in lines:
        t = thread_re.match(line)
        if t:
            if len(threads) >= MAX_THREADS:
                break
            if kind == "stacks":
                name, current = t.group("id"), t.group("current") == "Current thread"
            else:
                name = t.group("id") + (f' "{t.group("name")}"' if t.group("name") else "")
                name += f" ({t.group('state')})" if t.group("state") else ""
                current = False
            threads.append({"thread": name[:MAX_FIELD], "current": current, "frames": [], "error": None})
            continue
        f = frame_re.match(line)
        if f and threads and len(threads[-1]["frames"]) < MAX_FRAMES:
            threads[-1]["frames"].append({"name": f.group("name")[:MAX_FIELD], "filename": f.group("file")[:MAX_FIELD],
                                          "line": min(int(f.group("line")[:18]), 2**62)})
    if not threads:
        error = "\n".join(line for line in lines if line.strip())[:MAX_FIELD]
        threads.append({"thread": None, "current": False, "frames": [], "error": error or "no stack"})
    return threads


def rows(blocks: list[Block], kind: str, snapshot_ns: int | None, source_path: str, sha256: str) -> list[dict]:
    out = []
    for b in blocks:
        if b.rank >= 2**31:
            raise DumpRejected("out_of_range", f"rank {b.rank} is out of range")
        for i, t in enumerate(b.threads):
            out.append({"rank": b.rank, "host": b.host, "snapshot_ns": snapshot_ns, "source": LIVE_STACK_FILES[kind],
                        "source_path": source_path, "sha256": sha256, "thread_index": i, "thread": t["thread"], "current": t["current"],
                        "depth": len(t["frames"]), "frames": t["frames"], "error": t["error"]})
    return out
