"""The PettingZoo env: API, AEC conversion and seed tests; cooperative and competitive semantics."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("pettingzoo")
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test, seed_test  # noqa: E402

from hopgym.envs.multiagent import MultiHopTeamEnv, env, parallel_env  # noqa: E402

KW = {"base_id": "hopgym/Tiny-v1", "reward": "default", "max_candidates": 4, "hash_dim": 16}
CASES = [(m, o) for m in ("cooperative", "competitive") for o in ("featurized", "text")]


@pytest.fixture(autouse=True)
def _quiet():
    # PettingZoo's tests warn about style choices (agent names, text observations).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


@pytest.mark.parametrize(("mode", "obs_mode"), CASES)
def test_parallel_api(mode, obs_mode):
    parallel_api_test(parallel_env(mode=mode, obs_mode=obs_mode, **KW), num_cycles=60)


@pytest.mark.parametrize(("mode", "obs_mode"), CASES)
def test_seed_tests(mode, obs_mode):
    parallel_seed_test(lambda: parallel_env(mode=mode, obs_mode=obs_mode, **KW), num_cycles=30)
    seed_test(lambda: env(mode=mode, obs_mode=obs_mode, **KW), num_cycles=30)


@pytest.mark.parametrize("mode", ["cooperative", "competitive"])
def test_aec_api(mode):
    # PettingZoo's AEC test checks observation dtypes, so it runs on the numeric observations.
    api_test(env(mode=mode, obs_mode="featurized", **KW), num_cycles=60)


def test_bad_arguments():
    with pytest.raises(ValueError, match="mode"):
        MultiHopTeamEnv(mode="duel", **KW)
    with pytest.raises(ValueError, match="obs_mode"):
        MultiHopTeamEnv(obs_mode="pixels", **KW)
    with pytest.raises(ValueError, match="n_racers"):
        MultiHopTeamEnv(mode="competitive", n_racers=0, **KW)


def test_trajectories_are_built_like_the_featurized_id():
    # The step budget defaults to hopgym/SyntheticFeaturized-v0's (6), stated once, in its
    # registration; every make_featurized argument and text env option passes through.
    team = MultiHopTeamEnv(**KW)
    assert team.max_turns == team.cores[0].unwrapped.max_turns == 6 == team.search_budget
    race = MultiHopTeamEnv(mode="competitive", max_turns=4, top_k=2, protocol="r3", **KW)
    base = race.cores[0].unwrapped
    assert (base.max_turns, base.top_k, base.protocol.name) == (4, 2, "r3")
    assert race.search_budget == 4 and race.cores[0].hash_dim == 16
    with pytest.raises(ValueError, match="make_featurized directly"):
        MultiHopTeamEnv(base_kwargs={"max_turns": 3}, **KW)


def _pick(team, infos, agent, prefix):
    """The index of ``agent``'s first action whose description starts with ``prefix``."""
    lines = team._describe(agent)
    for i, line in enumerate(lines):
        if line.startswith(prefix) and infos[agent]["action_mask"][i]:
            return i
    raise AssertionError(f"no {prefix!r} action for {agent}: {lines}")


def test_cooperative_team_solves_a_two_hop_question_and_shares_the_reward():
    team = parallel_env(mode="cooperative", **KW)
    wait_s, wait_a = team.action_space("searcher_0").n - 1, team.action_space("answerer_0").n - 1
    obs, infos = team.reset(seed=0, options={"question_id": "tiny-2"})
    # Both wait: the team spends a turn thinking.
    obs, rew, term, trunc, infos = team.step({"searcher_0": wait_s, "answerer_0": wait_a})
    assert infos["searcher_0"]["action_type"] == "think" and infos["answerer_0"]["actor"] == "team"
    obs, rew, term, trunc, infos = team.step({"searcher_0": 0, "answerer_0": wait_a})
    assert infos["searcher_0"]["action_type"] == "search"
    hop = _pick(team, infos, "searcher_0", "search: Maren Oskdal")
    obs, rew, term, trunc, infos = team.step({"searcher_0": hop, "answerer_0": wait_a})
    answer = _pick(team, infos, "answerer_0", "answer: Cardell")
    # The answerer's move wins over the searcher's in the same step.
    obs, rew, term, trunc, infos = team.step({"searcher_0": 0, "answerer_0": answer})
    assert term == {"searcher_0": True, "answerer_0": True}
    assert rew["searcher_0"] == rew["answerer_0"] == 1.0
    assert infos["answerer_0"]["reward_terms"] == {"outcome": 1.0}
    assert team.agents == []


def test_cooperative_masks_split_the_single_agent_mask():
    team = parallel_env(mode="cooperative", **KW)
    obs, infos = team.reset(seed=1)
    core = team.cores[0]
    full = core.action_masks()
    k, s = team.k, team.s
    assert np.array_equal(infos["searcher_0"]["action_mask"][:-1], full[: 1 + k + s])
    assert np.array_equal(infos["answerer_0"]["action_mask"][:-1], full[1 + k + s :])
    assert infos["searcher_0"]["action_mask"][-1] == infos["answerer_0"]["action_mask"][-1] == 1
    assert infos["searcher_0"]["action_mask"].dtype == np.int8


def test_competitive_race_shared_budget_and_winner():
    team = parallel_env(mode="competitive", n_racers=2, search_budget=2, **KW)
    obs, infos = team.reset(seed=0, options={"question_id": "tiny-1"})
    assert {i["question_id"] for i in infos.values()} == {"tiny-1"}
    obs, rew, term, trunc, infos = team.step({"racer_0": 0, "racer_1": 0})
    assert infos["racer_0"]["searches_left"] == 0
    # With the budget spent, searches are masked and become invalid turns.
    assert not infos["racer_1"]["action_mask"][0]
    obs, rew, term, trunc, infos = team.step(
        {"racer_0": _pick(team, infos, "racer_0", "answer: 1962"), "racer_1": team.cores[1].slot("search", 0)}
    )
    assert infos["racer_1"]["action_type"] == "invalid"
    assert infos["racer_0"]["winners"] == ["racer_0"] and rew["racer_0"] == 1.0
    assert term == {"racer_0": True, "racer_1": True} and team.agents == []


def test_competitive_wrong_answer_only_ends_that_racer():
    team = parallel_env(mode="competitive", n_racers=2, **KW)
    obs, infos = team.reset(seed=0, options={"question_id": "tiny-2"})
    obs, rew, term, trunc, infos = team.step({"racer_0": 0, "racer_1": 0})
    wrong = _pick(team, infos, "racer_0", "answer: Vashti")
    obs, rew, term, trunc, infos = team.step({"racer_0": wrong, "racer_1": 0})
    assert term["racer_0"] and not term["racer_1"] and team.agents == ["racer_1"]
    assert rew["racer_0"] == 0.0


def test_text_observations_list_the_actions():
    team = parallel_env(mode="cooperative", obs_mode="text", **KW)
    obs, infos = team.reset(seed=0)
    assert "Question:" in obs["searcher_0"] and "[0] search:" in obs["searcher_0"]
    assert "answerer" in obs["answerer_0"] and team.observation_space("answerer_0").contains(
        obs["answerer_0"]
    )
    team.render_mode = "ansi"
    assert "Question:" in team.render()
