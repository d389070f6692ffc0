"""OutcomeReward and AnswerCheck: values per metric, judge fallback, no-answer, bad arguments."""

from __future__ import annotations

import pytest
from reward_helpers import ScriptedInfoEnv, answer, invalid, run, search, tiny

from hopgym.rewards import AnswerCheck, CallableJudge, OutcomeReward, RewardArgumentError


@pytest.mark.parametrize(
    ("metric", "text", "value"),
    [
        ("em", "Cardell", 1.0),
        ("em", "cardell city", 1.0),  # an alias
        ("em", "the port city Cardell", 0.0),
        ("f1", "Cardell port", 2 / 3),
        ("f1", "Cardell or Lorn", 0.0),  # hedged
        ("cover_em", "the port city Cardell", 1.0),
        ("cover_em", "Lorn Vashti Halvik Brenmark Cardell", 0.0),
        ("cover_em", "Lorn, Cardell", 0.0),
    ],
)
def test_outcome_values(metric, text, value):
    env = OutcomeReward(ScriptedInfoEnv([search("q", ["d1"]), answer(text)]), metric, weight=2.0)
    ep = run(env, ["a", "b"])
    assert ep.terminated
    assert ep.terms["outcome"] == pytest.approx(2.0 * value)
    assert ep.infos[0]["reward_terms"] == {"outcome": 0.0}


def test_no_answer_at_the_budget_gets_no_answer_value():
    env = OutcomeReward(ScriptedInfoEnv([search("q"), search("q2")]), no_answer=-0.5)
    ep = run(env, ["a", "b"])
    assert ep.truncated and ep.total == -0.5


def test_real_env_budget_truncation():
    env = OutcomeReward(tiny(None, max_turns=3), no_answer=-1.0)
    ep = run(env, ["<think>a</think>"] * 3)
    assert ep.truncated and ep.total == -1.0 and ep.steps == 3


calls: list[str] = []


def yes_if_oskdal(question, prediction, golds):
    calls.append(prediction)
    return "oskdal" in prediction.lower() or "cardell" in prediction.lower()


def test_judge_is_asked_only_after_string_match_fails_and_only_for_admissible_answers():
    calls.clear()
    judge = CallableJudge(answer_fn=yes_if_oskdal)
    check = AnswerCheck("judge", judge)
    assert check.score("q", "Cardell", ["Cardell"]) == 1.0 and calls == []  # string match
    assert check.score("q", "Cardell town", ["Cardell"]) == 1.0 and calls == ["Cardell town"]
    assert check.score("q", "Lorn or Cardell", ["Cardell"]) == 0.0  # hedged: not asked
    assert check.score("q", "Cardell " * 30, ["Cardell"]) == 0.0  # pasted: not asked
    assert check.score("q", None, ["Cardell"]) == 0.0
    assert calls == ["Cardell town"]


def test_judge_metric_in_the_wrapper():
    judge = CallableJudge(answer_fn=yes_if_oskdal)
    env = OutcomeReward(ScriptedInfoEnv([answer("the town of Cardell")]), "judge", judge=judge)
    assert run(env, ["a"]).total == 1.0
    env = OutcomeReward(ScriptedInfoEnv([answer("Lorn")]), "judge", judge=judge)
    assert run(env, ["a"]).total == 0.0


def test_judge_as_fallback_of_f1_takes_the_larger_score():
    judge = CallableJudge(answer_fn=lambda q, p, g: 0.5)
    check = AnswerCheck("f1", judge)
    assert check.score("q", "Cardell port", ["Cardell"]) == pytest.approx(2 / 3)
    assert check.score("q", "Lorn", ["Cardell"]) == 0.5


def test_correct_threshold():
    assert AnswerCheck("f1", correct_threshold=0.5).correct("q", "Cardell port", ["Cardell"])
    assert not AnswerCheck("f1").correct("q", "Cardell port", ["Cardell"])


def test_invalid_turns_do_not_end_or_pay():
    env = OutcomeReward(ScriptedInfoEnv([invalid(), answer("Cardell")]))
    ep = run(env, ["a", "b"])
    assert [i["reward_terms"]["outcome"] for i in ep.infos] == [0.0, 1.0]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"metric": "bleu"}, "metric must be one of"),
        ({"metric": "judge"}, "needs judge="),
        ({"weight": -1.0}, "weight must be >= 0"),
        ({"weight": float("nan")}, "finite"),
        ({"no_answer": "x"}, "no_answer must be a finite number"),
        ({"max_extra_tokens": -2}, "max_extra_tokens"),
        ({"judge": object()}, "judge must implement"),
        ({"name": "bad name"}, "identifier"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(RewardArgumentError, match=match):
        OutcomeReward(tiny(None), **kwargs)
