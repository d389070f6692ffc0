"""The ``hopgym`` command end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from hopgym.cli import main, parse_kwargs


def test_eval_writes_metrics_json(tmp_path, capsys):
    out = tmp_path / "m.json"
    traj = tmp_path / "t.jsonl"
    assert (
        main(
            [
                "eval",
                "--env",
                "hopgym/Tiny-v1",
                "--agent",
                "oracle",
                "--episodes",
                "6",
                "--json",
                str(out),
                "--trajectories",
                str(traj),
            ]
        )
        == 0
    )
    metrics = json.loads(out.read_text())
    for key in (
        "em",
        "f1",
        "support_recall",
        "avg_steps",
        "avg_searches",
        "invalid_rate",
        "episodes",
        "episodes_per_s",
    ):
        assert key in metrics
    assert metrics["em"] == 1.0 and metrics["episodes"] == 6
    assert len(traj.read_text().splitlines()) == 1 + 6  # the header, then one line per episode
    assert "oracle" in capsys.readouterr().out


def test_eval_passes_env_kwargs_and_reward(tmp_path):
    out = tmp_path / "m.json"
    main(
        [
            "eval",
            "--env",
            "hopgym/Tiny-v1",
            "--kw",
            "sources=('local','web')",
            "top_k=2",
            "--agent",
            "oracle",
            "--episodes",
            "6",
            "--reward",
            "none",
            "--json",
            str(out),
        ]
    )
    metrics = json.loads(out.read_text())
    assert metrics["reward"] == 0.0 and metrics["searches_by_source"]["web"] > 0


def test_bench_runs_every_baseline(tmp_path):
    out = tmp_path / "b.json"
    main(
        [
            "bench",
            "--env",
            "hopgym/Tiny-v1",
            "--agents",
            "random",
            "direct",
            "oracle",
            "--episodes",
            "6",
            "--json",
            str(out),
        ]
    )
    results = json.loads(out.read_text())
    assert set(results) == {"hopgym/Tiny-v1:random", "hopgym/Tiny-v1:direct", "hopgym/Tiny-v1:oracle"}
    assert results["hopgym/Tiny-v1:oracle"]["em"] == 1.0


def test_play_reads_turns_from_stdin():
    script = "s Qelvor Dynamics founded\nt hmm\na 1962\n"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hopgym.cli",
            "play",
            "--env",
            "hopgym/Tiny-v1",
            "--kw",
            "sources=('local',)",
            "--seed",
            "0",
        ],
        input=script,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "Episode over (answered)" in proc.stdout and "Gold:" in proc.stdout


def test_data_exports_flashrag_files(tmp_path):
    main(["data", "--out", str(tmp_path), "--kw", "n_entities=300", "n_questions=10"])
    questions = [json.loads(x) for x in (tmp_path / "questions.jsonl").read_text().splitlines()]
    assert len(questions) == 10 and questions[0]["golden_answers"]
    first = json.loads((tmp_path / "corpus.jsonl").read_text().splitlines()[0])
    assert set(first) == {"id", "contents"}


def test_bad_input_exits_with_a_message(capsys):
    with pytest.raises(SystemExit, match="key=value"):
        parse_kwargs(["novalue"])
    with pytest.raises(
        SystemExit,
        match="unknown agent .genius.; choose one of random.*oracle, llm, llm-direct, or give module:factory",
    ):
        main(["eval", "--env", "hopgym/Tiny-v1", "--agent", "genius", "--episodes", "1"])
    with pytest.raises(SystemExit, match="cannot make"):
        main(["eval", "--env", "hopgym/Nope-v0", "--episodes", "1"])
    with pytest.raises(SystemExit) as exc:  # a usage error: argparse's status 2
        main(["eval", "--kw", "novalue"])
    assert exc.value.code == 2 and "--kw takes key=value, got 'novalue'" in capsys.readouterr().err
