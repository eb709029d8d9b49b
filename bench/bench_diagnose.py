"""Diagnose benchmark: frlake against torch's analyzer on the same job.

    python bench/bench_diagnose.py [--world 1024] [--entries 2000] [--small 256]

Generates a faithful synthetic NCCL-style job (bench/synth.py) in which one
rank never enqueues the last collective of its group, then in one run:
  * frlake end to end: `frlake ingest --workers 2` (which diagnoses the
    attempts it touched) in a fresh process, from the dump folder;
  * frlake diagnose alone: `frlake diagnose` in a fresh process, on that lake;
  * torch's analyzer (`python -m torch.distributed.flight_recorder.fr_trace`)
    on the same pickles (flattened into one folder, as it needs);
and the peak RSS of each, also at --small ranks, to show how memory grows
with the number of ranks. Prints the ratios and writes bench/results/diagnose.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from measure import run_measured  # noqa: E402
from synth import write_job  # noqa: E402

from tests.torch_fr import run_torch_on_attempt  # noqa: E402

FRLAKE = [sys.executable, "-m", "frlake.cli.main"]


def one_size(work: Path, world: int, entries: int, culprit: int) -> dict:
    dumps = work / f"dumps-{world}"
    lake = work / f"lake-{world}"
    truth = write_job(dumps, world, entries, job="bench", fault="missing_last", culprit=culprit, ranks_per_host=8)
    out: dict = {"world": world, "entries_per_rank": entries, "culprit": culprit, "culprit_host": truth["culprit_host"]}

    seconds, peak, text, code = run_measured(FRLAKE + ["--lake", str(lake), "ingest", str(dumps), "--workers", "2",
                                                       "-f", "json"], cwd=str(ROOT))
    assert code == 0, text
    summary = json.loads(text[text.index("{"):])
    root = summary["diagnosed"][0]["culprits"][0]
    out.update(frlake_e2e_s=round(seconds, 2), frlake_e2e_peak_mb=round(peak), frlake_root=root["rank"],
               frlake_root_host=root["host"])

    seconds, peak, text, code = run_measured(FRLAKE + ["--lake", str(lake), "diagnose", "bench", "-f", "json"],
                                             cwd=str(ROOT))
    assert code == 0, text
    diag = json.loads(text[text.index("{"):])
    out.update(frlake_diagnose_s=round(seconds, 2), frlake_diagnose_peak_mb=round(peak),
               frlake_diagnose_core_s=diag["seconds"])

    v = run_torch_on_attempt(dumps / "bench" / "attempt-0", timeout=3600)
    out.update(torch_s=v.seconds, torch_peak_mb=v.peak_rss_mb, torch_named=v.named_rank, torch_gave_up=v.gave_up)
    out["speedup_e2e"] = round(v.seconds / out["frlake_e2e_s"], 1)
    out["speedup_diagnose"] = round(v.seconds / out["frlake_diagnose_s"], 1)
    shutil.rmtree(dumps, ignore_errors=True)
    shutil.rmtree(lake, ignore_errors=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=1024)
    ap.add_argument("--small", type=int, default=256)
    ap.add_argument("--entries", type=int, default=2000)
    ap.add_argument("--workdir", default="/tmp/frlake-bench-diagnose")
    args = ap.parse_args()
    work = Path(args.workdir)
    shutil.rmtree(work, ignore_errors=True)
    results = {"runs": [one_size(work, w, args.entries, culprit=w // 2 + 5) for w in (args.small, args.world)]}
    small, big = results["runs"]
    for r in results["runs"]:
        print(f"{r['world']} ranks x {r['entries_per_rank']} entries, culprit rank {r['culprit']} on {r['culprit_host']}")
        print(f"  torch's analyzer        {r['torch_s']:8.2f} s  peak {r['torch_peak_mb']:7.0f} MB  names rank {r['torch_named']}")
        print(f"  frlake ingest+diagnose  {r['frlake_e2e_s']:8.2f} s  peak {r['frlake_e2e_peak_mb']:7.0f} MB  "
              f"names rank {r['frlake_root']} on {r['frlake_root_host']}  ({r['speedup_e2e']}x faster)")
        print(f"  frlake diagnose alone   {r['frlake_diagnose_s']:8.2f} s  peak {r['frlake_diagnose_peak_mb']:7.0f} MB  "
              f"({r['speedup_diagnose']}x faster; {r['frlake_diagnose_core_s']} s of analysis)")
    torch_growth = big["torch_peak_mb"] / small["torch_peak_mb"]
    frlake_growth = big["frlake_diagnose_peak_mb"] / small["frlake_diagnose_peak_mb"]
    results["memory_growth"] = {"ranks_ratio": big["world"] / small["world"], "torch": round(torch_growth, 2),
                                "frlake_diagnose": round(frlake_growth, 2),
                                "torch_mb_per_128_ranks": round(big["torch_peak_mb"] / big["world"] * 128),
                                "frlake_mb_per_128_ranks": round(big["frlake_diagnose_peak_mb"] / big["world"] * 128)}
    print(f"memory from {small['world']} to {big['world']} ranks: torch x{torch_growth:.2f}, frlake diagnose x{frlake_growth:.2f}")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "diagnose.json").write_text(json.dumps(results, indent=2) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
