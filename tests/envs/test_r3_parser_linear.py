"""The R3 parser is linear in the length of the step (issue 21; strict mode read a run of blank
lines from each of its line starts) and reads every step as the old parser did:
``r3_parser_reference.py`` keeps that one, for comparison only."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from r3_parser_reference import ReferenceR3Protocol
from test_protocols import R3_CASES, SOURCES

from hopgym.turns import PARSE_MODES, R3Protocol

MB = 1_000_000


def _fill(unit: str) -> str:
    return unit * (MB // len(unit))


# Steps of about 1 MB built to make a backtracking or rescanning parser quadratic.
ADVERSARIAL = {
    "blank lines": "\n" * MB,
    "blank lines, then text": "\n" * (MB - 1) + "x",
    "analysis, blank lines, text": "The problem analysis: a\n" + "\n" * MB + "x",
    "spaced blank lines": _fill(" \n\t"),
    "step header, blank lines": "Step 1:" + "\n" * MB + "y",
    "step words, blank lines": _fill("step\n\n\n\n"),
    "labels on one line": _fill("The final answer: x "),
    "labels on their lines": _fill("\n\nThe retrieval query: q"),
    "label prefixes": _fill("\n The final "),
}


@pytest.mark.parametrize("mode", PARSE_MODES)
@pytest.mark.parametrize("shape", list(ADVERSARIAL))
def test_a_megabyte_of_blank_lines_and_labels_parses_in_well_under_a_second(shape, mode):
    text = ADVERSARIAL[shape]
    assert len(text) >= MB * 0.9
    start = time.process_time()
    turn = R3Protocol(parse=mode).parse(text, SOURCES)
    took = time.process_time() - start
    # Generous (a linear parse takes < 0.1 s here; the old strict one took 6.8 s on 20 kB).
    assert took < 2.0, f"{shape} ({mode}): {took:.2f} s of process time"
    assert (turn.action is None) == (turn.error is not None)


# Normal and malformed steps: the rule table, and each adversarial shape cut short (short
# enough for the old parser to read them in a test).
CORPUS = [case[0] for case in R3_CASES] + [text[:300] for text in ADVERSARIAL.values()]


@pytest.mark.parametrize("mode", PARSE_MODES)
def test_the_linear_parser_reads_the_corpus_as_the_old_one(mode):
    new, old = R3Protocol(parse=mode), ReferenceR3Protocol(parse=mode)
    for text in CORPUS:
        assert new.parse(text, SOURCES) == old.parse(text, SOURCES), text


PIECES = [
    "The problem analysis:",
    "the retrieval query:",
    "THE FINAL ANSWER:",
    "The retrieval source:",
    "The retrieval documents:",
    "Step 2:",
    "step 10 :",
    "step",
    "x",
    "q.",
    " ",
    "\t",
    "\n",
    "\n\n",
    " \n",
    "\r\n",
    "\u2028",
    "\x0b",
]


@settings(max_examples=800, deadline=None)
@given(text=st.one_of(st.text(max_size=120), st.lists(st.sampled_from(PIECES), max_size=16).map("".join)))
def test_the_linear_parser_reads_label_soup_as_the_old_one(text):
    for mode in PARSE_MODES:
        new = R3Protocol(parse=mode).parse(text, SOURCES)
        assert new == ReferenceR3Protocol(parse=mode).parse(text, SOURCES), mode
