"""The ``tools`` protocol: every call format, structured messages, bad calls, several calls per
turn, tool messages, and fuzzing (no input raises)."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hopgym  # noqa: F401 - registers the envs
from hopgym.envs.options import EnvOptions
from hopgym.errors import InvalidOptionError
from hopgym.turns import Answer, Route, Search, Think
from hopgym.turns.specs import tool_specs
from hopgym.turns.tools import ToolProtocol

SOURCES = ("local", "web")
S = '{"name": "search", "arguments": {"query": "Lorn"}}'
A = '{"name": "answer", "arguments": {"answer": "Aldo Quill"}}'


def actions(text, parse="lenient", sources=SOURCES, max_calls=4):
    turn = ToolProtocol(parse=parse).read(text, sources, max_calls)
    return turn, [c.parsed.action if c.parsed.action else c.parsed.error for c in turn.calls]


# (turn text, the actions or errors read, in both parse modes)
FORMATS = [
    (f"<tool_call>\n{S}\n</tool_call>", [Search("Lorn")]),  # hermes / Qwen
    (f"<think>hm</think>\n<tool_call>{S}</tool_call>", [Search("Lorn", "hm")]),
    (f"I need Lorn.\n<tool_call>{S}</tool_call><tool_call>{A}</tool_call>", None),
    (f"<|python_tag|>{S.replace('arguments', 'parameters')}", [Search("Lorn")]),  # Llama 3.x
    (S.replace("arguments", "parameters"), [Search("Lorn")]),  # Llama 3.x JSON turn
    (f"{S}; {A}", [Search("Lorn"), Answer("Aldo Quill")]),
    (f"[TOOL_CALLS][{S}, {A}]", [Search("Lorn"), Answer("Aldo Quill")]),  # Mistral v3
    ('[TOOL_CALLS]search[ARGS]{"query": "Lorn"}', [Search("Lorn")]),  # Mistral v11
    (f"[{S}]", [Search("Lorn")]),
]


@pytest.mark.parametrize("parse", ["lenient", "strict"])
@pytest.mark.parametrize(("text", "expected"), FORMATS)
def test_every_template_format_is_read(text, expected, parse):
    turn, got = actions(text, parse)
    if expected is None:
        assert got == [Search("Lorn", "I need Lorn."), Answer("Aldo Quill", "I need Lorn.")]
        assert turn.content == "I need Lorn."
    else:
        assert got == expected
    assert turn.error is None and not turn.issues


def test_a_bare_call_inside_free_text_is_read_only_leniently():
    text = f"Let me search. {S}"
    turn, got = actions(text)
    assert got == [Search("Lorn", "Let me search.")]
    assert [i.code for i in turn.issues] == ["bare_tool_call"]
    strict, _ = actions(text, "strict")
    assert strict.error is not None and "no tool call" in strict.error


def test_every_tools_issue_code_is_produced():
    from hopgym.turns import FORMAT_ISSUES

    texts = [
        f"Let me search. {S}",
        f"<tool_call>{S}",
        '<tool_call>{"name": "answer", "arguments": {"answer": "X", "why": "y"}}</tool_call>',
    ]
    seen = set()
    for text in texts:
        turn = ToolProtocol().read(text, SOURCES)
        seen |= {i.code for i in turn.issues} | {i.code for c in turn.calls for i in c.parsed.issues}
    assert seen == {c for c, d in FORMAT_ISSUES.items() if d.endswith("(tools)")}


def test_structured_messages_as_dict_and_json_string():
    msg = {
        "role": "assistant",
        "content": "<think>hm</think>",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"query": "Lorn"}'},
            },
            {"id": "c2", "type": "function", "function": {"name": "answer", "arguments": {"answer": "X"}}},
        ],
    }
    for action in (msg, json.dumps(msg)):
        turn = ToolProtocol().read(action, SOURCES)
        assert [c.id for c in turn.calls] == ["c1", "c2"]
        assert [c.parsed.action for c in turn.calls] == [Search("Lorn", "hm"), Answer("X", "hm")]
        assert turn.calls[0].message()["function"]["arguments"] == '{"query": "Lorn"}'


BAD = [
    ('<tool_call>{"name": "search", "arguments": {"query": </tool_call>', "malformed JSON"),
    ('<tool_call>{"name": "lookup", "arguments": {"query": "x"}}</tool_call>', "unknown tool 'lookup'"),
    ('<tool_call>{"name": "search", "arguments": {}}</tool_call>', "missing argument 'query'"),
    (
        '<tool_call>{"name": "search", "arguments": {"query": 3}}</tool_call>',
        "must be a string, got a number",
    ),
    ('<tool_call>{"name": "answer", "arguments": {"answer": ["a"]}}</tool_call>', "got an array"),
    ('<tool_call>{"name": "search", "arguments": "{bad"}</tool_call>', "malformed JSON arguments"),
    (
        '<tool_call>{"name": "search", "arguments": {"query": "x", "source": "moon"}}</tool_call>',
        "unknown source",
    ),
    ('<tool_call>{"arguments": {"query": "x"}}</tool_call>', 'without a "name"'),
    ('<tool_call>{"name": "search", "arguments": {"query": "  "}}</tool_call>', "empty 'query'"),
    ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
]


@pytest.mark.parametrize(("text", "error"), BAD)
def test_bad_calls_name_what_was_wrong(text, error):
    _, got = actions(text)
    assert len(got) == 1 and isinstance(got[0], str) and error in got[0], got


def test_turn_level_errors():
    for text, error in [
        ("The answer is Oslo.", "no tool call"),
        ('<tool_call>{"name": "search", "argu', "cut off"),
        ({"role": "assistant", "content": 3}, "content must be a string"),
        (Route("web"), "no route tool"),
    ]:
        turn = ToolProtocol().read(text, SOURCES)
        assert turn.error is not None and error in turn.error, (text, turn)
    assert ToolProtocol().read("<think>just thinking</think>", SOURCES).think == "just thinking"


def test_extra_arguments_are_an_issue_leniently_and_an_error_strictly():
    text = '<tool_call>{"name": "answer", "arguments": {"answer": "X", "why": "y"}}</tool_call>'
    turn, got = actions(text)
    assert got == [Answer("X")] and [i.code for i in turn.calls[0].parsed.issues] == ["extra_argument"]
    _, strict = actions(text, "strict")
    assert "unexpected argument 'why'" in strict[0]


def test_the_source_argument_exists_only_with_several_sources():
    assert "source" not in tool_specs(["local"])[0]["function"]["parameters"]["properties"]
    text = '<tool_call>{"name": "search", "arguments": {"query": "x", "source": "web"}}</tool_call>'
    assert actions(text)[1] == [Search("x", source="web")]
    assert actions(text, "strict", ("local",))[1][0].startswith("search: unexpected argument 'source'")


def test_structured_actions_render_to_hermes_and_read_back():
    p = ToolProtocol()
    for act in (Search("a b", "t"), Answer("X", "t"), Search("q", source="web")):
        assert [c.parsed.action for c in p.read(p.render(act), SOURCES).calls] == [act]
    assert p.read(Think("hm"), SOURCES).calls == ()


def test_options_accept_tools_and_max_tool_calls():
    assert EnvOptions(protocol="tools", max_tool_calls=2).max_tool_calls == 2
    with pytest.raises(InvalidOptionError):
        EnvOptions(max_tool_calls=0)


# ---------------------------------------------------------------------------- the env
def make(**kw):
    kw.setdefault("reward", None)
    env = gym.make("hopgym/Tiny-v1", protocol="tools", **kw)
    env.reset(seed=0, options={"question_id": "tiny-1"})
    return env


def call(name, cid=None, **args):
    out = {"type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    if cid:
        out["id"] = cid
    return out


def test_env_publishes_tool_specs_and_runs_calls_in_order_with_tool_messages():
    env = make()
    assert [s["function"]["name"] for s in env.unwrapped.tool_specs] == ["search", "answer"]
    msg = {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("search", "a", query="Lorn"), call("search", "b", query="Aldo Quill")],
    }
    obs, r, term, trunc, info = env.step(msg)
    assert not term and info["action_type"] == "search" and info["searches"] == 2
    assert [c["query"] for c in info["calls"]] == ["Lorn", "Aldo Quill"]
    assert [m["tool_call_id"] for m in info["tool_messages"]] == ["a", "b"]
    assert obs.count("<tool_response>") == 2 and "Sefa Quill" in obs
    transcript = env.unwrapped.transcript
    assert [m["role"] for m in transcript] == ["user", "assistant", "tool", "tool"]
    assert len(transcript[1]["tool_calls"]) == 2
    obs, r, term, trunc, info = env.step(f"<tool_call>{A}</tool_call>")
    assert term and not trunc and info["answer"] == "Aldo Quill" and obs == ""


def test_a_failing_call_stops_the_turn_and_later_calls_do_not_run():
    env = make()
    msg = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            call("search", "a", query="Lorn"),
            call("serch", "b", q="x"),
            call("answer", "c", answer="X"),
        ],
    }
    obs, _, term, _, info = env.step(msg)
    assert not term and info["action_type"] == "invalid" and "unknown tool 'serch'" in info["invalid_action"]
    assert [c["action_type"] for c in info["calls"]] == ["search", "invalid"]
    contents = [m["content"] for m in info["tool_messages"]]
    assert "Error: unknown tool 'serch'" in contents[1] and contents[2].startswith("Not run")
    assert [m["tool_call_id"] for m in info["tool_messages"]] == ["a", "b", "c"]


def test_too_many_calls_and_huge_arguments_are_refused_without_crashing():
    env = make(max_tool_calls=2)
    text = "".join(
        f'<tool_call>{{"name": "search", "arguments": {{"query": "q{i}"}}}}</tool_call>' for i in range(50)
    )
    _, _, _, _, info = env.step(text[:8000])
    assert info["searches"] == 2 and info["action_type"] == "invalid"
    assert "too many tool calls in one turn" in info["invalid_action"] and "> 2" in info["invalid_action"]
    assert len(info["tool_messages"]) == 3
    big = {"role": "assistant", "content": "", "tool_calls": [call("search", query="x" * (1 << 20))]}
    _, _, _, _, info = env.step(big)
    assert info["action_type"] == "invalid" and "turn too long" in info["invalid_action"]
    _, _, _, _, info = env.step("x" * (1 << 20))
    assert "turn too long" in info["invalid_action"]


def test_plain_text_is_an_invalid_turn_with_a_corrective_user_message():
    env = make()
    obs, _, _, _, info = env.step("It is Oslo.")
    assert info["action_type"] == "invalid" and obs.startswith("Error: no tool call")
    assert env.unwrapped.transcript[-1]["role"] == "user"


def test_search_with_a_source_routes():
    env = gym.make("hopgym/Synthetic-v1", protocol="tools", reward=None, sources=("local", "web"))
    env.reset(seed=0)
    assert env.unwrapped.tool_specs[0]["function"]["parameters"]["properties"]["source"]["enum"] == [
        "local",
        "web",
    ]
    _, _, _, _, info = env.step(
        '<tool_call>{"name": "search", "arguments": {"query": "x", "source": "web"}}</tool_call>'
    )
    assert (
        info["routed_to"] == "web"
        and info["searches_by_source"]["web"] == 1
        and env.unwrapped.source == "web"
    )


def test_last_turn_notice_follows_the_tool_messages_as_a_user_message():
    env = make(max_turns=2)
    obs, *_, info = env.step(f"<tool_call>{S}</tool_call>")
    assert obs.rstrip().endswith(ToolProtocol.LAST_TURN) and "</tool_response>" in obs
    assert info["tool_messages"][-1] == {"role": "user", "content": ToolProtocol.LAST_TURN}
    assert ToolProtocol.LAST_TURN not in info["tool_messages"][0]["content"]


def test_reward_wrappers_charge_each_call():
    from hopgym.rewards import FormatReward, SearchCostReward

    env = SearchCostReward(FormatReward(make(), penalty=0.5), per_search=0.1)
    env.reset(seed=0, options={"question_id": "tiny-1"})
    msg = {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("search", query="a"), call("search", query="b"), call("nope")],
    }
    _, r, _, _, info = env.step(msg)
    assert r == pytest.approx(-0.2 - 0.5) and info["reward_terms"]


CALL_SOUP = st.lists(
    st.sampled_from(
        [
            "<tool_call>",
            "</tool_call>",
            "[TOOL_CALLS]",
            "<|python_tag|>",
            "[ARGS]",
            "<think>",
            "</think>",
            S,
            A,
            "{",
            "}",
            "[",
            "]",
            '"name"',
            ":",
            '"search"',
            '"arguments"',
            ";",
            ",",
            "x",
            " ",
        ]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=300), CALL_SOUP), parse=st.sampled_from(["lenient", "strict"]))
def test_fuzz_no_text_raises(text, parse):
    turn = ToolProtocol(parse=parse).read(text, SOURCES)
    assert turn.error is not None or turn.calls or turn.think is not None


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "arguments",
                    "function",
                    "id",
                    "query",
                    "answer",
                    "source",
                    "tool_calls",
                    "content",
                    "x",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(message=JSONISH)
def test_fuzz_env_steps_any_message(message):
    env = make()
    action = {"role": "assistant", "tool_calls": message} if not isinstance(message, dict) else message
    for a in (action, json.dumps(action)):
        obs, r, term, trunc, info = env.step(a)
        assert isinstance(obs, str) and not (term and trunc)
        if term:
            env.reset(seed=0)
