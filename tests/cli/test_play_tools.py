"""``hopgym play --protocol tools`` driven by scripted stdin: each call and its result shown."""

from __future__ import annotations

import io
import json

from hopgym.cli import main
from hopgym.cli.play import call_line


def _play(monkeypatch, capsys, lines: list[str], *extra: str) -> str:
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(line + "\n" for line in lines)))
    args = ["play", "--env", "hopgym/Tiny-v1", "--protocol", "tools", "--seed", "0", *extra]
    assert main(args) == 0
    return capsys.readouterr().out


def _call(name: str, **arguments: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def test_play_tools_shows_each_call_and_its_result(monkeypatch, capsys):
    message = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "answer", "arguments": '{"answer": "Emery Quill"}'},
            }
        ],
    }
    out = _play(
        monkeypatch,
        capsys,
        [
            "s Sefa Quill",  # a shortcut: one search
            _call("search", query="Aldo Quill") + _call("serch") + _call("answer", answer="x"),
            "no call at all",
            json.dumps(message),  # an assistant message as an OpenAI server returns it
        ],
    )
    assert "Type a turn as tool calls" in out and "Tools: search(query), answer(answer)" in out
    assert "Question: Who is the paternal grandfather of Sefa Quill?" in out
    first, second, third, fourth = out.split("\n> ")[1:5]  # input() prompts "> "
    assert first.startswith('[call 1] search(query="Sefa Quill")\nDoc 1 (Title: Sefa Quill)')
    assert second.startswith('[call 1] search(query="Aldo Quill")\nDoc 1 (Title: Aldo Quill)')
    assert (
        "[call 2] serch()\n[tool error: unknown tool 'serch': the tools are search, answer]\n"
        '[call 3] answer(answer="x")\nNot run: an earlier call of this turn failed.'
    ) in second
    assert third.startswith("[invalid: no tool call: call search(query) to search or answer(answer)")
    assert fourth.startswith('[call 1] answer(answer="Emery Quill")\n[answer: Emery Quill]\n')
    assert "Episode over (answered). Gold: Emery Quill. Return: 1.000." in fourth


def test_play_tools_routes_through_the_search_source(monkeypatch, capsys):
    out = _play(monkeypatch, capsys, ["r web", "s Aldo Quill father", "q"], "--kw", "sources=('local','web')")
    assert "'r SOURCE' search local or web next" in out and "search(query, source?)" in out
    assert "(the next search goes to web)" in out
    assert '[call 1] search(query="Aldo Quill father", source="web")\nDoc 1 (Title: Aldo Quill)' in out


def test_call_line_shows_arguments_as_written_when_they_are_not_an_object():
    assert call_line("search", {"query": 'say "hi"'}) == 'search(query="say \\"hi\\"")'
    assert call_line("", ["x"]) == '(no name)(["x"])'
