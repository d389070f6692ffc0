"""No policy earns more than the honest correct answer, for every preset (the rewards' guarantee).

Adversaries (see ``reward_helpers.ADVERSARIES``): candidate stuffing ("A, B, C", "A or B", aliases
joined by "/"), an answer tag inside a think or a search, the answer text in a query, searching to
the step limit (with and without a correct answer at the end), repeating a query, pasting the
retrieved documents as the answer, empty and punctuation-only answers, wrong answers, invalid-turn
spam before a correct answer, thinking to the limit. The oracle routes where each hop's document
lives, searches each hop and answers the gold.

"Honest" adversaries that end with the exact gold answer may tie the oracle; every other one must
earn strictly less, on every question.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from reward_helpers import ADVERSARIES, ORACLE, TINY_IDS, play, run, tiny

from hopgym.rewards import PRESETS, preset
from hopgym.rewards.judges import CallableJudge
from hopgym.rewards.scoring import normalize_answer

HONEST = {"search_to_limit_then_correct", "repeat_query_then_correct",
          "invalid_spam_then_correct"}


def gullible_answer(question: str, prediction: str, golds) -> bool:
    """A judge that says yes whenever a gold appears anywhere in the prediction (gameable)."""
    pred = f" {normalize_answer(prediction)} "
    return any(f" {normalize_answer(g)} " in pred for g in golds)


def generous_relevance(question: str, reasoning: str, query: str, documents) -> float:
    """A judge that rates every retrieval fully relevant (the worst case for search farming)."""
    return 1.0


JUDGE = CallableJudge(gullible_answer, generous_relevance)
VARIANTS = [(name, None) for name in PRESETS] + [("r3rag", JUDGE)]
VARIANT_IDS = [n if j is None else f"{n}+judge" for n, j in VARIANTS]
SOURCES = [("local",), ("local", "web")]


def make(name: str, judge, sources) -> gym.Env:
    return preset(tiny(None, sources=sources, max_turns=6), name, judge=judge)


@pytest.mark.parametrize("sources", SOURCES, ids=["local", "routing"])
@pytest.mark.parametrize(("name", "judge"), VARIANTS, ids=VARIANT_IDS)
def test_no_adversary_beats_the_oracle(name, judge, sources):
    env = make(name, judge, sources)
    for qid in TINY_IDS:
        oracle = play(env, ORACLE, qid)
        assert oracle.terminated and oracle.total > 0, (qid, oracle.terms)
        for adv in ADVERSARIES:
            ep = play(env, adv, qid)
            if adv.name in HONEST:
                assert ep.total <= oracle.total + 1e-9, (qid, adv, ep.terms, oracle.terms)
            else:
                assert ep.total < oracle.total - 1e-9, (qid, adv, ep.terms, oracle.terms)


def synthetic(name: str, judge, protocol: str = "tags") -> gym.Env:
    from hopgym.envs.registration import make_synthetic

    env = make_synthetic(seed=3, n_entities=300, n_questions=40, hops=(1, 2, 3, 4),
                         sources=("local", "web"), reward=None, max_turns=10, protocol=protocol)
    return preset(env, name, judge=judge)


SYNTHETIC_CASES = [(n, j, "tags") for n, j in VARIANTS] + [("default", None, "r3"),
                                                           ("r3rag", None, "r3")]


@pytest.mark.parametrize(("name", "judge", "protocol"), SYNTHETIC_CASES,
                         ids=[f"{i}-tags" for i in VARIANT_IDS] + ["default-r3", "r3rag-r3"])
def test_no_adversary_beats_the_oracle_in_the_synthetic_routing_world(name, judge, protocol):
    env = synthetic(name, judge, protocol)
    ids = [s.id for s in env.unwrapped.task.samples][:12]
    kinds = {env.unwrapped.task.samples[i].kind for i in range(12)}
    assert len(kinds) >= 3  # bridges, comparisons, yes/no, ... are all covered
    for qid in ids:
        oracle = play(env, ORACLE, qid)
        assert oracle.terminated and oracle.terms["outcome"] > 0, (qid, oracle.terms)
        for adv in ADVERSARIES:
            ep = play(env, adv, qid)
            if adv.name in HONEST:
                assert ep.total <= oracle.total + 1e-9, (qid, adv, ep.terms, oracle.terms)
            else:
                assert ep.total < oracle.total - 1e-9, (qid, adv, ep.terms, oracle.terms)


@pytest.mark.parametrize(("name", "judge"), VARIANTS, ids=VARIANT_IDS)
def test_oracle_reaches_the_preset_maximum(name, judge):
    env = make(name, judge, ("local", "web"))
    expected_max = {"default": 1.0, "em": 1.0, "f1": 1.0, "searchr1": 1.2, "r3rag": 3.6}
    for qid in TINY_IDS:
        ep = play(env, ORACLE, qid)
        if name == "kunlun":  # the outcome minus the cost of the searches the question needs
            assert 0.5 <= ep.total < 1.0
            assert ep.terms["search_cost"] < 0 and ep.terms["outcome"] == 1.0
        else:
            assert ep.total == pytest.approx(expected_max[name]), (qid, ep.terms)


def test_wrong_answers_earn_less_than_correct_ones_without_search_under_every_preset():
    # A correct answer with no search at all beats the best non-answer (a search-bonus exploit
    # in peers paid "five searches and a wrong answer" more).
    for name, judge in VARIANTS:
        env = make(name, judge, ("local",))
        for qid in TINY_IDS:
            direct = run(env, lambda o, i, s: f"<answer>{s.answer}</answer>",
                         options={"question_id": qid})
            farm = play(env, next(a for a in ADVERSARIES if a.name == "search_to_limit"), qid)
            assert farm.total < direct.total, (name, qid, farm.terms, direct.terms)
