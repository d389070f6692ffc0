"""The tag parser is linear in the length of the turn (issue 21) and reads every turn as the old
(quadratic) parser did: ``tag_parser_reference.py`` keeps that one, for comparison only."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tag_parser_reference import ReferenceTagsProtocol
from test_protocols import CANONICAL_SOUP, SOURCES, TAG_SOUP, TAGS_CASES

from hopgym.turns import PARSE_MODES, TagsProtocol

MB = 1_000_000


def _fill(unit: str) -> str:
    return unit * (MB // len(unit))


# Turns of about 1 MB built to make a backtracking or rescanning parser quadratic.
ADVERSARIAL = {
    "repeated open tags": _fill("<search>"),
    "repeated close tags": _fill("</search>"),
    "open then close": _fill("<search>")[: MB // 2] + _fill("</search>")[: MB // 2],
    "nested thinks": "<think>" * (MB // 16) + "</think>" * (MB // 16),
    "alternating think and action": _fill("<think><search>"),
    "alternating action and close think": _fill("<search></think>"),
    "think then complete action": _fill("<think><search>q</search>"),
    "two actions, never closed": _fill("<search><answer>"),
    "unclosed think, then actions": "<think>" + _fill("<answer>a</answer>"),
    "spaced tags": _fill("< search >"),
    "brackets then white space": "<" * (MB // 2) + " " * (MB // 2),
    "mixed case": _fill("<Search></THINK><think>"),
}


@pytest.mark.parametrize("mode", PARSE_MODES)
@pytest.mark.parametrize("shape", list(ADVERSARIAL))
def test_a_megabyte_of_adversarial_tags_parses_in_well_under_a_second(shape, mode):
    text = ADVERSARIAL[shape]
    assert len(text) >= MB * 0.9
    start = time.process_time()
    turn = TagsProtocol(parse=mode).parse(text, SOURCES)
    took = time.process_time() - start
    # Generous (a linear parse takes ~0.1 s here; the old one did not finish 1 MB in 300 s).
    assert took < 2.0, f"{shape} ({mode}): {took:.2f} s of process time"
    assert (turn.action is None) == (turn.error is not None)


# Normal and malformed turns: the rule table, tag soup, and each adversarial shape cut short
# (short enough for the old parser to read them in a test).
CORPUS = [case[0] for case in TAGS_CASES] + [text[:400] for text in ADVERSARIAL.values()]


@pytest.mark.parametrize("mode", PARSE_MODES)
def test_the_linear_parser_reads_the_corpus_as_the_old_one(mode):
    new, old = TagsProtocol(parse=mode), ReferenceTagsProtocol(parse=mode)
    for text in CORPUS:
        assert new.parse(text, SOURCES) == old.parse(text, SOURCES), text


@settings(max_examples=500, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=200),
        TAG_SOUP,
        CANONICAL_SOUP,
        st.lists(TAG_SOUP, max_size=4).map("".join),
        st.lists(st.sampled_from(["<SEARCH>", "</Search>", "<Think>", "< /think>", "x"]), max_size=12).map(
            "".join
        ),
    )
)
def test_the_linear_parser_reads_tag_soup_as_the_old_one(text):
    for mode in PARSE_MODES:
        new = TagsProtocol(parse=mode).parse(text, SOURCES)
        assert new == ReferenceTagsProtocol(parse=mode).parse(text, SOURCES), mode
