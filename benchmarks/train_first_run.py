"""Times the first run of the training page: the commands of ``docs/training.md``'s first ``bash``
block, run as a reader runs them, one after the other, in a scratch folder.

    python benchmarks/train_first_run.py --json benchmarks/results/train_first_run.json

The commands are read from the page (not repeated here), so that the page's timing and log are
those of the commands it shows. Each command's wall seconds, the CPU seconds of its process
(``RUSAGE_CHILDREN``), the machine's load average before and after, and what it printed to
stderr and stdout are written to ``--json``; ``docs_hooks/results.py`` renders them on the page.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shlex
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "training.md"
SECTION = "## A first run"


def page_commands(page: Path = PAGE) -> list[str]:
    """The ``hopgym`` commands of the first ``bash`` block after :data:`SECTION` (continuation
    lines joined)."""
    text = page.read_text(encoding="utf-8")
    start = text.index(SECTION)
    block = re.search(r"```bash\n(.*?)```", text[start:], re.S)
    if block is None:
        raise ValueError(f"{page}: no bash block after {SECTION!r}")
    joined = block.group(1).replace("\\\n", " ")
    return [" ".join(line.split()) for line in joined.splitlines() if line.strip().startswith("hopgym ")]


def run(commands: list[str], folder: Path) -> list[dict]:
    """Runs ``commands`` in ``folder`` one after the other; stops at the first that fails."""
    rows = []
    for command in commands:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.run(shlex.split(command), cwd=folder, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        rows.append(
            {
                "command": command,
                "returncode": proc.returncode,
                "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1),
                "load_before": round(load, 2),
                "load_after": round(os.getloadavg()[0], 2),
                "stderr": proc.stderr.splitlines(),
                "summary": json.loads(proc.stdout) if proc.returncode == 0 else None,
            }
        )
        if proc.returncode != 0:
            raise SystemExit(f"{command} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the page's first commands and write what they took and printed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, required=True, help="where to write the results")
    args = p.parse_args(argv)
    from hopgym._atomic import check_writable, write_json

    check_writable(args.json)  # before the commands run, not after them
    with tempfile.TemporaryDirectory() as tmp:
        rows = run(page_commands(), Path(tmp))
    result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "commands": rows}
    write_json(args.json, result)
    for row in rows:
        print(f"{row['wall_s']:7.1f} s wall {row['cpu_s']:7.1f} s CPU  {row['command']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
