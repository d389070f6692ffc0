"""SearchCostReward and RedundancyReward: charges per source, repeats, STIE, bad arguments."""

from __future__ import annotations

import pytest
from reward_helpers import ScriptedInfoEnv, answer, invalid, route, run, search, tiny

from hopgym.envs import Route, Search
from hopgym.rewards import RedundancyReward, RewardArgumentError, SearchCostReward


def test_costs_come_from_the_sources_with_overrides():
    env = ScriptedInfoEnv(
        [search("a"), route("web"), search("b", source="web"), invalid(), answer("x")],
        costs={"local": 0.1, "web": 1.0},
    )
    ep = run(SearchCostReward(env, weight=0.5, per_search=0.02, route_cost=0.01), "abcde")
    assert [i["reward_terms"]["search_cost"] for i in ep.infos] == pytest.approx(
        [-0.06, -0.005, -0.51, 0.0, 0.0]
    )
    over = SearchCostReward(ScriptedInfoEnv([]), costs={"web": 3.0})
    assert over.costs == {"local": 0.0, "web": 3.0}


def test_routing_to_the_web_has_a_price_in_the_real_env():
    env = SearchCostReward(tiny(None, sources=("local", "web")), per_search=0.1)
    env.reset(options={"question_id": "tiny-5"})
    local = env.step(Search("The Glass Orchard"))[1]
    assert env.step(Route("web"))[1] == 0.0
    web = env.step(Search("The Glass Orchard"))[1]
    assert (local, web) == pytest.approx((-0.1, -1.1))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"costs": {"moon": 1.0}}, "unknown source"),
        ({"costs": {"web": -1.0}}, "cost of source 'web' must be >= 0"),
        ({"per_search": -0.1}, "per_search must be >= 0"),
        ({"weight": -2}, "weight must be >= 0"),
    ],
)
def test_search_cost_bad_arguments(kwargs, match):
    with pytest.raises(RewardArgumentError, match=match):
        SearchCostReward(tiny(None, sources=("local", "web")), **kwargs)


def test_search_cost_needs_a_task():
    import gymnasium as gym

    with pytest.raises(RewardArgumentError, match="needs env.unwrapped.task"):
        SearchCostReward(gym.make("CartPole-v1"))


def test_repeated_queries_any_order_and_case():
    script = [
        search("Maren Oskdal born"),
        search("born maren oskdal!"),
        search("Lorn"),
        search("Maren Oskdal father"),
    ]
    ep = run(RedundancyReward(ScriptedInfoEnv(script), query_penalty=0.2), "abcd")
    assert [i["reward_terms"]["redundant_query"] for i in ep.infos] == [0.0, -0.2, 0.0, 0.0]
    loose = RedundancyReward(ScriptedInfoEnv(script), query_penalty=0.2, query_similarity=0.5)
    assert run(loose, "abcd").terms["redundant_query"] == pytest.approx(-0.4)


def test_re_retrieved_documents():
    script = [
        search("a", ["d1"], retrieved=["d1", "d2"]),
        search("b", [], retrieved=["d2", "d1"]),
        search("c", ["d3"], retrieved=["d3", "d3"]),
    ]
    ep = run(RedundancyReward(ScriptedInfoEnv(script), query_penalty=0.0, doc_penalty=0.05), "abc")
    assert set(ep.terms) == {"redundant_docs"}
    assert [i["reward_terms"]["redundant_docs"] for i in ep.infos] == pytest.approx([0.0, -0.1, 0.0])


def test_stie_blocks_repeated_and_similar_answers():
    # An env that lets the agent answer several times (MultiHopQAEnv ends at the first answer).
    answers = ["Maren Oskdal", "Maren Oskdal Lee", "Cardell", "maren oskdal", "Tobin Reyes", "Halvik"]
    env = ScriptedInfoEnv([answer(a) for a in answers], answer_ends=False)
    ep = run(RedundancyReward(env, query_penalty=0.0, answer_penalty=0.3), "abcdef")
    got = [i["reward_terms"]["redundant_answer"] for i in ep.infos]
    # 2: similarity 2/3 to the previous answer -> difference 1/3 >= 0.25: accepted;
    # 4: seen before: blocked; 5: new; 6: new (differs from 1, 2 and 3 rounds back).
    assert got == [0.0, 0.0, 0.0, -0.3, 0.0, 0.0]
    stricter = RedundancyReward(
        ScriptedInfoEnv([answer(a) for a in answers], answer_ends=False),
        query_penalty=0.0,
        answer_penalty=0.3,
        stie_thresholds=(0.5,),
    )
    assert [i["reward_terms"]["redundant_answer"] for i in run(stricter, "abcdef").infos] == [
        0.0,
        -0.3,
        0.0,
        -0.3,
        0.0,
        0.0,
    ]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"query_penalty": 0.0}, "does nothing"),
        ({"query_penalty": -1.0}, "query_penalty must be >= 0"),
        ({"query_similarity": 0.0}, "in \\(0, 1\\]"),
        ({"query_similarity": 1.5}, "query_similarity must be <= 1"),
        ({"stie_thresholds": (0.2, 2.0)}, "STIE threshold must be <= 1"),
    ],
)
def test_redundancy_bad_arguments(kwargs, match):
    with pytest.raises(RewardArgumentError, match=match):
        RedundancyReward(tiny(None), **kwargs)
