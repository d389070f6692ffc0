"""``hopgym eval`` with LLM agents: --agent llm|llm-direct, --mode, --system-prompt TEXT|@file,
--force-answer, --few-shot, --num-envs and --time-limit, on a tiny random model saved to disk."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from tiny_llm import build_model, build_tokenizer

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.prompts import CLOSED_BOOK_SYSTEM_PROMPTS, default_system_prompt
from hopgym.agents.trajectories import read_trajectories
from hopgym.cli import build_parser, main
from hopgym.cli._common import CommandError
from hopgym.cli._dataclass_args import config_from_args
from hopgym.cli.eval import LLM_SPEC, make_cli_agent

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    tok = build_tokenizer()
    path = tmp_path_factory.mktemp("tiny-llm")
    build_model(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _llm(*argv: str):
    args = build_parser().parse_args(["eval", *argv])
    return config_from_args(args, LLM_SPEC)


def test_llm_options_reach_the_agent(model_dir, tmp_path):
    env = gym.make("hopgym/Tiny-v1", max_turns=3)
    prompt = tmp_path / "system.txt"
    prompt.write_text("Answer in one word.\n", encoding="utf-8")
    agent = make_cli_agent(
        "llm",
        env,
        0,
        _llm(
            "--model",
            model_dir,
            "--mode",
            "continuation",
            "--system-prompt",
            f"@{prompt}",
            "--force-answer",
            "never",
            "--max-new-tokens",
            "7",
        ),
    )
    assert (agent.mode, agent.system_prompt, agent.force_answer, agent.closed_book) == (
        "continuation",
        "Answer in one word.\n",
        "never",
        False,
    )
    assert agent.sampling.max_new_tokens == 7
    agent = make_cli_agent("llm", env, 0, _llm("--model", model_dir, "--system-prompt", ""))
    assert agent.mode == "chat" and agent.system_prompt == ""
    assert make_cli_agent("llm", env, 0, _llm("--model", model_dir)).system_prompt == default_system_prompt(
        "tags"
    )
    direct = make_cli_agent("llm-direct", env, 0, _llm("--model", model_dir))
    assert direct.closed_book and direct.force_answer == "always"
    assert direct.system_prompt == CLOSED_BOOK_SYSTEM_PROMPTS["tags"]
    few = make_cli_agent(
        "llm",
        env,
        0,
        _llm("--model", model_dir, "--few-shot", "2"),
        few_shot_env=gym.make("hopgym/Tiny-v1", max_turns=4),
    )
    assert len(few.few_shot) == 2
    with pytest.raises(CommandError, match="cannot read"):
        make_cli_agent(
            "llm", env, 0, _llm("--model", model_dir, "--system-prompt", f"@{tmp_path / 'missing.txt'}")
        )
    with pytest.raises(CommandError, match="llm-direct needs --model"):
        make_cli_agent("llm-direct", env, 0, _llm())


def test_eval_llm_batched_writes_metrics_and_trajectories(model_dir, tmp_path, capsys):
    out, traj = tmp_path / "m.json", tmp_path / "t.jsonl"
    assert (
        main(
            [
                "eval",
                "--env",
                "hopgym/Tiny-v1",
                "--max-turns",
                "2",
                "--agent",
                "llm",
                "--model",
                model_dir,
                "--max-new-tokens",
                "6",
                "--episodes",
                "3",
                "--num-envs",
                "2",
                "--mode",
                "continuation",
                "--json",
                str(out),
                "--trajectories",
                str(traj),
            ]
        )
        == 0
    )
    metrics = json.loads(out.read_text())
    assert metrics["episodes"] == 3 and metrics["stopped"] is None
    assert metrics["answered"] == 1.0  # the last turn's answer is prefilled
    run = read_trajectories(traj)
    assert run.header["agent"] == f"llm:{model_dir}" and len(run.episodes) == 3
    assert all(ep["turns"][-1]["action"].startswith("<answer>") for ep in run.episodes)
    assert "answered 1.000" in capsys.readouterr().out


def test_eval_llm_direct_answers_in_one_turn(model_dir, tmp_path):
    out = tmp_path / "m.json"
    assert (
        main(
            [
                "eval",
                "--env",
                "hopgym/Tiny-v1",
                "--agent",
                "llm-direct",
                "--model",
                model_dir,
                "--max-new-tokens",
                "5",
                "--episodes",
                "2",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    metrics = json.loads(out.read_text())
    assert metrics["avg_searches"] == 0.0 and metrics["answered"] == 1.0


def test_eval_time_limit_stops_cleanly_and_still_writes(model_dir, tmp_path, capsys):
    out, traj = tmp_path / "m.json", tmp_path / "t.jsonl"
    assert (
        main(
            [
                "eval",
                "--env",
                "hopgym/Tiny-v1",
                "--agent",
                "llm",
                "--model",
                model_dir,
                "--max-new-tokens",
                "4",
                "--episodes",
                "500",
                "--time-limit",
                "2",
                "--json",
                str(out),
                "--trajectories",
                str(traj),
            ]
        )
        == 0
    )
    metrics = json.loads(out.read_text())
    assert metrics["stopped"] == "time_limit" and 0 <= metrics["episodes"] < 500
    assert len(read_trajectories(traj).episodes) == metrics["episodes"]
    assert "stopped by --time-limit 2 s" in capsys.readouterr().out


def test_num_envs_needs_an_llm_agent():
    with pytest.raises(SystemExit, match="only the llm agents"):
        main(["eval", "--env", "hopgym/Tiny-v1", "--agent", "oracle", "--num-envs", "2", "--episodes", "2"])
