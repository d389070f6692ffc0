"""Presets: names, stacks, gym.make(reward=...), pickling."""

from __future__ import annotations

import pickle

import gymnasium as gym
import pytest
from reward_helpers import ORACLE, play, tiny

import hopgym  # noqa: F401  (registers the ids)
import hopgym.rewards
from hopgym.rewards import PRESETS, CallableJudge, RelevanceReward, preset, reward_terms_of
from hopgym.rewards.presets import KUNLUN_COST_BUDGET

TERMS = {
    "default": ["outcome"],
    "em": ["outcome"],
    "f1": ["outcome"],
    "searchr1": ["format_bonus", "outcome"],
    "r3rag": ["format", "relevance", "relevance_scale", "outcome"],
    "kunlun": ["redundant_query", "search_cost", "format", "outcome"],
}


@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_through_gym_make(name):
    env = gym.make("hopgym/Tiny-v1", reward=name)
    assert reward_terms_of(env) == TERMS[name]
    ep = play(env, ORACLE, "tiny-2")
    assert ep.terminated and ep.total > 0
    assert set(ep.terms) == set(TERMS[name])
    clone = pickle.loads(pickle.dumps(env))
    assert play(clone, ORACLE, "tiny-2").total == ep.total


def test_none_returns_the_env_and_the_default_is_exact_match():
    env = tiny(None)
    assert preset(env, None) is env
    env = gym.make("hopgym/Tiny-v1")  # reward="default"
    assert reward_terms_of(env) == ["outcome"]
    env.reset(options={"question_id": "tiny-1"})
    assert env.step("<answer>1962</answer>")[1] == 1.0
    env.reset(options={"question_id": "tiny-1"})
    assert env.step("<answer>1962 or 1963</answer>")[1] == 0.0


def test_unknown_names_list_the_presets():
    with pytest.raises(ValueError, match="unknown reward preset 'r4rag'.*'default'.*'kunlun'"):
        preset(tiny(None), "r4rag")
    with pytest.raises(ValueError, match="choose one of"):
        preset(tiny(None), 3)
    with pytest.raises(ValueError, match="unknown reward preset"):
        gym.make("hopgym/Tiny-v1", reward="nope")


@pytest.mark.parametrize(
    ("alias", "name"), [("search-r1", "searchr1"), ("R3-RAG", "r3rag"), ("EM", "em"), (" kunlun ", "kunlun")]
)
def test_aliases(alias, name):
    assert reward_terms_of(preset(tiny(None), alias)) == TERMS[name]


def test_reexported_from_the_package():
    assert hopgym.rewards.preset is preset


def test_r3rag_with_a_judge_uses_judged_relevance():
    judge = CallableJudge(lambda q, p, g: False, lambda q, r, s, d: 0.5)
    env = preset(tiny(None), "r3rag", judge=judge)
    rel = env.env
    assert isinstance(rel, RelevanceReward) and rel.mode == "judge" and rel.aggregate == "mean"
    ep = play(env, ORACLE, "tiny-2")
    assert ep.total == pytest.approx(2.0 + 1.6 * 0.5)


@pytest.mark.parametrize("sources", [("local",), ("local", "web")])
def test_kunlun_costs_are_normalised_to_the_budget(sources):
    env = preset(tiny(None, sources=sources, max_turns=6), "kunlun")
    cost = env.get_wrapper_attr("costs")
    weight = env.env.weight
    assert max(cost.values()) * weight * 5 == pytest.approx(KUNLUN_COST_BUDGET)
    if len(sources) == 2:
        assert cost["web"] > cost["local"]


def test_terms_in_a_vector_env_sum_to_the_rewards():
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("hopgym/Tiny-v1", reward="r3rag", max_turns=3)] * 2)
    envs.reset(seed=0, options={"question_id": "tiny-2"})
    # env 1 ends at its invalid turn (-0.9) and is reset on the next step (reward 0).
    expected = ([0.5, -0.9], [2.0 + 0.6 * 0.5, 0.0])
    for actions, want in zip(
        (
            ["<search>Qelvor Dynamics founder</search>", "garbage"],
            ["<answer>Cardell</answer>", "<answer>x</answer>"],
        ),
        expected,
        strict=True,
    ):
        _, rewards, *_, info = envs.step(actions)
        terms = info["reward_terms"]
        total = sum(terms[n] for n in ("outcome", "relevance", "relevance_scale", "format"))
        assert list(rewards) == pytest.approx(list(total))
        assert list(rewards) == pytest.approx(want)
    envs.close()


@pytest.mark.parametrize(
    ("name", "clean", "sloppy"),
    [
        ("default", 1.0, 1.0),  # format is free: EM of what was answered
        ("kunlun", 1.0, 1.0),  # invalid turns cost, format issues do not
        ("searchr1", 1.2, 1.0),  # the bonus needs a clean episode
        ("r3rag", 3.6, 3.5),  # -0.1 per turn with issues
    ],
)
def test_format_issues_cost_only_in_the_presets_that_pay_for_format(name, clean, sloppy):
    from hopgym.rewards.presets import R3_ISSUE_PENALTY

    assert R3_ISSUE_PENALTY == 0.1
    for answer, expected in [
        ("<answer>1962</answer>", clean),
        ("<think>it was 1962<answer>1962</answer>", sloppy),
    ]:
        env = gym.make("hopgym/Tiny-v1", reward=name)
        env.reset(options={"question_id": "tiny-1"})
        total = env.step("<think>x</think><search>Qelvor Dynamics founded</search>")[1]
        if name == "kunlun":  # searches cost: compare the outcome and format terms only
            info = env.step(answer)[4]
            terms = info["reward_terms"]
            assert terms["outcome"] + terms["format"] == pytest.approx(expected)
            continue
        total += env.step(answer)[1]
        assert total == pytest.approx(expected), (name, answer)
