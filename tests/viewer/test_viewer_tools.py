"""Runs of the ``tools`` protocol: each call and its result recorded, and in the report's data.

What the page shows of them in a browser is tested in ``test_viewer_browser.py``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tools_runs import many_calls_run, tools_eval_run
from viewer_helpers import read_jsonl

from hopgym.cli import main
from hopgym.viewer import write_report


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="hopgym-data">(.*?)</script>', html, re.S)
    assert m, "the data block is missing"
    return json.loads(m.group(1))


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tools")


def test_eval_with_tools_records_each_call_and_the_view_shows_it(folder, capsys):
    run = tools_eval_run(folder)
    header, episodes = read_jsonl(run)
    assert header["protocol"] == "tools"
    turns = [t for e in episodes for t in e["turns"]]
    assert turns and all(len(t["calls"]) == 1 for t in turns)  # the iterative agent: one a turn
    for t in turns:
        (call,) = t["calls"]
        assert call["action_type"] == t["action_type"]
        if call["name"] == "search":
            assert call["arguments"] == {"query": t["query"]}
            assert call.get("new_ids", []) == t.get("new_ids", [])
        else:
            assert call["name"] == "answer" and call["arguments"] == {"answer": t["answer"]}
            assert call["answer"] == t["answer"] and "result" not in call  # an answer gets no message

    out = folder / "tools.html"
    assert main(["view", str(run), "-o", str(out)]) == 0
    html = out.read_text()
    data = _data(html)
    docs = data["docs"]
    assert "protocol</dt><dd>tools" in html
    for ep, rec in zip(data["runs"][0]["episodes"], episodes, strict=True):
        gold = {docs[i][0] for i in ep["support_docs"]}
        assert gold == set(rec["supporting_ids"])
        for t, t_rec in zip(ep["turns"], rec["turns"], strict=True):
            (call,) = t["calls"]
            assert call["name"] == t_rec["calls"][0]["name"]
            assert call["arguments"] == t_rec["calls"][0]["arguments"]
            # Each call's documents are rows of the report's table: the gold ones are marked from it.
            assert [docs[i][0] for i in call["docs"]] == t_rec.get("new_ids", [])
    shown = {
        docs[i][0] for ep in data["runs"][0]["episodes"] for t in ep["turns"] for i in t["calls"][0]["docs"]
    }
    assert shown & {d for e in episodes for d in e["supporting_ids"]}, "gold documents were shown"


def test_a_turn_of_several_calls_records_every_call(folder):
    header, (ep,) = read_jsonl(many_calls_run(folder))
    first, second = ep["turns"]
    gold = ep["supporting_ids"]
    # Turn 1: both searches ran and showed their documents, the unknown tool failed, the answer
    # after it did not run; every call's search counts and every gold document was seen.
    assert [c["action_type"] for c in first["calls"]] == ["search", "search", "invalid", "not run"]
    assert [c["name"] for c in first["calls"]] == ["search", "search", "serch", "answer"]
    assert first["calls"][3]["arguments"] == {"answer": "x"}
    shown = first["calls"][0]["new_ids"] + first["calls"][1]["new_ids"]
    assert set(gold) <= set(shown) and first["new_ids"] == shown
    assert first["calls"][2]["invalid_action"] == "unknown tool 'serch': the tools are search, answer"
    assert first["calls"][3]["result"] == "Not run: an earlier call of this turn failed."
    assert "result" not in first["calls"][0]  # its documents are in "documents", not repeated
    assert first["action_type"] == "invalid" and first["think"] == "both at once"
    # Turn 2 (a structured message): ids kept, a repeated search's message, malformed arguments
    # as written.
    assert [c.get("id") for c in second["calls"]] == ["c1", "c2", "c3"]
    assert [c["action_type"] for c in second["calls"]] == ["search", "answer", "not run"]
    assert second["calls"][0]["repeated_query"] is True and second["calls"][0]["skipped_ids"]
    assert second["calls"][0]["result"].startswith("You already searched for this")
    assert second["calls"][1]["answer"] == ep["answers"][0] and "result" not in second["calls"][1]
    assert second["calls"][2]["arguments"] == '{"query": '
    assert second["calls"][2]["result"] == "Not run: the answer ended the episode."
    assert ep["searches"] == 3 and ep["support_recall"] == 1.0 and ep["em"] == 1.0
    assert ep["invalid"] == 1 and ep["steps"] == 2


def test_the_report_carries_every_call_with_its_documents(folder):
    path = many_calls_run(folder)
    _, (rec,) = read_jsonl(path)
    data = _data(write_report(path).read_text())
    docs = data["docs"]
    (ep,) = data["runs"][0]["episodes"]
    for t, t_rec in zip(ep["turns"], rec["turns"], strict=True):
        assert len(t["calls"]) == len(t_rec["calls"])
        for c, c_rec in zip(t["calls"], t_rec["calls"], strict=True):
            assert {k: v for k, v in c.items() if k != "docs"} == {
                k: v for k, v in c_rec.items() if k != "new_ids"
            }
            assert [docs[i][0] for i in c["docs"]] == c_rec.get("new_ids", [])
    # The gold documents the calls showed are the supporting documents: marked by the page.
    gold = {docs[i][0] for i in ep["support_docs"]}
    assert gold == {docs[i][0] for c in ep["turns"][0]["calls"] for i in c["docs"]} & gold
    assert gold == set(rec["supporting_ids"])
