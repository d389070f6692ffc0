"""The one question reader: its two readings, and that the featurized env and the iterative agent
both use it."""

from __future__ import annotations

import pytest

import hopgym.agents.iterative as iterative
import hopgym.envs.featurized as featurized
from hopgym.corpora import questions
from hopgym.corpora.questions import Plan, Side, entity_key, parse_question, read_question
from hopgym.corpora.synthetic import WorldConfig, generate_world


def test_featurized_env_and_iterative_agent_share_the_reader():
    assert featurized.read_question is questions.read_question
    assert featurized.QuestionInfo is questions.QuestionInfo
    assert featurized.CONCEPTS is questions.CONCEPTS
    # The agent's old names are the reader's, not copies.
    assert iterative.parse_question is questions.parse_question
    assert (iterative.Plan, iterative.Side) == (questions.Plan, questions.Side)
    assert not hasattr(iterative, "_template_regex") and not hasattr(iterative, "_parse_np")


def test_every_synthetic_question_reads_both_ways():
    world = generate_world(WorldConfig(n_entities=600, n_questions=200, hops=(1, 2, 3, 4), seed=3))
    for s in world.samples:
        q = read_question(s.question)
        assert q.plan == parse_question(s.question) and q.plan is not None, s.question
        assert q.chain, s.question  # the lexicon finds a relation in every synthetic question
        names = [side.name for side in q.plan.sides]
        assert all(t in names for t in s.metadata["topics"]), (s.question, names)


def test_plan_is_fresh_and_none_off_template():
    q = read_question("Where was the founder of Qelvor Dynamics born?")
    assert q is read_question("Where was the founder of Qelvor Dynamics born?")  # cached
    a, b = q.plan, q.plan
    assert a == b == Plan("chain", [Side("Qelvor Dynamics", ["founder"])], "birthplace")
    a.sides[0].relations.append("spouse")  # a caller may change its plan ...
    assert q.plan == b  # ... without changing the next reader's
    hotpot = read_question("Which magazine was started first, Arthur's Magazine or First for Women?")
    assert hotpot.plan is None
    assert hotpot.wh == "choice" and hotpot.options == ("Arthur's Magazine", "First for Women")
    assert hotpot.chain == ("found",) and hotpot.wants == "min"


@pytest.mark.parametrize(
    ("question", "wh"),
    [
        ("Who founded Qelvor Dynamics?", "who"),
        ("In which year was Lorn University established?", "when"),
        ("Are Ann Lee and Bo Tam in the same country?", "yesno"),
        ("Name the capital of Kadaristan.", "other"),
        ("", "other"),
    ],
)
def test_question_types(question, wh):
    assert read_question(question).wh == wh


def test_entity_keys_drop_articles_and_punctuation():
    assert entity_key("The Glass Orchard") == entity_key("glass orchard,") == "glass orchard"
    q = read_question("Who directed The Glass Orchard?")
    assert q.entities == ("glass orchard",) and q.entity_texts == ("Glass Orchard",)
    assert q.plan.sides[0].name == "The Glass Orchard"  # the exact reading keeps the title
