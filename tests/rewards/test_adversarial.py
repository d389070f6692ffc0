"""No policy earns more than the honest correct answer, for every preset (the rewards' guarantee).

Adversaries (see ``reward_helpers.ADVERSARIES``): candidate stuffing ("A, B, C", "A or B", aliases
joined by "/"), an answer tag inside a think or a search, the answer text in a query, searching to
the step limit (with and without a correct answer at the end), repeating a query, pasting the
retrieved documents as the answer, empty and punctuation-only answers, wrong answers, invalid-turn
spam before a correct answer, thinking to the limit; and against the lenient parse, an answer in
a closed ``<think>``, two answers, an answer beside an ``<information>`` block, a search and an
answer in one turn, an answer cut before ``</answer>``, R3's two final answers or a final answer
followed by documents. The oracle routes where each hop's document lives, searches each hop and
answers the gold.

"Honest" adversaries that end with the exact gold answer may tie the oracle; so may the "sloppy"
ones (the gold in a malformed turn the lenient parse reads: an unclosed ``<think>``, text outside
the tags, ...) except in the presets that pay for format (``searchr1``, ``r3rag``), where they must
earn strictly less; every other one must earn strictly less, on every question, in both parse
modes.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from reward_helpers import (
    ADVERSARIES,
    ORACLE,
    SLOPPY,
    TINY_IDS,
    TOOL_ADVERSARIES,
    TOOL_HONEST,
    play,
    run,
    tiny,
)

from hopgym.rewards import PRESETS, preset
from hopgym.rewards.judges import CallableJudge
from hopgym.rewards.scoring import normalize_answer
from hopgym.turns import PARSE_MODES

HONEST = {"search_to_limit_then_correct", "repeat_query_then_correct", "invalid_spam_then_correct"}
SLOPPY_NAMES = {p.name for p in SLOPPY}
#: The presets whose papers pay for format: a sloppy correct answer earns less there.
FORMAT_PAYING = {"searchr1", "r3rag"}


def check(name: str, parse: str, qid: str, adv, ep, oracle) -> None:
    """The guarantee for one adversary episode against the oracle's."""
    if (
        adv.name in HONEST
        or adv.name in TOOL_HONEST
        or (adv.name in SLOPPY_NAMES and (name not in FORMAT_PAYING or parse == "strict"))
    ):
        assert ep.total <= oracle.total + 1e-9, (qid, adv, ep.terms, oracle.terms)
    else:
        assert ep.total < oracle.total - 1e-9, (qid, adv, ep.terms, oracle.terms)


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


def make(name: str, judge, sources, parse: str = "lenient", protocol: str = "tags") -> gym.Env:
    return preset(tiny(None, sources=sources, max_turns=6, parse=parse, protocol=protocol), name, judge=judge)


@pytest.mark.parametrize("parse", PARSE_MODES)
@pytest.mark.parametrize("sources", SOURCES, ids=["local", "routing"])
@pytest.mark.parametrize(("name", "judge"), VARIANTS, ids=VARIANT_IDS)
def test_no_adversary_beats_the_oracle(name, judge, sources, parse):
    env = make(name, judge, sources, parse)
    for qid in TINY_IDS:
        oracle = play(env, ORACLE, qid)
        assert oracle.terminated and oracle.total > 0, (qid, oracle.terms)
        for adv in ADVERSARIES:
            check(name, parse, qid, adv, play(env, adv, qid), oracle)


def synthetic(name: str, judge, protocol: str = "tags", parse: str = "lenient") -> gym.Env:
    from hopgym.envs.registration import make_synthetic
    from hopgym.turns import get_protocol

    env = make_synthetic(
        seed=3,
        n_entities=300,
        n_questions=40,
        hops=(1, 2, 3, 4),
        sources=("local", "web"),
        reward=None,
        max_turns=10,
        protocol=get_protocol(protocol, parse=parse),
    )
    return preset(env, name, judge=judge)


SYNTHETIC_CASES = (
    [(n, j, "tags") for n, j in VARIANTS]
    + [("default", None, "r3"), ("r3rag", None, "r3")]
    + [(n, j, "tools") for n, j in VARIANTS]
)


@pytest.mark.parametrize("parse", PARSE_MODES)
@pytest.mark.parametrize(
    ("name", "judge", "protocol"),
    SYNTHETIC_CASES,
    ids=[f"{i}-tags" for i in VARIANT_IDS] + ["default-r3", "r3rag-r3"] + [f"{i}-tools" for i in VARIANT_IDS],
)
def test_no_adversary_beats_the_oracle_in_the_synthetic_routing_world(name, judge, protocol, parse):
    env = synthetic(name, judge, protocol, parse)
    ids = [s.id for s in env.unwrapped.task.samples][:12]
    kinds = {env.unwrapped.task.samples[i].kind for i in range(12)}
    assert len(kinds) >= 3  # bridges, comparisons, yes/no, ... are all covered
    for qid in ids:
        oracle = play(env, ORACLE, qid)
        assert oracle.terminated and oracle.terms["outcome"] > 0, (qid, oracle.terms)
        for adv in ADVERSARIES + (TOOL_ADVERSARIES if protocol == "tools" else ()):
            check(name, parse, qid, adv, play(env, adv, qid), oracle)


@pytest.mark.parametrize("parse", PARSE_MODES)
@pytest.mark.parametrize("sources", SOURCES, ids=["local", "routing"])
@pytest.mark.parametrize(("name", "judge"), VARIANTS, ids=VARIANT_IDS)
def test_no_adversary_beats_the_oracle_in_the_tools_protocol(name, judge, sources, parse):
    # The tag adversaries' text turns are invalid calls here (no tool call): they must lose too;
    # the structured ones are written as tool calls, and the tools protocol's own adversaries
    # (all calls in one turn, two answers, a call inside <think>, 50 calls, ...) play as well.
    env = make(name, judge, sources, parse, "tools")
    for qid in TINY_IDS:
        oracle = play(env, ORACLE, qid)
        assert oracle.terminated and oracle.total > 0, (qid, oracle.terms)
        assert oracle.infos[-1]["action_type"] == "answer"
        for adv in ADVERSARIES + TOOL_ADVERSARIES:
            check(name, parse, qid, adv, play(env, adv, qid), oracle)


@pytest.mark.parametrize("protocol", ["tags", "r3"])
def test_the_lenient_parse_reads_sloppy_correct_answers_and_format_presets_charge_them(protocol):
    # The sloppy policies are real tests of the lenient parse: it reads each of its protocol's
    # ones as the gold answer, with format issues (EM 1 under "em"), and the format-paying presets
    # pay it less than the oracle. The strict parse refuses them, reads extra text into the
    # answer, or (text outside the tags, which it always accepted) reports the issue too.
    own = [p for p in SLOPPY if p.name.startswith("sloppy_r3") == (protocol == "r3")]
    for name in ("em", *sorted(FORMAT_PAYING)):
        for parse in PARSE_MODES:
            env = make(name, None, ("local", "web"), parse, protocol)
            for qid in TINY_IDS[:3]:
                oracle = play(env, ORACLE, qid)
                gold = env.unwrapped.sample.answer
                for adv in own:
                    ep = play(env, adv, qid)
                    last = ep.infos[len(oracle.infos) - 1]
                    read = last["action_type"] == "answer" and last["answer"] == gold
                    assert not (read and not last["format_issues"]), (adv, parse, last)
                    assert read or parse == "strict", (adv, last)
                    if not read:
                        continue
                    if name == "em":
                        assert ep.total == oracle.total == 1.0
                    else:
                        assert ep.total < oracle.total - 1e-9, (adv, ep.terms, oracle.terms)


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
            direct = run(env, lambda o, i, s: f"<answer>{s.answer}</answer>", options={"question_id": qid})
            farm = play(env, next(a for a in ADVERSARIES if a.name == "search_to_limit"), qid)
            assert farm.total < direct.total, (name, qid, farm.terms, direct.terms)
