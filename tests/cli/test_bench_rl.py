"""``hopgym bench-rl``: a short PPO run learns something, bench_rl end to end, the CLI, the plot."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")
import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from gymnasium.envs.registration import register, registry  # noqa: E402

import hopgym  # noqa: E402, F401
from hopgym.cli import bench_rl_jobs as rl_bench  # noqa: E402
from hopgym.cli import build_parser  # noqa: E402
from hopgym.envs.featurized import FeaturizedEnv  # noqa: E402

TINY_ID = "hopgym-test/TinyFeaturized-v0"
if TINY_ID not in registry:
    register(
        id=TINY_ID,
        entry_point="hopgym.envs.featurized:make_featurized",
        kwargs={"base_id": "hopgym/Tiny-v1", "max_candidates": 4, "hash_dim": 16},
    )

TINY_HP = {
    "ppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 2},
    "maskppo": {"n_steps": 32, "batch_size": 32, "n_epochs": 2},
    "a2c": {"n_steps": 4},
    "dqn": {"learning_starts": 16, "train_freq": 2, "buffer_size": 500},
}


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_short_ppo_run_changes_the_policy():
    env = gym.make(TINY_ID)
    model = rl_bench.make_model("ppo", env, seed=0, hyperparams=TINY_HP["ppo"])
    before = [p.detach().clone() for p in model.policy.parameters()]
    model.learn(total_timesteps=64)
    after = list(model.policy.parameters())
    changed = [not torch.equal(a, b) for a, b in zip(before, after, strict=True)]
    assert all(changed), "every parameter tensor of the policy should have moved"


def test_policy_agent_and_masked_random_act_validly():
    env = gym.make(TINY_ID)
    model = rl_bench.make_model("maskppo", env, seed=0, hyperparams=TINY_HP["maskppo"])
    model.learn(total_timesteps=32)  # MaskablePPO reads action_masks() through the wrappers
    agent = rl_bench.PolicyAgent(model, env)
    obs, info = env.reset(seed=0)
    for _ in range(3):
        a = agent.act(obs, info)
        assert info["action_mask"][a]  # MaskablePPO respects the mask
        obs, r, term, trunc, info = env.step(a)
        if term or trunc:
            break
    rnd = rl_bench.MaskedRandomAgent(seed=0)
    obs, info = env.reset(seed=1)
    assert all(info["action_mask"][rnd.act(obs, info)] for _ in range(10))


def test_make_model_rejects_unknown_algorithms():
    with pytest.raises(ValueError, match="unknown algorithm"):
        rl_bench.make_model("sac", gym.make(TINY_ID), seed=0)
    with pytest.raises(TypeError, match="featurized env"):
        rl_bench.bench_rl(
            "hopgym/Tiny-v1",
            algos=["ppo"],
            seeds=[0],
            timesteps=8,
            eval_episodes=1,
            baselines=[],
            progress=False,
        )


def test_bench_rl_end_to_end(tmp_path):
    png = tmp_path / "curves.png"
    out = rl_bench.bench_rl(
        TINY_ID,
        algos=["ppo", "dqn"],
        seeds=[0, 1],
        timesteps=64,
        eval_episodes=6,
        baselines=["masked-random", "oracle"],
        eval_every=32,
        curve_episodes=3,
        hyperparams=TINY_HP,
        n_envs=2,
        progress=False,
        plot=png,
    )
    assert [(r["algo"], r["seed"]) for r in out["runs"]] == [("ppo", 0), ("ppo", 1), ("dqn", 0), ("dqn", 1)]
    for run in out["runs"]:
        assert 0.0 <= run["em"] <= 1.0 and run["train_steps_per_s"] > 0
        assert [p[0] for p in run["curve"]][0] == 0 and len(run["curve"]) >= 2
    assert set(out["summary"]) == {"ppo", "dqn"}
    ems = [r["em"] for r in out["runs"] if r["algo"] == "ppo"]
    assert out["summary"]["ppo"]["em"] == pytest.approx(np.mean(ems))
    assert out["baselines"]["oracle"]["em"] == 1.0
    json.dumps(out)  # JSON-able as the CLI writes it
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = rl_bench.render_table(out)
    assert table.row_count == 2 + 2


def test_cli_parses_and_runs(tmp_path, capsys):
    parser = build_parser()
    out_json = tmp_path / "r.json"
    args = parser.parse_args(
        [
            "bench-rl",
            "--env",
            TINY_ID,
            "--algos",
            "a2c",
            "--seeds",
            "3",
            "--timesteps",
            "32",
            "--eval-episodes",
            "2",
            "--eval-every",
            "0",
            "--baselines",
            "masked-random",
            "--json",
            str(out_json),
            "--no-progress",
            "--kw",
            "max_turns=4",
        ]
    )
    assert args.algos == ["a2c"] and args.seeds == [3]
    assert args.func(args) == 0
    data = json.loads(out_json.read_text())
    assert data["runs"][0]["seed"] == 3 and data["env_kwargs"] == {"max_turns": 4}
    assert "bench-rl" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parser.parse_args(["bench-rl", "--seeds", "a,b"])


def test_featurized_env_is_what_the_bench_trains():
    env = gym.make(TINY_ID)
    assert isinstance(rl_bench._unwrap_featurized(env), FeaturizedEnv)
    assert env.unwrapped.task.name == "tiny"  # FeaturizedEnv is a wrapper of the text env
    with pytest.raises(TypeError, match="has text actions"):
        rl_bench._unwrap_featurized(gym.make("hopgym/Tiny-v1"))
