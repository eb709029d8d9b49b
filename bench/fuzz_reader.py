"""The compiled reader against the reference, on mutated real dumps.

    python bench/fuzz_reader.py [--cases 100000] [--seed 0] [--show 20] [--out FILE]

Each case takes a pickle that torch wrote (tests/fixtures/genuine and tests/corpus), changes one to three of
its opcodes the way a damaged or hostile file would (an int written as a float, a bool, None, a string or a
LONG; a string as an int, bytes that are not UTF-8 or a lone surrogate; a memo index moved; a value wrapped in
lists many levels deep; a float as an int; a byte flipped), and reads the result twice: through the fast
reader (frlake/ingest/_fastpickle.pyx with the compiled passes) and through the reference (the safe
unpickler and the parser's Python passes). Both must give the same rows or the same named rejection (reason
and message); a crash of either is a finding too, and so is anything either writes to stderr (at the file
descriptor: CPython's own "SystemError: ..." prints, a C library's messages) or raises where it cannot be
raised (sys.unraisablehook: an exception in a destructor). Every finding is printed with the case's seed,
so `--replay SEED` reproduces it; each one found becomes a test (tests/test_fastpickle.py,
tests/test_safety.py).

To run it under AddressSanitizer, build the extension with it and preload the runtime:

    CFLAGS="-fsanitize=address -fno-omit-frame-pointer" LDFLAGS=-fsanitize=address \\
        .venv/bin/python setup.py build_ext --inplace --force
    LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \\
        .venv/bin/python bench/fuzz_reader.py --cases 20000
"""

from __future__ import annotations

import argparse
import json
import os
import pickletools
import random
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

_INTS = {"BININT", "BININT1", "BININT2", "LONG1"}
_STRINGS = {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8"}
_GETS = {"BINGET", "LONG_BINGET"}
_PUTS = {"BINPUT", "LONG_BINPUT"}


def _text(raw: bytes) -> bytes:
    return b"X" + struct.pack("<I", len(raw)) + raw


def _long(value: int) -> bytes:
    raw = value.to_bytes((value.bit_length() + 8) // 8 or 1, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _int(value: int) -> bytes:
    return b"K" + bytes([value]) if 0 <= value < 256 else b"J" + struct.pack("<i", value) \
        if -2**31 <= value < 2**31 else _long(value)


def _mutations(name: str, arg, raw: bytes, rng: random.Random) -> list[bytes]:
    """What the opcode ``name`` (its bytes ``raw``) may become."""
    if name in _INTS:
        return [b"G" + struct.pack(">d", float(arg)), b"G" + struct.pack(">d", arg + 0.5), _long(arg),
                b"\x88", b"\x89", b"N", _text(str(arg).encode()), _int(-arg - 1), _long(2**63 + arg),
                _long(-(2**63) - 1)]
    if name in _STRINGS:
        return [_int(len(arg)), _text(b"\xff\xfe" + arg.encode("utf-8", "surrogatepass")),
                _text("\ud800".encode("utf-8", "surrogatepass")), _text(b"\xc0\xaf"), _text(b"\xed\xa0\x80"),
                _text(arg.encode("utf-8", "surrogatepass")[:-1] + b"\xe2\x82"), b"N", b"\x88",
                b"G" + struct.pack(">d", 1.5), _text(("\U0001f600" * 3).encode())]
    if name in _GETS:
        return [b"h" + bytes([rng.randrange(256)]), b"j" + struct.pack("<I", rng.randrange(1 << 20)),
                b"h" + bytes([max(0, arg - 1)]), b"j" + struct.pack("<I", arg + 1)]
    if name in _PUTS:
        return [b"q" + bytes([rng.randrange(256)]), b"r" + struct.pack("<I", rng.randrange(1 << 16)), b""]
    if name == "BINFLOAT":
        return [_int(int(arg)) if arg == arg and abs(arg) < 2**62 else b"K\x00", b"N", _text(b"1.0"),
                b"G" + struct.pack(">d", float("nan")), b"G" + struct.pack(">d", float("inf"))]
    if name in ("NEWTRUE", "NEWFALSE", "NONE"):
        return [b"K\x01", b"G" + struct.pack(">d", 1.0), _text(b"true"), b"N", b"\x88"]
    return []


def _wrap(raw: bytes, depth: int) -> bytes:
    """A value inside ``depth`` lists."""
    return b"]" * depth + raw + b"a" * depth


def mutate(data: bytes, rng: random.Random) -> bytes:
    ops = list(pickletools.genops(data))
    bounds = [(op.name, arg, pos, (ops[i + 1][2] if i + 1 < len(ops) else len(data)))
              for i, (op, arg, pos) in enumerate(ops)]
    out = bytearray(data)
    edits = []
    for _ in range(rng.randint(1, 3)):
        name, arg, start, end = rng.choice(bounds)
        kind = rng.random()
        if kind < 0.8:
            choices = _mutations(name, arg, data[start:end], rng)
            if not choices:
                continue
            edits.append((start, end, rng.choice(choices)))
        elif kind < 0.9 and (name in _INTS or name in _STRINGS or name == "BINFLOAT"):
            edits.append((start, end, _wrap(data[start:end], rng.choice((2, 30, 200, 3000)))))
        else:
            at = rng.randrange(len(data))
            edits.append((at, at + 1, bytes([rng.randrange(256)])))
    for start, end, new in sorted(edits, reverse=True):  # from the end: earlier offsets stay right
        if any(s < end and start < e for s, e, _ in edits if (s, e) != (start, end)):
            continue  # overlapping edits: keep the later ones only
        out[start:end] = new
    return bytes(out)


def templates() -> list[bytes]:
    """Small pickles torch wrote: the genuine fixtures' and a few of the corpus' (smallest first)."""
    paths = [p for p in (ROOT / "tests" / "fixtures" / "genuine").rglob("rank_*") if p.suffix != ".json"]
    paths += sorted((p for p in (ROOT / "tests" / "corpus").rglob("rank_*") if p.suffix != ".json"),
                    key=lambda p: p.stat().st_size)[:20]
    return [p.read_bytes() for p in sorted(paths)]


class Noise:
    """What the cases write to stderr or raise unraisably: fd 2 goes to a file for the run, and
    :meth:`since` says what came after the last look."""

    def __enter__(self):
        self.unraisable: list[str] = []
        self.file = tempfile.TemporaryFile()
        sys.stderr.flush()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        self.seen = 0
        self.hook, sys.unraisablehook = sys.unraisablehook, lambda u: self.unraisable.append(
            f"unraisable {type(u.exc_value).__name__}: {u.exc_value}")
        return self

    def since(self) -> str:
        sys.stderr.flush()
        size = os.fstat(self.file.fileno()).st_size
        text = ""
        if size > self.seen:
            self.file.seek(self.seen)
            text = self.file.read(size - self.seen).decode(errors="replace")
            self.seen = size
        text += "".join(self.unraisable)
        self.unraisable.clear()
        return text

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        sys.unraisablehook = self.hook
        self.file.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--replay", type=int, default=None, help="run the one case of this seed and print both outcomes")
    ap.add_argument("--show", type=int, default=20, help="differences printed in full")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "fuzz_reader.json")
    a = ap.parse_args()
    from frlake.ingest import columns
    from frlake.ingest.limits import Limits
    from tests.test_fastpickle import _memory_cap, _outcome

    if columns._fastpickle is None:
        sys.exit("frlake was built without a C compiler: there is no fast reader to compare")
    pool = templates()
    limits = Limits()
    print(f"fast reader: {columns._fastpickle.__file__}", flush=True)

    def case(seed: int):
        rng = random.Random(seed)
        data = mutate(rng.choice(pool), rng)
        with _memory_cap():
            fast = _outcome(data, limits, native=True)
            reference = _outcome(data, limits, native=False)
        return data, fast, reference

    if a.replay is not None:
        data, fast, reference = case(a.replay)
        print(f"{len(data)} bytes\nfast:      {str(fast)[:2000]}\nreference: {str(reference)[:2000]}")
        return
    started = time.perf_counter()
    differences, noisy, verdicts = [], [], {}
    with Noise() as noise:
        for i in range(a.cases):
            seed = a.seed * 10_000_000 + i
            _, fast, reference = case(seed)
            verdict = fast[1] if fast[0] == "rejected" else "parsed"
            verdicts[verdict] = verdicts.get(verdict, 0) + 1
            if fast != reference:
                differences.append(seed)
                if len(differences) <= a.show:
                    print(f"seed {seed}: fast {str(fast)[:300]}\n          reference {str(reference)[:300]}",
                          flush=True)
            said = noise.since()
            if said:
                noisy.append(seed)
                if len(noisy) <= a.show:
                    print(f"seed {seed}: wrote to stderr or raised unraisably: {said.strip()[:300]}", flush=True)
    seconds = time.perf_counter() - started
    print(f"{a.cases} cases from {len(pool)} real pickles in {seconds:.0f} s: {len(differences)} differences, "
          f"{len(noisy)} with stderr output or unraisable exceptions, 0 crashes (a crash ends the run); "
          f"outcomes {dict(sorted(verdicts.items()))}")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"cases": a.cases, "seed": a.seed, "templates": len(pool), "seconds": round(seconds),
                                 "differences": differences, "noisy": noisy, "outcomes": verdicts}, indent=1) + "\n")
    if differences or noisy:
        sys.exit(1)


if __name__ == "__main__":
    main()
