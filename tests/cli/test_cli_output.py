"""What the ``hopgym`` command prints: tables that fit 80 columns, piped or in a terminal,
labelled progress bars, no stray blank lines, rounded numbers, play's shortcuts."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = [
    sys.executable,
    "-m",
    "hopgym.cli",
    "bench",
    "--env",
    "hopgym/Tiny-v1",
    "hopgym/Tiny-v1",
    "--kw",
    "sources=('local','web')",
    "--episodes",
    "6",
]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def env(**extra: str) -> dict[str, str]:
    out = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out.pop("COLUMNS", None)
    return {**out, **extra}


def run_in_pty(argv: list[str], cols: int = 80) -> str:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal ``cols`` wide; all it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, cols, 0, 0))
    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, cwd=ROOT, env=env(TERM="xterm"), close_fds=True
    )
    os.close(slave)
    chunks = []
    try:
        while select.select([master], [], [], 120)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        proc.kill() if proc.poll() is None else None
        proc.wait()
        os.close(master)
    assert proc.returncode == 0
    return b"".join(chunks).decode("utf-8", "replace")


def check_tables(text: str, width: int = 80) -> list[str]:
    lines = text.splitlines()
    assert "…" not in text, text
    assert max(len(line) for line in lines) <= width, text
    return lines


def test_piped_bench_fits_80_columns_without_blank_lines():
    proc = subprocess.run(
        BENCH, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env(COLUMNS="80"), check=True
    )
    lines = check_tables(proc.stdout)
    assert lines[0].strip() == "hopgym/Tiny-v1, 6 episodes, seed 0"  # no blank lines first
    assert lines.count("") == 1  # one between the two tables
    # The searches split by source, under the total at this width.
    assert "(local/web)" in proc.stdout
    assert re.search(r"^\s+\(\d\.\d\d/\d\.\d\d\)\s*$", proc.stdout, re.M), proc.stdout
    assert proc.stderr == ""  # no progress bars when nobody watches
    for name in ("random", "direct", "single-search", "iterative", "oracle"):
        assert sum(line.startswith(name + " ") for line in lines) == 2


def test_wide_pipe_keeps_the_split_on_one_line():
    proc = subprocess.run(
        BENCH, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env(COLUMNS="100"), check=True
    )
    oracle = next(line for line in proc.stdout.splitlines() if line.startswith("oracle"))
    assert re.search(r"\d\.\d\d \(\d\.\d\d/\d\.\d\d\)", oracle), oracle


def test_bench_in_an_80_column_terminal():
    raw = run_in_pty(BENCH)
    shown = ANSI.sub("", raw).replace("\r", "\n")
    # Progress bars (drawn on the terminal, then erased) say which env and agent they are for.
    for name in ("random", "direct", "single-search", "iterative", "oracle"):
        assert f"Tiny-v1 {name}" in shown
    tables = [line for line in shown.splitlines() if "━" not in line and "╺" not in line]
    check_tables("\n".join(tables))
    assert "(local/web)" in shown


def test_shown_numbers_are_rounded_and_json_keeps_full_precision(tmp_path):
    out = tmp_path / "m.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hopgym.cli",
            "eval",
            "--env",
            "hopgym/Tiny-v1",
            "--kw",
            "sources=('local','web')",
            "--agent",
            "iterative",
            "--episodes",
            "6",
            "--reward",
            "r3rag",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env=env(COLUMNS="80"),
        check=True,
    )
    metrics = json.loads(out.read_text())
    full = [
        v
        for v in [
            *metrics["searches_by_source"].values(),
            *metrics["reward_terms"].values(),
            metrics["avg_steps"],
        ]
        if len(repr(v)) > 8
    ]
    assert full, metrics  # sixths: 0.8333333333333333 ...
    for value in full:
        assert repr(value) not in proc.stdout
    assert not re.search(r"\d\.\d{5,}", proc.stdout), proc.stdout
    check_tables(proc.stdout)


def play(sources: str, script: str) -> str:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "hopgym.cli",
            "play",
            "--env",
            "hopgym/Tiny-v1",
            "--kw",
            f"sources={sources}",
            "--reward",
            "r3rag",
        ],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env(),
        check=True,
    ).stdout


def test_play_offers_routing_only_where_there_is_somewhere_to_route():
    single = play("('local',)", "s Qelvor Dynamics founded\na 1962\n")
    assert "r SOURCE" not in single and "<route>" not in single
    assert "Episode over (answered)" in single
    assert not re.search(r"\d\.\d{5,}", single), single  # reward terms are rounded
    both = play("('local','web')", "r web\ns Qelvor Dynamics founded\na 1962\n")
    assert "'r SOURCE' route to local or web" in both and "<route>" in both
    assert "[invalid" not in both  # 'r web' was a route
