"""RelevanceReward: gold support, judged relevance, sum/mean, R3-RAG scaling, bad arguments."""

from __future__ import annotations

import pytest
from reward_helpers import ScriptedInfoEnv, answer, invalid, route, run, search, tiny

from hopgym.rewards import AnswerCheck, CallableJudge, RelevanceReward, RewardArgumentError


def test_gold_mode_pays_each_supporting_doc_once():
    script = [search("q", ["d1", "d3"]), search("q", ["d1"]), search("q", ["d2"]), answer("Cardell")]
    env = RelevanceReward(ScriptedInfoEnv(script), weight=2.0)
    ep = run(env, "abcd")
    assert [i["reward_terms"]["relevance"] for i in ep.infos] == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize(
    ("last", "factor"), [(answer("Cardell"), 1.6), (answer("Lorn"), 0.8), (search("x"), 0.9)]
)
def test_r3_scaling_by_outcome(last, factor):
    script = [search("q", ["d1"]), route("web"), last]
    env = RelevanceReward(ScriptedInfoEnv(script), scaling=(1.6, 0.8, 0.9))
    ep = run(env, "abc")
    assert ep.terms["relevance"] == 0.5
    assert ep.terms["relevance_scale"] == pytest.approx((factor - 1) * 0.5)
    assert ep.total == pytest.approx(factor * 0.5)


def test_scaling_uses_the_given_answer_check():
    script = [search("q", ["d1"]), answer("port of Cardell")]
    strict = RelevanceReward(ScriptedInfoEnv(script), scaling=(2.0, 0.0, 0.0))
    loose = RelevanceReward(
        ScriptedInfoEnv(script), scaling=(2.0, 0.0, 0.0), answer_check=AnswerCheck("cover_em")
    )
    assert run(strict, "ab").total == 0.0
    assert run(loose, "ab").total == 1.0


def rel_by_query(question, reasoning, query, documents):
    return {"good": 1.0, "ok": 0.5}.get(query, 0.0)


seen: list[tuple] = []


def recording(question, reasoning, query, documents):
    seen.append((question, reasoning, query, tuple(documents)))
    return 0.7


def test_judge_mode_mean_pays_the_running_mean():
    script = [search("good", ["d1"]), search("ok", ["d2"]), search("bad", ["d3"]), answer("Cardell")]
    env = RelevanceReward(ScriptedInfoEnv(script), "judge", judge=CallableJudge(relevance_fn=rel_by_query))
    ep = run(env, "abcd")
    steps = [i["reward_terms"]["relevance"] for i in ep.infos]
    assert steps == pytest.approx([1.0, -0.25, -0.25, 0.0])
    assert ep.total == pytest.approx(0.5)  # mean(1, 0.5, 0)


def test_judge_mode_sum_and_what_the_judge_sees():
    seen.clear()
    script = [search("q1", ["d1"], think="need the founder"), search("q2", [])]
    env = RelevanceReward(
        ScriptedInfoEnv(script), "judge", aggregate="sum", judge=CallableJudge(relevance_fn=recording)
    )
    ep = run(env, "ab")
    assert ep.total == pytest.approx(0.7)  # the empty search is not judged: 0
    assert seen == [
        (
            "Where was the founder of Qelvor Dynamics born?",
            "need the founder",
            "q1",
            ("Qelvor Dynamics\nQelvor Dynamics was founded by Maren Oskdal.",),
        )
    ]


def test_non_search_turns_pay_nothing():
    script = [invalid(), route("web"), answer("Cardell")]
    env = RelevanceReward(ScriptedInfoEnv(script), scaling=(1.6, 0.8, 0.9))
    assert run(env, "abc").total == 0.0


def test_real_env_oracle_finds_all_support():
    env = RelevanceReward(tiny(None), weight=1.0)
    env.reset(options={"question_id": "tiny-3"})
    total = 0.0
    for q in ("Qelvor Dynamics founder", "Maren Oskdal born", "Cardell country"):
        total += env.step(f"<search>{q}</search>")[1]
    assert total == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "oracle"}, "mode must be one of"),
        ({"mode": "judge"}, "needs judge="),
        ({"aggregate": "max"}, "aggregate must be one of"),
        ({"scaling": (1.6, 0.8)}, "scaling must be"),
        ({"scaling": (1.6, -0.8, 0.9)}, "scaling factor must be >= 0"),
        ({"weight": -0.1}, "weight must be >= 0"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(RewardArgumentError, match=match):
        RelevanceReward(tiny(None), **kwargs)
