"""Batched evaluation acts through BatchedSearchVectorEnv: the same episodes (questions, seeds,
transcripts) as the one-env loop, with the sub-envs' searches batched."""

from __future__ import annotations

import functools

import gymnasium as gym
import pytest
from vector_eval_helpers import BatchedScript

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.evaluation import evaluate, make_vector_env
from hopgym.agents.trajectories import read_trajectories
from hopgym.cli import main
from hopgym.vector import BatchedSearchVectorEnv

ENV = functools.partial(gym.make, "hopgym/Tiny-v1", max_turns=4)


def _records(path):
    return sorted(read_trajectories(path).episodes, key=lambda ep: ep["seed"])


def test_make_vector_env_batches_searches():
    venv = make_vector_env([ENV] * 3)
    assert isinstance(venv, BatchedSearchVectorEnv)
    assert venv.metadata["autoreset_mode"] == gym.vector.AutoresetMode.DISABLED
    venv.reset(seed=0)
    venv.step_subset([0, 1, 2], ["<search>Kaldor river</search>"] * 3)
    stats = venv.search_stats()
    assert (stats.requests, stats.calls, stats.queries) == (3, 1, 1)
    venv.close()


@pytest.mark.parametrize("num_envs", [2, 3, 9])
def test_the_same_episodes_as_one_env(tmp_path, num_envs):
    one = evaluate(ENV(), BatchedScript(), episodes=7, seed=4, trajectories=tmp_path / "1.jsonl")
    many = evaluate(
        ENV, BatchedScript(), episodes=7, seed=4, num_envs=num_envs, trajectories=tmp_path / "n.jsonl"
    )
    assert _records(tmp_path / "1.jsonl") == _records(tmp_path / "n.jsonl")
    assert [ep["seed"] for ep in _records(tmp_path / "n.jsonl")] == list(range(4, 11))
    assert one["avg_searches"] > 1 and one["answered"] == 1.0
    for key in ("em", "f1", "support_recall", "avg_steps", "avg_searches", "invalid_rate"):
        assert one[key] == pytest.approx(many[key]), key
    assert "worker_errors" not in many


def test_workers_are_checked():
    with pytest.raises(ValueError, match="workers"):
        evaluate(ENV, BatchedScript(), episodes=2, num_envs=2, workers=3)
    with pytest.raises(ValueError, match="workers"):
        evaluate(ENV, BatchedScript(), episodes=2, num_envs=2, workers=0)
    with pytest.raises(SystemExit, match="add --ray"):
        main(["eval", "--env", "hopgym/Tiny-v1", "--agent", "oracle", "--workers", "2"])
    with pytest.raises(SystemExit, match="only the llm agents"):
        main(["eval", "--env", "hopgym/Tiny-v1", "--agent", "oracle", "--ray"])
