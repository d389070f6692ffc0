"""``evaluate(..., workers=W)`` and ``hopgym eval --ray``: the sub-envs in Ray workers (a local
Ray with num_cpus=2), the same episodes as in this process."""

from __future__ import annotations

import functools
import json
import os
import sys

import gymnasium as gym
import pytest
from vector_eval_helpers import BatchedScript

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.evaluation import evaluate
from hopgym.agents.trajectories import read_trajectories
from hopgym.cli import main

ray = pytest.importorskip("ray")

ENV = functools.partial(gym.make, "hopgym/Tiny-v1", max_turns=4)


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # The workers cannot import this test module: send its classes by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def _records(path):
    return sorted(read_trajectories(path).episodes, key=lambda ep: ep["seed"])


def test_workers_run_the_same_episodes(tmp_path):
    here = evaluate(
        ENV, BatchedScript(), episodes=7, seed=1, num_envs=4, trajectories=tmp_path / "here.jsonl"
    )
    there = evaluate(
        ENV, BatchedScript(), episodes=7, seed=1, num_envs=4, workers=2, trajectories=tmp_path / "ray.jsonl"
    )
    assert _records(tmp_path / "here.jsonl") == _records(tmp_path / "ray.jsonl")
    assert there["worker_errors"] == 0 and there["episodes"] == 7
    assert here["avg_searches"] == there["avg_searches"] > 1


class DieOnce(gym.Wrapper):
    """Kills its worker process at the second step of the episode with reset seed ``seed``, the
    first time only (a marker file remembers it across processes)."""

    def __init__(self, env, marker, seed):
        super().__init__(env)
        self.marker, self.seed, self.steps, self.current = marker, seed, 0, None

    def reset(self, *, seed=None, options=None):
        self.current, self.steps = seed, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if self.current == self.seed and self.steps == 2 and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return self.env.step(action)


def test_an_episode_lost_with_its_worker_runs_again(tmp_path):
    marker = str(tmp_path / "died")
    env_fn = functools.partial(lambda m: DieOnce(ENV(), m, 3), marker)
    here = evaluate(
        ENV, BatchedScript(), episodes=5, seed=0, num_envs=4, trajectories=tmp_path / "here.jsonl"
    )
    there = evaluate(
        env_fn,
        BatchedScript(),
        episodes=5,
        seed=0,
        num_envs=4,
        workers=2,
        trajectories=tmp_path / "ray.jsonl",
    )
    assert os.path.exists(marker) and there["worker_errors"] >= 1
    assert _records(tmp_path / "here.jsonl") == _records(tmp_path / "ray.jsonl")
    assert here["em"] == there["em"] and there["episodes"] == 5


def test_cli_ray(tmp_path, capsys):
    pytest.importorskip("transformers")
    from tiny_llm import build_model, build_tokenizer

    tok = build_tokenizer()
    build_model(tok).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    common = [
        "eval",
        "--env",
        "hopgym/Tiny-v1",
        "--max-turns",
        "2",
        "--agent",
        "llm",
        "--model",
        str(tmp_path / "m"),
        "--max-new-tokens",
        "6",
        "--episodes",
        "3",
        "--num-envs",
        "2",
    ]
    main([*common, "--json", str(tmp_path / "here.json")])
    main([*common, "--ray", "--workers", "2", "--json", str(tmp_path / "ray.json")])
    here, there = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("here", "ray"))
    assert there["worker_errors"] == 0
    for key in ("em", "f1", "avg_steps", "invalid_rate", "answered", "episodes"):
        assert here[key] == there[key], key
    assert "hopgym/Tiny-v1, 3 episodes" in capsys.readouterr().out
