"""The HTML report as a file: self-contained, escaped, paired; and the commands that write it.

What the page shows in a browser is tested in ``test_viewer_browser.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html import unescape
from pathlib import Path

import pytest
from viewer_helpers import PAYLOAD, eval_run, payload_run, read_jsonl

from hopgym.agents.trajectories import read_trajectories
from hopgym.cli import main
from hopgym.viewer import pair_episodes, render_report, write_report

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return eval_run(
        tmp_path_factory.mktemp("run"),
        "tiny",
        "--env",
        "hopgym/Tiny-v1",
        "--agent",
        "iterative",
        "--episodes",
        "8",
    )


def _data(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="hopgym-data">(.*?)</script>', html, re.S)
    assert m, "the data block is missing"
    return json.loads(m.group(1))


def test_report_is_one_self_contained_file(run, tmp_path):
    out = write_report(run, tmp_path / "r.html")
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    # Nothing is loaded from anywhere: no URL other than the SVG namespace, no external script.
    urls = set(re.findall(r"(?:https?:)?//[\w.-]+", html)) - {"http://www.w3.org"}
    assert not urls, urls
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=\"(?!data:)", html)
    # The policy allows the report's own script only, by hash, and no request of any kind.
    csp = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html).group(1))
    script = re.findall(r"<script>(.*?)</script>", html, re.S)[-1]
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp and "default-src 'none'" in csp
    # Episodes are in the data, every document once.
    data = _data(html)
    _, episodes = read_jsonl(run)
    assert [e["question_id"] for e in data["runs"][0]["episodes"]] == [e["question_id"] for e in episodes]
    ids = [d[0] for d in data["docs"]]
    assert len(ids) == len(set(ids))


def test_data_cannot_break_out_of_its_script_block(tmp_path):
    html = write_report(payload_run(tmp_path), tmp_path / "p.html").read_text()
    # Only the page's own two script blocks open and close; the payload's tags never appear.
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert "<img" not in html and "<b>" not in html and "<!--" not in html
    # The summary, built in Python, escapes too (kind and agent carry the payload).
    assert "&lt;img src=x" in html
    data = _data(html)  # the escaped JSON still reads back exactly
    assert data["runs"][0]["episodes"][0]["question"].endswith(PAYLOAD)


def test_pairs_by_question_and_seed_or_by_order():
    def ep(q, seed, em, pred="x"):
        return {"question_id": q, "seed": seed, "em": em, "prediction": pred}

    a = [ep("q1", 0, 0.0), ep("q2", 1, 1.0), ep("q3", 2, 1.0), ep("q4", 3, 0.0, None), ep("q9", 9, 1)]
    b = [ep("q3", 2, 1.0), ep("q2", 1, 0.0), ep("q1", 0, 1.0), ep("q4", 3, 0.0), ep("q1", 5, 1.0)]
    p = pair_episodes(a, b)
    assert p["fixed"] == [[0, 2]] and p["broke"] == [[1, 1]] and p["both correct"] == [[2, 0]]
    assert p["both wrong"] == [[3, 3]] and p["only a"] == [4] and p["only b"] == [4]
    # Without seeds (a hopgym 0.1 file), the n-th episode of a question pairs with the n-th.
    old = [ep("q1", None, 0.0), ep("q1", None, 1.0)]
    assert pair_episodes(old, [ep("q1", 7, 1.0), ep("q1", 8, 1.0)])["fixed"] == [[0, 0]]


def test_old_files_render_with_a_note(tmp_path):
    old = FIXTURES / "trajectories_hopgym_0_1.jsonl"
    html = write_report(old, tmp_path / "old.html").read_text()
    assert "A trajectory file of hopgym 0.1" in html and "Not recorded in this file" in html
    assert len(_data(html)["runs"][0]["episodes"]) == 4


def test_two_runs_and_their_default_names(run, tmp_path):
    other = eval_run(tmp_path, "direct", "--env", "hopgym/Tiny-v1", "--agent", "direct", "--episodes", "8")
    out = write_report([run, other])
    assert out == run.with_name(f"{run.stem}-vs-{other.stem}.html")
    data = _data(out.read_text())
    assert (
        len(data["runs"]) == 2
        and sum(len(v) for k, v in data["pairs"].items() if not k.startswith("only")) == 8
    )
    assert write_report(other) == other.with_suffix(".html")
    runs = [read_trajectories(run)] * 3
    with pytest.raises(ValueError, match="one run or compares two, got 3"):
        render_report(runs)


def test_view_command(run, tmp_path, capsys):
    out = tmp_path / "v.html"
    assert main(["view", str(run), "-o", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out) and out.stat().st_size > 0
    with pytest.raises(SystemExit, match="one trajectory file, or two"):
        main(["view", str(run), str(run), str(run)])
    with pytest.raises(SystemExit, match="no trajectory file at .*missing.jsonl"):
        main(["view", str(tmp_path / "missing.jsonl")])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "hopgym-trajectories", "version": 1}\nnot json\n')
    with pytest.raises(SystemExit, match=r"bad.jsonl:2: not JSON"):
        main(["view", str(bad)])


def test_eval_report_flag_writes_the_report_without_a_trajectory_file(tmp_path, capsys):
    out = tmp_path / "eval.html"
    assert (
        main(
            ["eval", "--env", "hopgym/Tiny-v1", "--agent", "oracle", "--episodes", "6", "--report", str(out)]
        )
        == 0
    )
    data = _data(out.read_text())
    assert len(data["runs"][0]["episodes"]) == 6 and data["runs"][0]["header"]["agent"] == "oracle"
    assert f"report: {out}" in capsys.readouterr().out.replace("\n", "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.html"]
