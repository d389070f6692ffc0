from __future__ import annotations

import json

import gymnasium as gym
import pytest

from hopgym.agents import (
    AGENTS,
    DirectAgent,
    OracleAgent,
    RandomAgent,
    SingleSearchAgent,
    evaluate,
    make_agent,
)


@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"sources": ("local", "web")},
        {"protocol": "r3"},
        {"top_k": 1},
        {"background_k": 2, "sources": ("local", "web")},
    ],
)
def test_oracle_is_perfect_on_tiny(kw):
    env = gym.make("hopgym/Tiny-v1", **kw)
    m = evaluate(env, OracleAgent(env), episodes=6, seed=0)
    assert m["em"] == 1.0 and m["f1"] == 1.0 and m["support_recall"] == 1.0
    assert m["invalid_rate"] == 0.0 and m["answered"] == 1.0


def test_oracle_routes_to_web_only_when_a_hop_needs_it():
    env = gym.make("hopgym/Tiny-v1", sources=("local", "web"))
    m = evaluate(env, OracleAgent(env), episodes=6, seed=0)
    # Three of the six tiny questions are about films, which only the web has.
    assert m["searches_by_source"]["web"] > 0 and m["searches_by_source"]["local"] > 0


def test_baselines_are_below_the_oracle():
    env = gym.make("hopgym/Tiny-v1")
    for agent in (RandomAgent(seed=0), DirectAgent(), SingleSearchAgent()):
        m = evaluate(env, agent, episodes=12, seed=0)
        assert m["em"] < 1.0
    assert evaluate(env, DirectAgent(), episodes=6)["avg_searches"] == 0.0


def test_random_agent_is_seeded():
    env = gym.make("hopgym/Tiny-v1")
    a = evaluate(env, RandomAgent(seed=3), episodes=10, seed=1)
    b = evaluate(env, RandomAgent(seed=3), episodes=10, seed=1)
    for key in ("em", "f1", "avg_steps", "avg_searches", "reward", "invalid_rate"):
        assert a[key] == b[key]


def test_evaluate_writes_trajectories(tmp_path):
    env = gym.make("hopgym/Tiny-v1")
    path = tmp_path / "traj.jsonl"
    evaluate(env, OracleAgent(env), episodes=3, seed=0, trajectories=path)
    header, *lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert header["format"] == "hopgym-trajectories" and len(lines) == 3
    assert lines[0]["turns"][-1]["action_type"] == "answer"
    assert lines[0]["turns"][0]["action"].startswith("<think>")
    assert lines[0]["em"] == 1.0


def test_evaluate_reports_reward_terms_and_rejects_zero_episodes():
    env = gym.make("hopgym/Tiny-v1")
    m = evaluate(env, OracleAgent(env), episodes=2)
    assert m["reward"] > 0 and m["reward_terms"]
    assert abs(sum(m["reward_terms"].values()) - m["reward"]) < 1e-9
    with pytest.raises(ValueError, match="episodes"):
        evaluate(env, OracleAgent(env), episodes=0)


def test_make_agent_names():
    env = gym.make("hopgym/Tiny-v1")
    assert isinstance(make_agent("oracle", env), OracleAgent)
    with pytest.raises(ValueError, match="unknown agent"):
        make_agent("smart", env)


def test_aggregate_means_carry_no_float_noise():
    from hopgym.agents.evaluation import aggregate

    one = {
        "em": 0.0,
        "f1": 0.0,
        "support_recall": 1.0,
        "steps": 4,
        "searches": 3,
        "searches_by_source": {"local": 3},
        "invalid": 0,
        "prediction": None,
        "return": 0.1,
        "reward_terms": {"cost": 0.1},
    }
    m = aggregate([one] * 10)
    assert m["searches_by_source"] == {"local": 3.0}
    assert m["reward_terms"]["cost"] == 0.1


class _Searcher:
    """A user's agent: searches the question once, then answers what the first title says."""

    def __init__(self, env, seed=None):
        self.seed = seed

    def reset(self):
        self.turn = 0

    def act(self, observation, info):
        self.turn += 1
        return "<search>Cardell</search>" if self.turn == 1 else "<answer>Cardell</answer>"


def test_a_registered_agent_is_made_by_name_and_by_module_path():
    from hopgym.agents import agent_names, register_agent

    register_agent("test-searcher", _Searcher)
    try:
        env = gym.make("hopgym/Tiny-v1")
        agent = make_agent("test-searcher", env, seed=3)
        assert isinstance(agent, _Searcher) and agent.seed == 3
        assert "test-searcher" in agent_names() and "test-searcher" not in AGENTS
        with pytest.raises(ValueError, match="already registered"):
            register_agent("test-searcher", _Searcher)
        register_agent("test-searcher", lambda env, seed: _Searcher(env, 7), override=True)
        assert make_agent("test-searcher", env).seed == 7
        # module:attribute reaches an agent no one registered (what `hopgym eval --agent` takes).
        by_path = make_agent(f"{__name__}:_Searcher", env, seed=5)
        assert isinstance(by_path, _Searcher) and by_path.seed == 5
        assert evaluate(env, by_path, episodes=2, seed=0)["episodes"] == 2
    finally:
        from hopgym.agents import scripted

        scripted._FACTORIES.pop("test-searcher", None)
    for bad in ("", "a:b"):
        with pytest.raises(ValueError, match="non-empty string"):
            register_agent(bad, _Searcher)
    with pytest.raises(ValueError, match="cannot load agent 'nope_module:X'"):
        make_agent("nope_module:X", env)
    with pytest.raises(ValueError, match="unknown agent 'nope'.*oracle"):
        make_agent("nope", env)
