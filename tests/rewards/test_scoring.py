"""Pure scoring functions: values, aliases, guards and properties."""

from __future__ import annotations

import random
import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hopgym.rewards.scoring import (
    admissible,
    answer_score,
    answer_tokens,
    bow_similarity,
    cover_em,
    exact_match,
    is_hedged,
    normalize_answer,
    support_precision,
    support_recall,
    supporting_fact_recall,
    token_f1,
)


@pytest.mark.parametrize(
    ("text", "norm"),
    [
        ("The Glass Orchard", "glass orchard"),
        ("  An   apple, a day!", "apple day"),
        ("U.S.A.", "usa"),
        ("Theatre", "theatre"),  # "the" only as a word
        ("", ""),
        ("...", ""),
    ],
)
def test_normalize_answer(text, norm):
    assert normalize_answer(text) == norm


def _squad_normalize(text: str) -> str:
    """SQuAD's normalisation as written in its evaluation script (the reference)."""
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def test_normalize_answer_is_squads_on_any_text():
    # The ASCII fast path (bytes, words) and the general path (regex) against the reference, on
    # text mixing every ASCII character (control characters that are word boundaries without
    # being white space included), articles and a few non-ASCII letters, spaces and marks.
    rng = random.Random(0)
    alphabet = [chr(c) for c in range(128)] + ["the", "The", "a", " an ", "é", "’", "\u00a0", "\u0085", "—"]
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        assert normalize_answer(text) == _squad_normalize(text), text
        assert answer_tokens(text) == _squad_normalize(text).split(), text


@pytest.mark.parametrize(
    ("pred", "golds", "em"),
    [
        ("Cardell", "Cardell", 1.0),
        ("cardell.", ["Lorn", "Cardell"], 1.0),
        ("the Glass Orchard", ("The Glass Orchard", "Glass Orchard"), 1.0),
        ("Cardell City", ["Cardell"], 0.0),
        ("", [""], 0.0),  # empty never matches
        (".", ["the"], 0.0),
        ("Cardell", [], 0.0),
    ],
)
def test_exact_match(pred, golds, em):
    assert exact_match(pred, golds) == em


@pytest.mark.parametrize(
    ("pred", "golds", "f1"),
    [
        ("Cardell", "Cardell", 1.0),
        ("Glass Orchard film", "The Glass Orchard", 0.8),
        ("Maren", ["Maren Oskdal"], 2 / 3),
        ("Maren", ["Lorn", "Maren Oskdal"], 2 / 3),  # best alias
        ("yes", "no", 0.0),
        ("yes it is", "yes", 0.0),  # HotpotQA: yes/no only matches itself
        ("no", "no", 1.0),
        ("", "Cardell", 0.0),
        ("Cardell", [], 0.0),
    ],
)
def test_token_f1(pred, golds, f1):
    assert token_f1(pred, golds) == pytest.approx(f1)


@pytest.mark.parametrize(
    ("pred", "golds", "slack", "value"),
    [
        ("It was Maren Oskdal.", "Maren Oskdal", None, 1.0),
        ("Maren", "Maren Oskdal", None, 0.0),
        ("Leeds", "Lee", None, 0.0),  # whole tokens only
        ("Lorn Vashti Cardell Halvik", "Cardell", None, 1.0),
        ("Lorn Vashti Cardell Halvik", "Cardell", 3, 1.0),
        ("Lorn Vashti Cardell Halvik", "Cardell", 2, 0.0),
        ("", "Cardell", None, 0.0),
    ],
)
def test_cover_em(pred, golds, slack, value):
    assert cover_em(pred, golds, max_extra_tokens=slack) == value


@pytest.mark.parametrize(
    ("pred", "gold", "hedged"),
    [
        ("Lorn, Cardell", "Cardell", True),
        ("Lorn or Cardell", "Cardell", True),
        ("Lorn/Cardell", "Cardell", True),
        ("Cardell; Lorn", "Cardell", True),
        ("Lorn\nCardell", "Cardell", True),
        ("Lorn OR Cardell", "Cardell", True),
        ("Cardell", "Cardell", False),
        ("Bosnia and Herzegovina", "Bosnia and Herzegovina", False),
        ("Oregon", "Oregon", False),  # "or" only as a word
        ("Cardell\n", "Cardell", False),  # trailing newline is not a list
        ("1,200,000", "1200000", False),  # thousands separators
        ("1962, 1984", "1962", True),
        ("Cardell;", "Cardell", False),  # stray punctuation
        ("the, Cardell", "Cardell", False),  # only an article on one side
        ("Cardell\n\nLorn", "Cardell", True),
        ("Lorn or\nCardell", "Cardell", True),
    ],
)
def test_is_hedged(pred, gold, hedged):
    assert is_hedged(pred, gold) is hedged


@pytest.mark.parametrize("metric", ["em", "f1", "cover_em"])
@pytest.mark.parametrize(
    "pred",
    [
        "Lorn, Vashti, Cardell",
        "Lorn or Cardell",
        "Cardell / Lorn",
        "Cardell Lorn".replace(" ", ", "),
        "Cardell " + "and more words " * 5,
        "",
        "  .  ",
    ],
)
def test_answer_score_pays_nothing_for_lists_pastes_and_empties(metric, pred):
    assert answer_score(pred, ["Cardell"], metric) == 0.0


@pytest.mark.parametrize("metric", ["em", "f1", "cover_em"])
def test_answer_score_pays_the_gold_fully(metric):
    assert answer_score("cardell", ["Cardell City", "Cardell"], metric) == 1.0


def test_answer_score_guards_can_be_switched_off():
    assert answer_score("Lorn or Cardell", "Cardell", "cover_em", hedge_guard=False) == 1.0
    long = "Cardell is a port city in Brenmark with a population of eighty thousand people"
    assert answer_score(long, "Cardell", "f1", length_guard=False) > 0
    assert answer_score(long, "Cardell", "f1") == 0.0
    assert answer_score("the port city of Cardell", "Cardell", "cover_em") == 1.0
    assert answer_score("the port city of Cardell", "Cardell", "cover_em", max_extra_tokens=1) == 0.0


def test_answer_score_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown metric 'judge'"):
        answer_score("a", "a", "judge")
    with pytest.raises(ValueError, match="max_extra_tokens"):
        answer_score("a", "a", "cover_em", max_extra_tokens=-1)


def test_admissible():
    assert admissible("Lorn", "Cardell")
    assert not admissible("Lorn, Cardell", "Cardell")
    assert not admissible("", "Cardell")
    assert not admissible("word " * 20, "Cardell")
    assert admissible("Lorn, Cardell", ["Cardell", "Lorn, Cardell"])


def test_support_metrics():
    assert support_recall(["a", "b", "x"], ["a", "b"]) == 1.0
    assert support_recall(["a"], ["a", "b"]) == 0.5
    assert support_recall([], ["a"]) == 0.0
    assert support_recall(["a"], []) == 1.0
    assert supporting_fact_recall is support_recall
    assert support_precision(["a", "x", "a"], ["a"]) == 0.5
    assert support_precision([], ["a"]) == 0.0


def test_bow_similarity():
    assert bow_similarity("born Maren Oskdal", "Maren Oskdal born") == 1.0
    assert bow_similarity("a b", "c d") == 0.0
    assert bow_similarity("", "") == 1.0
    assert bow_similarity("x y", "x z") == pytest.approx(1 / 3)


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(pred=texts, gold=texts)
def test_scores_are_bounded_and_ordered(pred, gold):
    em, f1, cov = exact_match(pred, gold), token_f1(pred, gold), cover_em(pred, gold)
    for v in (em, f1, cov):
        assert 0.0 <= v <= 1.0
    assert em <= f1 + 1e-12 and em <= cov
    for metric, raw in (("em", em), ("f1", f1), ("cover_em", cov)):
        assert answer_score(pred, gold, metric) <= raw + 1e-12
    assert answer_score(pred, gold, "em") == em  # the reward's EM is the metric's EM


@settings(max_examples=200, deadline=None)
@given(gold=texts)
def test_the_gold_itself_always_scores_one(gold):
    if not answer_tokens(gold):
        assert answer_score(gold, gold) == 0.0
        return
    for metric in ("em", "f1", "cover_em"):
        assert answer_score(gold, [gold], metric) == 1.0


words = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=2, max_size=6).filter(
        lambda w: w not in {"or", "and", "nor", "vs", "either", "versus", "an", "the"}
    ),
    min_size=1,
    max_size=3,
).map(" ".join)


@settings(max_examples=200, deadline=None)
@given(
    gold=words,
    other=words,
    sep=st.sampled_from([", ", " or ", " / ", "; ", " and ", "\n"]),
    gold_first=st.booleans(),
)
def test_stuffing_a_candidate_list_never_pays(gold, other, sep, gold_first):
    pred = f"{gold}{sep}{other}" if gold_first else f"{other}{sep}{gold}"
    for metric in ("f1", "cover_em"):
        assert answer_score(pred, [gold], metric) == 0.0
    assert answer_score(pred, [gold], "em") == exact_match(pred, gold) == 0.0
    assert not admissible(pred, [gold])
