from __future__ import annotations

import re

import pytest

from hopgym.agents.evaluation import evaluate, run_episode
from hopgym.agents.iterative import IterativeAgent, Side, extract, parse_question
from hopgym.agents.scripted import DirectAgent, OracleAgent
from hopgym.corpora.synthetic import RELATION_SENTENCES, SENTENCES, WorldConfig, generate_world
from hopgym.corpora.types import Passage
from hopgym.envs.multihop_qa import MultiHopQAEnv
from hopgym.tasks.synthetic import build_task
from hopgym.turns import Answer, Route, Search

DEFAULT = WorldConfig(n_questions=300)
ROUTING = WorldConfig(n_questions=300, sources=("local", "web"))
ALL = WorldConfig(n_entities=1500, n_questions=400, hops=(1, 2, 3, 4), seed=5)


def make_env(cfg: WorldConfig, max_turns: int = 8):
    return MultiHopQAEnv(build_task(cfg), max_turns=max_turns)


def lookups(plan) -> int:
    return sum(len(side.relations) for side in plan.sides) + (
        len(plan.sides) if plan.kind == "compare" else 1
    )


def test_every_generated_question_parses_into_its_hops():
    for s in generate_world(ALL).samples:
        plan = parse_question(s.question)
        assert plan is not None, s.question
        assert lookups(plan) == s.hops, s.question
        names = [side.name for side in plan.sides]
        assert all(t in names for t in s.metadata["topics"]), (s.question, names)


def test_parse_examples():
    p = parse_question("In what year was the spouse of the founder of Qel Labs born?")
    assert p.kind == "chain" and p.target == "birth_year"
    assert p.sides == [Side("Qel Labs", ["founder", "spouse"])]
    p = parse_question("Who is the paternal grandfather of Kiro Lant II?")
    assert p.sides == [Side("Kiro Lant II", ["father"])] and p.target == "father"
    p = parse_question("Which film has the director who was born first, The Iron Storm or Vel?")
    assert p.kind == "compare" and p.answer_topic and p.mode == "first"
    assert [s.relations for s in p.sides] == [["director"], ["director"]]
    p = parse_question("Who was born first, the director of The Iron Storm or Mira Tass?")
    assert p.sides == [Side("The Iron Storm", ["director"]), Side("Mira Tass")]
    assert not p.answer_topic
    assert parse_question("What is the meaning of life?") is None


@pytest.mark.parametrize("relation", sorted(RELATION_SENTENCES))
def test_extract_reads_every_phrasing(relation):
    values = {
        "year": "1987",
        "pop": "1,234,567",
        "n": "400",
        "a_occ": "a painter",
        "a_industry": "an energy",
        "a_genre": "a drama",
        "genre": "drama",
        "occ": "painter",
        "field": "music",
        "He": "She",
        "he": "she",
        "His": "Her",
        "his": "her",
        "child": "daughter",
    }
    for key, target in RELATION_SENTENCES[relation]:
        for template in SENTENCES[key]:
            fields = dict.fromkeys(re.findall(r"\{(\w+)\}", template), "Vel Qormira")
            fields.update({k: v for k, v in values.items() if k in fields})
            if target not in values:
                fields[target] = "Tass Ondrel"
            sentence = template.format(**fields)
            doc = Passage("x", "T", f"Not to be confused with Ab Cd. {sentence} It is old.")
            assert extract(relation, [doc]) == fields[target], (template, sentence)


def test_extract_trusts_the_first_matching_passage():
    wrong = Passage("a", "Qel Labs Group", "It was founded in 1990 by Mira Tass.")
    right = Passage("b", "Qel Labs", "It was founded in 1987 by Kiro Lant.")
    assert extract("founder", [wrong, right]) == "Mira Tass"
    assert extract("founder", [Passage("c", "X", "He founded Qel Labs in 1987.")]) is None


def test_agent_follows_hops_through_the_env():
    env = make_env(DEFAULT)
    agent = IterativeAgent(seed=0)
    res = run_episode(env, agent, seed=0, options={"index": 0}, record=True)
    sample = env.unwrapped.sample
    kinds = [t["action_type"] for t in res["turns"]]
    assert kinds[-1] == "answer" and kinds.count("search") >= sample.hops
    assert res["invalid"] == 0


def test_agent_scores_between_no_retrieval_and_the_oracle():
    env = make_env(DEFAULT)
    it = evaluate(env, IterativeAgent(), episodes=200, seed=0)
    direct = evaluate(env, DirectAgent(), episodes=200, seed=0)
    oracle = evaluate(env, OracleAgent(env), episodes=200, seed=0)
    assert oracle["em"] == 1.0
    assert direct["em"] + 0.25 < it["em"] < 0.85
    assert it["invalid_rate"] == 0.0 and it["answered"] == 1.0
    assert it["avg_searches"] >= 2.0


def test_distractors_make_the_world_harder_for_the_agent():
    easy = make_env(WorldConfig(n_questions=300, distractors=0.0))
    hard = make_env(WorldConfig(n_questions=300, distractors=1.0))
    assert (
        evaluate(easy, IterativeAgent(), 200, seed=0)["em"]
        > evaluate(hard, IterativeAgent(), 200, seed=0)["em"] + 0.05
    )


def test_agent_routes_to_the_web_when_local_lacks_the_fact():
    env = make_env(ROUTING)
    m = evaluate(env, IterativeAgent(), episodes=150, seed=0)
    direct = evaluate(env, DirectAgent(), episodes=150, seed=0)
    assert m["searches_by_source"].get("web", 0) > 0.2
    assert m["searches_by_source"]["local"] > m["searches_by_source"]["web"] * 0.5
    assert direct["em"] + 0.2 < m["em"] < 0.85


def test_agent_works_from_observation_text_alone():
    env = make_env(DEFAULT)
    agent = IterativeAgent()
    agent.reset()
    obs, info = env.reset(seed=0, options={"index": 3})
    action = agent.act(obs, info)
    for _ in range(8):
        obs, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
        info = {k: v for k, v in info.items() if k != "documents"}
        action = agent.act(obs, info)
    assert terminated


def test_agent_answers_within_a_tight_budget():
    env = make_env(ALL, max_turns=3)
    m = evaluate(env, IterativeAgent(), episodes=60, seed=1)
    assert m["answered"] == 1.0


def test_agent_structured_actions_and_reset():
    agent = IterativeAgent()
    info = {
        "question": "Who founded Qel Labs?",
        "sources": ("local", "web"),
        "source": "local",
        "max_turns": 8,
    }
    first = agent.act("", info)
    assert first == Search("Qel Labs founder", think="look up founder of Qel Labs")
    nothing = {"documents": [], "turns_left": 7}
    assert isinstance(agent.act("", nothing), Route)
    again = agent.act("", {"documents": [], "turns_left": 6})
    assert isinstance(again, Search) and again.query == "Qel Labs founder"
    doc = Passage("e1", "Qel Labs", "Qel Labs was founded by nobody. It was founded in 1901 by Ana Vel.")
    assert agent.act("", {"documents": [doc], "turns_left": 5}) == Answer(
        "Ana Vel", think="followed every hop"
    )
    agent.reset()
    assert isinstance(agent.act("", {"question": "Nonsense?", "max_turns": 8}), Answer)
