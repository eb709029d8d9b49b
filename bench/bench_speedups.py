"""Does the compiled parser pass (``_speedups``) still pay for itself?

    python bench/bench_speedups.py [--world 32] [--entries 2000] [--repeat 3]

``_fastpickle`` reads most pickles straight into columns, so ``_speedups``
now runs only where it does not: JSON dumps, and pickles the fast reader
declines (then the safe unpickler makes Python objects and the parser walks
them). On the same synthetic dumps (bench/synth.py), in one run, this times
the parse of each dump (bytes to Arrow tables, ``frlake.ingest.parse``):

  * JSON dumps, with the compiled passes and with the Python reference;
  * pickles through the safe unpickler (``native=False``: what a declined
    pickle costs), with and without the compiled passes;
  * pickles through ``_fastpickle`` (what most pickles cost), for scale;
  * decoding alone, json.loads against orjson.loads (when orjson is
    installed: it is not a dependency; see bench/README.md for why).

Prints the seconds per dump, the ratios, and writes
bench/results/speedups.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from synth import write_job  # noqa: E402

from frlake.ingest import columns as entry_columns  # noqa: E402
from frlake.ingest import parse  # noqa: E402


def timed(fn, files: list[bytes], repeat: int) -> float:
    """The median over ``repeat`` runs of the seconds to parse every file, per file."""
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for data in files:
            fn(data)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs) / len(files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=32)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    compiled = entry_columns._speedups
    if compiled is None:
        sys.exit("frlake.ingest._speedups is not built: pip install -e . first")

    with tempfile.TemporaryDirectory() as tmp:
        dumps: dict[str, list[bytes]] = {}
        for fmt in ("pickle", "json"):
            write_job(f"{tmp}/{fmt}", args.world, args.entries, job="speedups", fmt=fmt)
            dumps[fmt] = [p.read_bytes() for p in sorted(Path(tmp, fmt).rglob("rank_*"))]

    def with_passes(on: bool, fn):
        def run(data: bytes):
            entry_columns._speedups = compiled if on else None
            try:
                return fn(data)
            finally:
                entry_columns._speedups = compiled
        return run

    cases = {
        "json+compiled": with_passes(True, parse.parse_bytes),
        "json+python": with_passes(False, parse.parse_bytes),
        "declined_pickle+compiled": with_passes(True, lambda d: parse.parse_bytes(d, native=False)),
        "declined_pickle+python": with_passes(False, lambda d: parse.parse_bytes(d, native=False)),
        "fastpickle": lambda d: parse.parse_bytes(d),
        "decode:json.loads": json.loads,
    }
    try:
        import orjson

        cases["decode:orjson.loads"] = orjson.loads
    except ImportError:
        pass
    # the same rows whichever way: a difference would make the timings meaningless
    for fmt, names in (("json", ["json+compiled", "json+python"]), ("pickle", [n for n in cases if "pickle" in n])):
        first = [cases[names[0]](d)[0].entries for d in dumps[fmt][:2]]
        for name in names[1:]:
            assert [cases[name](d)[0].entries for d in dumps[fmt][:2]] == first, name

    seconds = {}
    for name, fn in cases.items():
        seconds[name] = timed(fn, dumps["pickle" if "pickle" in name else "json"], args.repeat)
        print(f"{name:26s} {seconds[name] * 1000:8.1f} ms per dump", flush=True)
    ratios = {
        "json: python passes / compiled passes": seconds["json+python"] / seconds["json+compiled"],
        "declined pickle: python passes / compiled passes":
            seconds["declined_pickle+python"] / seconds["declined_pickle+compiled"],
        "declined pickle (compiled) / fastpickle": seconds["declined_pickle+compiled"] / seconds["fastpickle"],
    }
    if "decode:orjson.loads" in seconds:
        ratios["decode only: json.loads / orjson.loads"] = seconds["decode:json.loads"] / seconds["decode:orjson.loads"]
    for name, ratio in ratios.items():
        print(f"{name:50s} {ratio:5.2f}x")
    out = {"world": args.world, "entries_per_rank": args.entries, "repeat": args.repeat,
           "json_bytes_per_dump": round(statistics.mean(map(len, dumps["json"]))),
           "pickle_bytes_per_dump": round(statistics.mean(map(len, dumps["pickle"]))),
           "ms_per_dump": {k: round(v * 1000, 2) for k, v in seconds.items()},
           "ratios": {k: round(v, 2) for k, v in ratios.items()}}
    (HERE / "results" / "speedups.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
