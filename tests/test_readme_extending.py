"""README examples run as written and print what the README shows: the quick start, and the
"Adding a retriever, a dataset, a reward or an agent" snippets (each in its own process, so
their registrations stay there)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SECTION = "### Adding a retriever, a dataset, a reward or an agent"


def _section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(SECTION)
    end = text.find("\n## ", start)
    return text[start : end if end != -1 else len(text)]


def _fences(text: str) -> list[tuple[str, str]]:
    """``(info string, body)`` of each fenced block of ``text``, in order."""
    blocks, current, info = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                blocks.append((info, "\n".join(current) + "\n"))
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _blocks(lang: str) -> list[str]:
    """The fenced blocks of the section whose info string is ``lang`` ("" for a bare fence)."""
    return [body for info, body in _fences(_section()) if info == lang]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), "."])}


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if line.strip()]


SCRIPTS = [b for b in _blocks("python") if "print(" in b]


@pytest.mark.parametrize("code", SCRIPTS, ids=["retriever", "dataset", "reward"])
def test_snippet_prints_what_the_readme_shows(code, tmp_path):
    expected = [line[2:] for line in code.splitlines() if line.startswith("# ")]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert _lines(out.stdout) == expected


def test_agent_module_runs_from_the_command_line(tmp_path):
    module = next(b for b in _blocks("python") if "register_agent(" in b and "print(" not in b)
    (tmp_path / "my_agents.py").write_text(module)
    shown = _blocks("")[-1].splitlines()
    command = shown[0].removeprefix("$ PYTHONPATH=. ").split()
    assert command[0] == "hopgym"
    out = subprocess.run(
        [sys.executable, "-m", "hopgym.cli", *command[1:]],
        cwd=tmp_path,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    # Every line but the speed column is as shown.
    drop_speed = [re.sub(r"\s+\d+$", "", line) for line in _lines("\n".join(shown[1:]))]
    assert [re.sub(r"\s+\d+$", "", line) for line in _lines(out.stdout)] == drop_speed


def test_the_quick_start_prints_what_the_readme_shows(tmp_path):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text[text.index("## Quick start") :]
    (lang, code), (_, shown) = _fences(quick)[:2]
    assert lang == "python"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert _lines(out.stdout) == _lines(shown)
