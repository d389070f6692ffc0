"""Shared helpers of the viewer tests: real `hopgym eval` runs, a task with a script-injection
payload, and a real Chromium driven by Playwright (or a skip that says what to install)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from hopgym.cli import main

# Debian's Chromium; HOPGYM_CHROMIUM points at another Chromium-based browser.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
INSTALL_HINT = (
    "needs a real browser: install Chromium (`apt-get install -y chromium`) and "
    "Playwright for Python (`pip install 'hopgym[browser]'`; no `playwright install` "
    "needed), or set HOPGYM_CHROMIUM to a Chromium binary"
)

PAYLOAD = '</script><img src=x onerror="window.__xss=1;alert(1)"><b>bold</b><!--'


def chromium_path() -> str | None:
    """The browser binary to drive, or ``None``."""
    env = os.environ.get("HOPGYM_CHROMIUM")
    if env:
        return env if Path(env).is_file() else None
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def launch_browser(playwright: Any) -> Any:
    """Launch Chromium, or skip the test with what to install."""
    path = chromium_path()
    if path is None:
        pytest.skip(f"no Chromium found: {INSTALL_HINT}")
    try:
        return playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
    except Exception as exc:  # noqa: BLE001 - any launch failure means "no usable browser"
        pytest.skip(f"Chromium at {path} did not start ({exc}): {INSTALL_HINT}")


def eval_run(folder: Path, name: str, *args: str) -> Path:
    """A real run of the `hopgym eval` command, written with --trajectories; returns the file."""
    path = folder / f"{name}.jsonl"
    assert main(["eval", *args, "--trajectories", str(path)]) == 0
    return path


def read_jsonl(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the episode lines, read with nothing but ``json``."""
    header, *episodes = [json.loads(line) for line in path.read_text().splitlines() if line]
    return header, episodes


def expected_counts(episodes: list[dict[str, Any]]) -> dict[str, int]:
    """Outcome counts computed straight from the records."""
    return {
        "correct": sum(1 for e in episodes if e["prediction"] is not None and e["em"] == 1.0),
        "wrong": sum(1 for e in episodes if e["prediction"] is not None and e["em"] < 1.0),
        "no answer": sum(1 for e in episodes if e["prediction"] is None),
        "invalid turns": sum(1 for e in episodes if e["invalid"] > 0),
    }


def payload_run(folder: Path) -> Path:
    """An oracle run on a one-question task whose question, answer, kind and documents carry an
    HTML/script payload, as a hostile or broken dataset would."""
    import gymnasium as gym  # noqa: F401

    from hopgym.agents import OracleAgent, evaluate
    from hopgym.corpora.types import Hop, Passage, QASample
    from hopgym.envs.registration import make_task_env
    from hopgym.retrieval.sparse import BM25Retriever
    from hopgym.tasks.base import QATask, Source

    passages = [
        Passage("d1", f"Zorvath Keep {PAYLOAD}", f"Zorvath Keep was founded by {PAYLOAD} Ilmar."),
        Passage("d2", "Other", "Another keep, founded by nobody."),
    ]
    sample = QASample(
        "x1",
        f"Who founded Zorvath Keep? {PAYLOAD}",
        (f"Ilmar {PAYLOAD}",),
        ("d1",),
        1,
        f"bridge{PAYLOAD}",
        (Hop("Who founded Zorvath Keep?", f"Ilmar {PAYLOAD}", "d1", "Zorvath Keep founded"),),
    )
    task = QATask(
        "payload",
        [sample],
        {"local": Source("local", BM25Retriever(passages))},
        {p.doc_id: p for p in passages},
    )
    env = make_task_env(task)
    path = folder / "payload.jsonl"
    evaluate(env, OracleAgent(env), episodes=2, trajectories=path, agent_name=f"oracle{PAYLOAD}")
    return path
