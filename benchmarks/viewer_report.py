"""Size and speed of `hopgym view` reports by number of episodes, side by side.

    python benchmarks/viewer_report.py                         # 1,000 and 10,000 episodes
    python benchmarks/viewer_report.py --episodes 100 1000 10000 --json out.json

For each size it records a real run of the iterative agent on ``hopgym/Synthetic-v1`` (the 1,000
questions cycle past 1,000 episodes), writes the report, and opens it in Chromium (Debian's
``chromium``, driven by Playwright; skipped when either is missing). It prints the trajectory file
and report sizes, the CPU seconds to write the report, and in the browser: the time until the page
is ready (parsed, summary drawn, data read), until the first page of the episode list is drawn, a
text filter over all episodes, and opening one timeline. Browser times are wall clock, so run it on
an idle machine and compare the rows with each other.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import hopgym  # noqa: E402, F401
from hopgym._atomic import check_writable, write_json  # noqa: E402
from hopgym.agents import IterativeAgent, evaluate  # noqa: E402
from hopgym.viewer import write_report  # noqa: E402

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


def browse(path: Path, browser: Any) -> dict[str, float]:
    """Wall-clock seconds of the first interactions with the report."""
    page = browser.new_page(viewport={"width": 1360, "height": 900})
    out: dict[str, float] = {}
    t = time.perf_counter()
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready=true]")
    out["ready_s"] = time.perf_counter() - t
    t = time.perf_counter()
    page.click("button[data-tab=episodes]")
    page.wait_for_selector("#ep-list .ep-row")
    out["list_s"] = time.perf_counter() - t
    total = page.get_attribute("#shown-count", "data-shown")
    t = time.perf_counter()
    page.fill("#f-text", "founder born")  # the list updates 150 ms after the last key
    page.wait_for_selector(f'#shown-count:not([data-shown="{total}"])')
    out["filter_s"] = time.perf_counter() - t
    t = time.perf_counter()
    page.click("#ep-list .ep-row")
    page.wait_for_selector("#ep-detail .timeline[data-index]")
    out["open_s"] = time.perf_counter() - t
    page.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()
    if args.json:
        check_writable(args.json)  # before the reports, not after them
    browser = playwright = None
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    if chromium and sync_playwright:
        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
    else:
        print("no Chromium or Playwright: sizes and write times only")
    env = gym.make("hopgym/Synthetic-v1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.episodes:
            run = Path(tmp) / f"run{n}.jsonl"
            evaluate(env, IterativeAgent(), episodes=n, seed=0, trajectories=run)
            t = time.process_time()
            report = write_report(run, Path(tmp) / f"run{n}.html")
            row: dict[str, Any] = {
                "episodes": n,
                "jsonl_mb": run.stat().st_size / 1e6,
                "html_mb": report.stat().st_size / 1e6,
                "write_cpu_s": time.process_time() - t,
            }
            if browser is not None:
                row.update(browse(report, browser))
            rows.append(row)
    if browser is not None:
        browser.close()
        playwright.stop()
    table = Table(title="hopgym view: report size and speed (Chromium, wall clock)")
    for col in (
        "episodes",
        "jsonl MB",
        "report MB",
        "write (CPU s)",
        "ready s",
        "list s",
        "text filter s",
        "open episode s",
    ):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            f"{r['episodes']:,}",
            f"{r['jsonl_mb']:.1f}",
            f"{r['html_mb']:.1f}",
            f"{r['write_cpu_s']:.2f}",
            *(f"{r[k]:.2f}" if k in r else "–" for k in ("ready_s", "list_s", "filter_s", "open_s")),
        )
    Console().print(table)
    if len(rows) > 1:
        a, b = rows[0], rows[-1]
        print(
            f"{b['episodes'] / a['episodes']:.0f}x the episodes: report "
            f"{b['html_mb'] / a['html_mb']:.1f}x the size"
            + (f", ready {b['ready_s'] / a['ready_s']:.1f}x the time" if "ready_s" in a else "")
        )
    if args.json:
        write_json(args.json, rows)


if __name__ == "__main__":
    main()
