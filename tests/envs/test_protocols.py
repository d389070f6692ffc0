"""Parse rules of the protocols in both parse modes: actions, invalid turns, format issues,
truncated turns, notices."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tag_parser_reference import valid_issues as _valid_issues

from hopgym.corpora.types import Passage
from hopgym.turns import (
    FORMAT_ISSUES,
    PARSE_MODES,
    Answer,
    R3Protocol,
    Route,
    Search,
    TagsProtocol,
    Think,
    get_protocol,
)

SOURCES = ("local", "web")
_ACTIONS = ("search", "route", "answer")
Q = Search("q")
X = Answer("X")

# (turn, strict result, lenient result); a result is an action, or ("invalid", error part,
# truncated), and the issue codes of a valid turn follow the action.
TAGS_CASES = [
    ("<think>hm</think><search>q</search>", (Search("q", "hm"), []), (Search("q", "hm"), [])),
    ("<search>q</search>", (Q, []), (Q, [])),
    ("<THINK>hm</THINK><SEARCH>q</SEARCH>", (Search("q", "hm"), []), (Search("q", "hm"), [])),
    (
        "<think>a</think><think>b</think><answer>X</answer>",
        (Answer("X", "a\nb"), []),
        (Answer("X", "a\nb"), []),
    ),
    ("<think>a</think>", (Think("a"), []), (Think("a"), [])),
    ("<route>web</route>", (Route("web"), []), (Route("web"), [])),
    # a thought that is never closed, then a complete action: Search-R1 reads it
    (
        "<think>hm<search>q</search>",
        ("invalid", "unbalanced tag <think>", False),
        (Search("q", "hm"), ["unclosed_think"]),
    ),
    (
        "<think>\nFean Textiles was founded in 1990 …\n<search> Fean Textiles founder </search>",
        ("invalid", "unbalanced tag <think>", False),
        (Search("Fean Textiles founder", "Fean Textiles was founded in 1990 …"), ["unclosed_think"]),
    ),
    ("<think>a <answer>X</answer>", ("invalid", "unbalanced", False), (Answer("X", "a"), ["unclosed_think"])),
    (
        "<search>q</search><think>later",
        ("invalid", "unbalanced", False),
        (Search("q", "later"), ["unclosed_think"]),
    ),
    # a </think> whose <think> a chat template wrote
    (
        "hm</think><answer>X</answer>",
        ("invalid", "unbalanced tag </think>", False),
        (Answer("X", "hm"), ["unopened_think"]),
    ),
    # text outside the tags: accepted in both modes (strict always ignored it), reported in both
    ("<answer>X</answer> I am sure.", (X, ["text_outside_tags"]), (X, ["text_outside_tags"])),
    ("Let me search. <search>q</search>", (Q, ["text_outside_tags"]), (Q, ["text_outside_tags"])),
    ("<think>a</think>b", (Think("a"), ["text_outside_tags"]), (Think("a"), ["text_outside_tags"])),
    ("  \n<answer>X</answer>\n ", (X, []), (X, [])),
    # spaces inside the brackets
    ("< answer >X</ answer >", ("invalid", "no action", False), (X, ["malformed_tag"])),
    # an action tag without its partner beside a complete action
    (
        "<answer>X</answer><answer>Y",
        ("invalid", "unbalanced tag <answer>", False),
        (X, ["stray_tag", "text_outside_tags"]),
    ),
    ("</search><answer>X</answer>", ("invalid", "unbalanced tag </search>", False), (X, ["stray_tag"])),
    # the same action twice
    ("<answer>X</answer><answer> X </answer>", ("invalid", "two actions", False), (X, ["duplicate_action"])),
    # invalid in both modes
    (
        "<answer>X</answer><answer>Y</answer>",
        ("invalid", "two actions", False),
        ("invalid", "two actions", False),
    ),
    (
        "<search>q</search><answer>X</answer>",
        ("invalid", "two actions", False),
        ("invalid", "two actions", False),
    ),
    (
        "<think><answer>X</answer></think><search>q</search>",
        ("invalid", "nested", False),
        ("invalid", "inside <think>", False),
    ),
    ("<think><answer>X</answer></think>", ("invalid", "nested", False), ("invalid", "inside <think>", False)),
    (
        "<think>so <answer>X</answer> I think</think>",
        ("invalid", "nested", False),
        ("invalid", "inside <think>", False),
    ),
    ("<search><answer>X</answer></search>", ("invalid", "nested", False), ("invalid", "nested", False)),
    (
        "<answer>X</answer><information>X is right</information>",
        ("invalid", "<information>", False),
        ("invalid", "<information>", False),
    ),
    (
        "<information>X</information><answer>X</answer>",
        ("invalid", "<information>", False),
        ("invalid", "<information>", False),
    ),
    (
        "<search>q</search><information>",
        ("invalid", "<information>", False),
        ("invalid", "<information>", False),
    ),
    ("Paris", ("invalid", "no action", False), ("invalid", "no action", False)),
    ("<think></think>", ("invalid", "no action", False), ("invalid", "no action", False)),
    (
        "<search> </search>",
        ("invalid", "empty search query", False),
        ("invalid", "empty search query", False),
    ),
    ("<route>moon</route>", ("invalid", "unknown source", False), ("invalid", "unknown source", False)),
    # cut at the token limit: ends inside an open tag with no complete action
    (
        "<think>The founder of Qelvor is",
        ("invalid", "ended inside <think>", True),
        ("invalid", "ended inside <think>", True),
    ),
    (
        "<think>a</think><search>Qelvor found",
        ("invalid", "ended inside <search>", True),
        ("invalid", "ended inside <search>", True),
    ),
    (
        "<think>a</think><think>b",
        ("invalid", "ended inside <think>", True),
        ("invalid", "ended inside <think>", True),
    ),
]

R3_CASES = [
    (
        "The problem analysis: need X.\nThe retrieval query: q",
        (Search("q", "need X."), []),
        (Search("q", "need X."), []),
    ),
    (
        "Step 2:\nThe problem analysis: a.\nThe final answer: X",
        (Answer("X", "a."), []),
        (Answer("X", "a."), []),
    ),
    (
        "The problem analysis: a.\nThe retrieval source: web",
        (Route("web", "a."), []),
        (Route("web", "a."), []),
    ),
    ("The retrieval query: q", (Q, ["missing_analysis"]), (Q, ["missing_analysis"])),
    (
        "Sure!\nThe problem analysis: a.\nThe final answer: X",
        (Answer("X", "a."), ["text_outside_fields"]),
        (Answer("X", "a."), ["text_outside_fields"]),
    ),
    # a label inside a line: read only in lenient mode
    (
        "The problem analysis: a. The final answer: X",
        ("invalid", "no 'The retrieval query:'", False),
        (Answer("X", "a."), ["inline_field"]),
    ),
    # the action is its field's first line in lenient mode
    (
        "The problem analysis: a.\nThe final answer: X\nBecause the documents say so.",
        (Answer("X Because the documents say so.", "a."), []),
        (Answer("X", "a."), ["text_outside_fields"]),
    ),
    (
        "The problem analysis: a.\nThe final answer: X\nThe final answer: X",
        ("invalid", "two actions", False),
        (Answer("X", "a."), ["duplicate_action"]),
    ),
    (
        "The problem analysis: a.\nThe final answer: X\nThe final answer: Y",
        ("invalid", "two actions", False),
        ("invalid", "two actions", False),
    ),
    (
        "The problem analysis: a.\nThe retrieval query: q\nThe final answer: X",
        ("invalid", "two actions", False),
        ("invalid", "two actions", False),
    ),
    (
        "The problem analysis: a.\nThe retrieval documents: X is right.\nThe final answer: X",
        ("invalid", "written by the environment", False),
        ("invalid", "written by the environment", False),
    ),
    (
        "The problem analysis: I am not sure.",
        ("invalid", "no 'The retrieval query:'", False),
        ("invalid", "no 'The retrieval query:'", False),
    ),
    (
        "<answer>X</answer>",
        ("invalid", "no 'The retrieval query:'", False),
        ("invalid", "no 'The retrieval query:'", False),
    ),
    (
        "The problem analysis: The founder of Qelvor Dynamics is",
        ("invalid", "ended inside 'The problem analysis:'", True),
        ("invalid", "ended inside 'The problem analysis:'", True),
    ),
]


def _check(protocol, text, expected):
    turn = protocol.parse(text, SOURCES)
    if expected[0] == "invalid":
        _, part, truncated = expected
        assert turn.action is None and part in turn.error, (text, turn)
        assert turn.truncated is truncated and turn.issues == (), (text, turn)
        return
    action, codes = expected
    assert turn.error is None and turn.action == action, (text, turn)
    assert [i.code for i in turn.issues] == codes, (text, turn.issues)
    assert not turn.truncated


@pytest.mark.parametrize(("text", "strict", "lenient"), TAGS_CASES, ids=[c[0] for c in TAGS_CASES])
def test_tags_parse_rules(text, strict, lenient):
    _check(TagsProtocol(parse="strict"), text, strict)
    _check(TagsProtocol(parse="lenient"), text, lenient)


@pytest.mark.parametrize(("text", "strict", "lenient"), R3_CASES, ids=[c[0] for c in R3_CASES])
def test_r3_parse_rules(text, strict, lenient):
    _check(R3Protocol(parse="strict"), text, strict)
    _check(R3Protocol(parse="lenient"), text, lenient)


def test_lenient_is_the_default_and_modes_are_checked():
    assert TagsProtocol().parse_mode == R3Protocol().parse_mode == "lenient"
    assert get_protocol("tags").parse_mode == "lenient"
    assert get_protocol("r3", parse="strict") == R3Protocol(parse="strict")
    assert get_protocol("tags", parse="strict") != TagsProtocol()
    with pytest.raises(ValueError, match="parse must be one of"):
        TagsProtocol(parse="loose")
    with pytest.raises(ValueError, match="pass the protocol's name"):
        get_protocol(TagsProtocol(parse="strict"), parse="lenient")
    p = TagsProtocol(parse="strict")
    assert get_protocol(p) is p and get_protocol(p, parse="strict") is p


def test_issue_codes_are_declared_and_carry_details():
    seen = set()
    for proto, cases in ((TagsProtocol(), TAGS_CASES), (R3Protocol(), R3_CASES)):
        for text, _, _ in cases:
            for issue in proto.parse(text, SOURCES).issues:
                assert issue.code in FORMAT_ISSUES and issue.detail
                seen.add(issue.code)
    # every declared code is produced by some case (the tools protocol's in test_tool_protocol.py)
    assert seen == {c for c, d in FORMAT_ISSUES.items() if not d.endswith("(tools)")}


@pytest.mark.parametrize("mode", PARSE_MODES)
@pytest.mark.parametrize(
    "action",
    [
        Search("Qelvor founder", "need the founder"),
        Route("web"),
        Answer("Cardell", "done"),
        Think("plan"),
        Answer("x"),
    ],
)
@pytest.mark.parametrize("name", ["tags", "r3"])
def test_rendered_actions_parse_back_cleanly(name, action, mode):
    proto = get_protocol(name, parse=mode)
    turn = proto.parse(proto.render(action), SOURCES)
    if name == "r3" and isinstance(action, Think):
        assert turn.action is None  # R3-RAG has no think-only step
        return
    if name == "r3" and not action.think:
        action = replace(action, think="-")  # R3 renders an empty analysis as "-"
    assert turn.action == action and turn.issues == ()


TAG_SOUP = st.lists(
    st.sampled_from(
        [
            "<think>",
            "</think>",
            "<search>",
            "</search>",
            "<answer>",
            "</answer>",
            "<route>",
            "</route>",
            "< answer >",
            "<information>",
            "web",
            "x",
            " ",
            "\n",
        ]
    ),
    max_size=14,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(text=st.one_of(st.text(max_size=200), TAG_SOUP))
@example(text="<think></think><think></think>")  # strict once joined empty thoughts into "\n"
def test_tag_soup_in_both_modes(text):
    strict = TagsProtocol(parse="strict").parse(text, SOURCES)
    lenient = TagsProtocol(parse="lenient").parse(text, SOURCES)
    for turn in (strict, lenient):
        assert (turn.action is None) == (turn.error is not None)
        assert not (turn.truncated and turn.action is not None)
        assert all(i.code in FORMAT_ISSUES for i in turn.issues)
    # Lenient only ever accepts more, and reads the same action where both accept (spaced tags
    # aside: strict reads "< answer >" as text).
    if strict.action is not None and "< answer >" not in text:
        assert lenient.action == strict.action
        assert {i.code for i in strict.issues} <= {i.code for i in lenient.issues}
    if "<information>" in text:
        assert lenient.action is None and strict.action is None


@settings(max_examples=300, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=200),
        st.lists(
            st.sampled_from(
                [
                    "The problem analysis:",
                    "The retrieval query:",
                    "The final answer:",
                    "Step 2:",
                    "The retrieval documents:",
                    "x",
                    " ",
                    "\n",
                    ".",
                ]
            ),
            max_size=12,
        ).map("".join),
    )
)
def test_r3_soup_in_both_modes(text):
    strict = R3Protocol(parse="strict").parse(text, SOURCES)
    lenient = R3Protocol(parse="lenient").parse(text, SOURCES)
    for turn in (strict, lenient):
        assert (turn.action is None) == (turn.error is not None)
        assert not (turn.truncated and turn.action is not None)
        assert all(i.code in FORMAT_ISSUES for i in turn.issues)


DOCS = [Passage("d1", "Qelvor Dynamics", "Founded by Maren Oskdal.")]


def test_repeat_note_and_last_turn_text():
    tags, r3 = TagsProtocol(), R3Protocol()
    obs = tags.format_documents(DOCS, None, 2, note=tags.repeat_note(dedup=True))
    assert obs == (
        "\n<information>You already searched for this; here are the next results.\n"
        "Doc 1 (Title: Qelvor Dynamics) Founded by Maren Oskdal.</information>\n"
    )
    assert "same results again" in tags.repeat_note(dedup=False)
    assert "no new documents" in tags.repeat_note(dedup=True, exhausted=True)
    obs = r3.format_documents(DOCS, None, 2, note=r3.repeat_note(dedup=True))
    assert obs == (
        "\nYou already searched for this; here are the next results.\n"
        "The retrieval documents: (1) Qelvor Dynamics: Founded by Maren Oskdal.\n"
        "Step 3:\n"
    )
    assert tags.last_turn("", 3).strip() == TagsProtocol.LAST_TURN
    last = r3.last_turn(r3.format_think(3), 3)
    assert last == f"\n{R3Protocol.LAST_TURN}\nStep 4:\n"


@pytest.mark.parametrize("mode", PARSE_MODES)
@pytest.mark.parametrize("name", ["tags", "r3"])
def test_nothing_the_env_writes_reads_as_an_action_if_a_model_copies_it(name, mode):
    # Small models copy the env's text into their turn (SmolLM2-135M copied a last-turn notice
    # that held "<answer> short answer </answer>"); a copy must never be an action.
    proto = get_protocol(name, parse=mode)
    sources = {"local": "the corpus", "web": "the web"}
    texts = [
        proto.prompt("Who founded Acme?", sources, 4),
        proto.prompt("Who founded Acme?", {"local": ""}, 4, background="Doc 1 (Title: A) b"),
        proto.format_documents(DOCS, None, 1, note=proto.repeat_note(True)),
        proto.format_notice(proto.repeat_note(True, exhausted=True), 1),
        proto.format_error("no action", 1),
        proto.format_think(1),
        proto.last_turn(proto.format_think(2), 2),
        proto.last_turn("", 2),
        proto.LAST_TURN,
        proto.repeat_note(False),
    ]
    for text in filter(str.strip, texts):
        for copy in (text, text.strip(), text.strip().splitlines()[-1]):
            assert proto.parse(copy, list(sources)).action is None, copy


CANONICAL_SOUP = st.lists(
    st.sampled_from(
        [
            "<think>",
            "</think>",
            "<search>",
            "</search>",
            "<answer>",
            "</answer>",
            "<route>",
            "</route>",
            "<THINK>",
            "web",
            "local",
            "x y",
            " ",
            "\n",
            "\u00a0",
            "<",
            ">",
            "",
        ]
    ),
    max_size=9,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(
    text=st.one_of(
        CANONICAL_SOUP,
        st.builds(
            lambda t, a, k, b: f"{t}<think>{a}</think>{t}<{k}>{b}</{k}>{t}",
            st.sampled_from(["", " ", "\n"]),
            st.text(max_size=20),
            st.sampled_from(_ACTIONS),
            st.text(max_size=20),
        ),
    )
)
def test_the_canonical_fast_path_reads_as_the_general_parser(text):
    # parse() reads a canonical turn (an optional <think> block, then at most one action block)
    # without the general parser; both modes must give exactly what the general parser gives.
    for mode in ("strict", "lenient"):
        p = TagsProtocol(parse=mode)
        assert p.parse(text, SOURCES) == _valid_issues(p._scan(text, SOURCES)), mode


def test_the_corrective_observation_names_routing_only_with_several_sources():
    one = gym.make("hopgym/Tiny-v1")
    two = gym.make("hopgym/Tiny-v1", sources=("local", "web"))
    for env in (one, two):
        env.reset(seed=0)
    obs_one = one.step("no tags at all")[0]
    obs_two = two.step("no tags at all")[0]
    assert "Invalid turn" in obs_one and "<route>" not in obs_one and "<search>" in obs_one
    assert "<route>source</route>" in obs_two
