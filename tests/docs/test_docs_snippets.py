"""Every Python block of the docs (``docs/*.md``) and of the README runs, and prints what the page
shows.

A page's blocks run in order in one fresh process and share one namespace, as a reader running
them one after another would (``tests/docs/snippet_runner.py``), in a scratch directory where
``tests/fixtures`` is reachable as in the repository. A block's output is the ``text`` block right
after it (lines compared without trailing spaces and blank lines; ``...`` in a line matches any
text); a block with no ``text`` block after it must print nothing.

Fence titles mark the blocks that do not run here:

- ``title="not run: ..."``: never run (a GPU, a model download, a server, minutes of training);
  :func:`test_blocks_not_run_are_listed` lists them.
- ``title="slow: ..."``: run, with the rest of the page, only by the ``slow`` test.
- ``title="NAME.py"``: a module the page asks the reader to save; it is written to the scratch
  directory as ``NAME.py`` instead of being run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RUNNER = Path(__file__).with_name("snippet_runner.py")
TITLE = re.compile(r'title="([^"]*)"')


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, title, body and where it starts (``page.md:LINE``)."""

    lang: str
    title: str
    body: str
    where: str
    end: int  # the line of the closing fence


def fences(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, in order (nested fences in lists included)."""
    blocks: list[Block] = []
    current: list[str] | None = None
    indent, info, start = "", "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        stripped = line.lstrip()
        if current is None and stripped.startswith("```"):
            indent, info, start, current = line[: len(line) - len(stripped)], stripped[3:].strip(), number, []
        elif current is not None and stripped.startswith("```") and not stripped.strip("`"):
            title = TITLE.search(info)
            lang = info.split()[0] if info else ""
            body = "\n".join(x[len(indent) :] if x.startswith(indent) else x for x in current)
            name = title.group(1) if title else ""
            blocks.append(Block(lang, name, body + "\n", f"{path.name}:{start}", number))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]


def python_blocks(path: Path) -> list[tuple[Block, str]]:
    """``(block, expected output)`` of each Python block of a page."""
    blocks = fences(path)
    out = []
    for i, block in enumerate(blocks):
        if block.lang != "python":
            continue
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        shown = after is not None and after.lang == "text" and _adjacent(path, block, after)
        expected = after.body if shown else ""
        out.append((block, expected))
    return out


def _adjacent(path: Path, block: Block, after: Block) -> bool:
    """Whether only blank lines lie between a block's closing fence and the next block."""
    lines = path.read_text(encoding="utf-8").splitlines()
    start = int(after.where.rsplit(":", 1)[1])
    return all(not line.strip() for line in lines[block.end : start - 1])


def _not_run(block: Block) -> bool:
    return block.title.startswith("not run")


def _slow(block: Block) -> bool:
    return block.title.startswith("slow")


def _module(block: Block) -> bool:
    return block.title.endswith(".py")


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


def _matches(shown: str, got: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in shown.split("..."))
    return re.fullmatch(pattern, got) is not None


def run_page(path: Path, tmp_path: Path, *, slow: bool) -> None:
    """Runs a page's blocks (the slow ones too when ``slow``) and compares what they print."""
    (tmp_path / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    chosen = []
    for block, expected in python_blocks(path):
        if _not_run(block) or (_slow(block) and not slow):
            continue
        if _module(block):
            (tmp_path / block.title).write_text(block.body, encoding="utf-8")
            continue
        chosen.append((block, expected))
    if not chosen:
        pytest.skip(f"{path.name}: no Python block to run")
    spec = tmp_path / "blocks.json"
    spec.write_text(json.dumps([{"where": b.where, "code": b.body} for b, _ in chosen]), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)]), "COLUMNS": "80"}
    proc = subprocess.run(
        [sys.executable, str(RUNNER), str(spec)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900 if slow else 300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for (block, expected), got in zip(chosen, result["outputs"], strict=False):
        shown, printed = _lines(expected), _lines(got)
        assert len(shown) == len(printed) and all(map(_matches, shown, printed)), (
            f"{block.where} prints\n" + "\n".join(printed) + "\nbut the page shows\n" + "\n".join(shown)
        )
    assert "error" not in result, f"{result['where']} raised:\n{result['error']}"


FAST = [p for p in pages() if any(not _not_run(b) and not _slow(b) for b, _ in python_blocks(p))]
SLOW = [p for p in pages() if any(_slow(b) for b, _ in python_blocks(p))]


@pytest.mark.parametrize("path", FAST, ids=[p.name for p in FAST])
def test_page_prints_what_it_shows(path, tmp_path):
    run_page(path, tmp_path, slow=False)


@pytest.mark.slow
@pytest.mark.parametrize("path", SLOW, ids=[p.name for p in SLOW])
def test_page_with_slow_blocks_prints_what_it_shows(path, tmp_path):
    run_page(path, tmp_path, slow=True)


def test_blocks_not_run_are_listed():
    """The blocks no test runs, named here so that adding one is a visible decision."""
    not_run = sorted(
        b.where.split(":")[0] + ": " + b.title for p in pages() for b, _ in python_blocks(p) if _not_run(b)
    )
    assert not_run == NOT_RUN


NOT_RUN = [
    "classic-rl.md: not run: trains for minutes",
    "env-server.md: not run: needs a model and a running server",
    "env-server.md: not run: needs a running server",
    "eval-suites.md: not run: reads the sample files laid out above",
    "integrations.md: not run: hopgym_skyrl.py, SkyRL's entrypoint with hopgym registered in the worker",
    "integrations.md: not run: needs a model and a running server",
    "integrations.md: not run: needs the model",
    "integrations.md: not run: verifiers' harness installs its program at run time",
    "integrations.md: not run: writes SkyRL's dataset files",
    "llm-agents.md: not run: downloads a model from the Hugging Face hub",
    "rewards.md: not run: needs a model and a dataset",
    "serving-resilience.md: not run: needs Ray and a second server",
    "serving-resilience.md: not run: needs two servers running",
    "serving-resilience.md: not run: needs two servers running",
    "tool-calls.md: not run: downloads a model from the Hugging Face hub",
    "tool-calls.md: not run: needs an OpenAI-compatible server",
]


def test_the_agent_module_runs_from_the_command_line(tmp_path):
    """The console session after ``my_agents.py`` on the extending page prints what it shows."""
    blocks = fences(DOCS / "extending.md")
    module = next(b for b in blocks if b.title == "my_agents.py")
    (tmp_path / module.title).write_text(module.body, encoding="utf-8")
    session = next(b for b in blocks if b.lang == "console" and "my_agents:" in b.body).body.splitlines()
    command = session[0].removeprefix("$ PYTHONPATH=. ").split()
    assert command[0] == "hopgym"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), "."]), "COLUMNS": "80"}
    out = subprocess.run(
        [sys.executable, "-m", "hopgym.cli", *command[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    drop_speed = [re.sub(r"\s+\d+$", "", line) for line in _lines("\n".join(session[1:]))]  # ep/s varies
    assert [re.sub(r"\s+\d+$", "", line) for line in _lines(out.stdout)] == drop_speed
