from __future__ import annotations

import json

import gymnasium as gym
import pytest

import hopgym
from hopgym.agents import (
    DirectAgent,
    OracleAgent,
    RandomAgent,
    SingleSearchAgent,
    evaluate,
    make_agent,
)


@pytest.mark.parametrize("kw", [{}, {"sources": ("local", "web")}, {"protocol": "r3"},
                                {"top_k": 1}, {"background_k": 2, "sources": ("local", "web")}])
def test_oracle_is_perfect_on_tiny(kw):
    env = gym.make("hopgym/Tiny-v0", **kw)
    m = evaluate(env, OracleAgent(env), episodes=6, seed=0)
    assert m["em"] == 1.0 and m["f1"] == 1.0 and m["support_recall"] == 1.0
    assert m["invalid_rate"] == 0.0 and m["answered"] == 1.0


def test_oracle_routes_to_web_only_when_a_hop_needs_it():
    env = gym.make("hopgym/Tiny-v0", sources=("local", "web"))
    m = evaluate(env, OracleAgent(env), episodes=6, seed=0)
    # Three of the six tiny questions are about films, which only the web has.
    assert m["searches_by_source"]["web"] > 0 and m["searches_by_source"]["local"] > 0


def test_baselines_are_below_the_oracle():
    env = gym.make("hopgym/Tiny-v0")
    for agent in (RandomAgent(seed=0), DirectAgent(), SingleSearchAgent()):
        m = evaluate(env, agent, episodes=12, seed=0)
        assert m["em"] < 1.0
    assert evaluate(env, DirectAgent(), episodes=6)["avg_searches"] == 0.0


def test_random_agent_is_seeded():
    env = gym.make("hopgym/Tiny-v0")
    a = evaluate(env, RandomAgent(seed=3), episodes=10, seed=1)
    b = evaluate(env, RandomAgent(seed=3), episodes=10, seed=1)
    for key in ("em", "f1", "avg_steps", "avg_searches", "reward", "invalid_rate"):
        assert a[key] == b[key]


def test_evaluate_writes_trajectories(tmp_path):
    env = gym.make("hopgym/Tiny-v0")
    path = tmp_path / "traj.jsonl"
    evaluate(env, OracleAgent(env), episodes=3, seed=0, trajectories=path)
    header, *lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert header["format"] == "hopgym-trajectories" and len(lines) == 3
    assert lines[0]["turns"][-1]["action_type"] == "answer"
    assert lines[0]["turns"][0]["action"].startswith("<think>")
    assert lines[0]["em"] == 1.0


def test_evaluate_reports_reward_terms_and_rejects_zero_episodes():
    env = gym.make("hopgym/Tiny-v0")
    m = evaluate(env, OracleAgent(env), episodes=2)
    assert m["reward"] > 0 and m["reward_terms"]
    assert abs(sum(m["reward_terms"].values()) - m["reward"]) < 1e-9
    with pytest.raises(ValueError, match="episodes"):
        evaluate(env, OracleAgent(env), episodes=0)


def test_make_agent_names():
    env = gym.make("hopgym/Tiny-v0")
    assert isinstance(make_agent("oracle", env), OracleAgent)
    with pytest.raises(ValueError, match="unknown agent"):
        make_agent("smart", env)


def test_top_level_evaluate_is_the_harness_and_deprecated():
    with pytest.warns(DeprecationWarning, match="hopgym.agents.evaluate"):
        assert hopgym.evaluate is evaluate


def test_aggregate_means_carry_no_float_noise():
    from hopgym.agents.evaluation import aggregate

    one = {"em": 0.0, "f1": 0.0, "support_recall": 1.0, "steps": 4, "searches": 3,
           "searches_by_source": {"local": 3}, "invalid": 0, "prediction": None, "return": 0.1,
           "reward_terms": {"cost": 0.1}}
    m = aggregate([one] * 10)
    assert m["searches_by_source"] == {"local": 3.0}
    assert m["reward_terms"]["cost"] == 0.1
