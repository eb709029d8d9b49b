"""Page loads in a real browser, two commits side by side: what a person waits for.

    python bench/bench_pages.py BEFORE [AFTER] [--rounds 5] [--out FILE]

Checks out each commit into a temporary git worktree (building its compiled reader), ingests the test
corpus (tests/corpus/visible) into a lake per commit, starts that commit's `frlake serve` (waitress) on loopback
and loads each page below in Chromium (Playwright, /usr/bin/chromium) at a desktop's 1366 px and a
phone's 390 px, alternating the two commits round by round. A load is navigation start to the load
event (the Navigation Timing API): the HTML, its CSS and scripts, and every chart the page draws before
it. Prints the median and maximum per commit and their ratio, and the console errors of each (which
must be none); writes bench/results/pages.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

from measure import checkouts  # noqa: E402

from tests.helpers import serve  # noqa: E402

PAGES = ["/", "/?q=b03", "/jobs/job-f70c5d", "/jobs/job-f70c5d/attempts/0", "/jobs/job-f70c5d/attempts/0/entries",
         "/hosts/gpu-b03", "/hosts", "/reports/slow-ranks", "/reports/hangs", "/reports/causes", "/reports/drain",
         "/reports/slow-links", "/sql"]
WIDTHS = (1366, 390)


def ingest(tree: Path, lake: Path) -> None:
    subprocess.run([sys.executable, "-m", "frlake.cli.main", "--lake", str(lake), "ingest",
                    str(ROOT / "tests" / "corpus" / "visible")], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                   check=True, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before")
    ap.add_argument("after", nargs="?", default="HEAD")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(HERE / "results" / "pages.json"))
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="frlake-pages-"))
    try:
        with checkouts(ROOT, work, {"before": args.before, "after": args.after}) as trees:
            servers = {}
            try:
                for side, tree in trees.items():
                    ingest(tree, work / f"lake-{side}")
                    servers[side] = serve(work / f"lake-{side}", source=tree)
                measure(args, trees, {side: url for side, (url, _) in servers.items()})
            finally:
                for _, proc in servers.values():
                    proc.terminate()
                    proc.wait(10)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def measure(args, trees: dict[str, Path], urls: dict[str, str]) -> None:
    """Each page at each width, the sides alternated round by round; the medians and their ratio."""
    from playwright.sync_api import sync_playwright

    loads = {side: [] for side in trees}
    errors = {side: [] for side in trees}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--no-first-run"])
        for _ in range(args.rounds):
            for side, url in urls.items():
                for width in WIDTHS:
                    page = browser.new_page(viewport={"width": width, "height": 844 if width < 800 else 768})
                    page.on("console", lambda m, s=side: errors[s].append(m.text) if m.type == "error" else None)
                    for path in PAGES:
                        page.goto(url + path, wait_until="load")
                        ms = page.evaluate("() => { const t = performance.getEntriesByType('navigation')[0];"
                                           " return t.loadEventEnd - t.startTime; }")
                        loads[side].append({"page": path, "width": width, "ms": ms})
                    page.close()
        browser.close()
    out = {"before": args.before, "after": args.after, "rounds": args.rounds, "pages": PAGES, "loads": loads,
           "console_errors": errors}
    medians = {}
    for side in trees:
        ms = [x["ms"] for x in loads[side]]
        medians[side] = statistics.median(ms)
        out[f"{side}_median_ms"], out[f"{side}_max_ms"] = round(medians[side], 1), round(max(ms), 1)
        print(f"{side:6} ({getattr(args, side)}): {len(ms)} loads, median {medians[side]:.1f} ms, "
              f"max {max(ms):.1f} ms, console errors {len(errors[side])}")
    out["ratio"] = round(medians["after"] / medians["before"], 3)
    print(f"median after/before {out['ratio']:.3f}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
