"""The report in a real browser: Debian's Chromium driven by Playwright for Python.

Each test opens a report of real `hopgym eval` runs and checks what the page shows against the
trajectory files, read here with nothing but ``json``. Screenshots go to a temporary folder, or
to ``$HOPGYM_SCREENSHOT_DIR`` when it is set. Without a browser the tests skip and say what to
install.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

import pytest
from tools_runs import many_calls_run, tools_eval_run
from viewer_helpers import (
    INSTALL_HINT,
    PAYLOAD,
    eval_run,
    expected_counts,
    launch_browser,
    payload_run,
    read_jsonl,
)

from hopgym.viewer import write_report

sync_api = pytest.importorskip("playwright.sync_api", reason=f"no Playwright: {INSTALL_HINT}")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = launch_browser(p)
        yield b
        b.close()


@pytest.fixture(scope="module")
def screens(tmp_path_factory) -> Path:
    folder = os.environ.get("HOPGYM_SCREENSHOT_DIR")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return Path(folder)
    return tmp_path_factory.mktemp("screenshots")


class Page:
    """A page in a fresh context that records requests, console errors and dialogs."""

    def __init__(self, browser, width: int = 1360, height: int = 900) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height})
        self.page = self.context.new_page()
        self.requests: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def dialog(d):
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", dialog)

    def open(self, path: Path):
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("body[data-ready=true]")
        return self.page

    def shot(self, path: Path) -> Path:
        self.page.evaluate("() => window.scrollTo(0, 0)")
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 10_000  # a real picture, not a blank page
        return path


@pytest.fixture
def page(browser):
    p = Page(browser)
    yield p
    p.context.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two real runs on the same questions: the iterative reader and the no-retrieval agent."""
    folder = tmp_path_factory.mktemp("runs")
    common = ["--env", "hopgym/Synthetic-v1", "--episodes", "40", "--seed", "0"]
    return {
        "iterative": eval_run(folder, "iterative", *common, "--agent", "iterative"),
        "direct": eval_run(folder, "direct", *common, "--agent", "direct"),
    }


def _shown(page) -> int:
    return int(page.get_attribute("#shown-count", "data-shown"))


def test_report_of_a_real_eval_run(page, runs, screens):
    path = runs["iterative"]
    header, episodes = read_jsonl(path)
    p = page.open(write_report(path, path.with_name("iterative.html")))
    # Summary: outcome counts and EM as in the file.
    for name, n in expected_counts(episodes).items():
        assert p.inner_text(f'#summary [data-count="{name}"] .n') == str(n), name
    em = sum(e["em"] for e in episodes) / len(episodes)
    assert p.inner_text('#summary [data-metric="em"] .value') == f"{em:.3f}"
    assert "hopgym/Synthetic-v1" in p.inner_text(".run-info") and "iterative" in p.inner_text(".run-info")
    assert p.locator("#summary svg.chart").count() == 3
    page.shot(screens / "summary.png")

    # Episodes: the whole list, then filtered by outcome, kind and text.
    p.click("button[data-tab=episodes]")
    assert _shown(p) == len(episodes) and p.inner_text("#shown-count") == "40 of 40 episodes"
    p.select_option("#f-outcome", "wrong")
    wrong = [e for e in episodes if e["prediction"] is not None and e["em"] < 1]
    assert _shown(p) == len(wrong) > 0
    assert set(
        p.eval_on_selector_all(
            "#ep-list .ep-row .line1 [data-outcome]", "els => els.map(e => e.dataset.outcome)"
        )
    ) == {"wrong"}
    kind = Counter(e["kind"] for e in wrong).most_common(1)[0][0]
    p.select_option("#f-kind", kind)
    assert _shown(p) == sum(1 for e in wrong if e["kind"] == kind)
    target = next(e for e in wrong if e["kind"] == kind)
    p.fill("#f-text", target["question_id"])
    p.wait_for_selector('#shown-count[data-shown="1"]')

    # Open it: a timeline with the question, gold documents marked where they were shown.
    p.click("#ep-list .ep-row")
    timeline = p.locator("#ep-detail .timeline")
    assert timeline.locator(".question").inner_text() == target["question"]
    gold = set(target["supporting_ids"])
    shown = [d for t in target["turns"] for d in t.get("new_ids", [])]
    marked = p.eval_on_selector_all("#ep-detail .turns .doc.gold", "els => els.map(e => e.dataset.docId)")
    unmarked = p.eval_on_selector_all(
        "#ep-detail .turns .doc:not(.gold)", "els => els.map(e => e.dataset.docId)"
    )
    assert marked == [d for d in shown if d in gold] and marked, "a gold document shown is marked"
    assert unmarked == [d for d in shown if d not in gold]
    assert "gold" in timeline.locator(".turns .doc.gold .b-gold").first.inner_text()
    assert timeline.locator(".turn").count() == target["steps"]
    assert timeline.locator(".reader .doc").count() == len(gold)
    assert timeline.locator(".verdict").inner_text().startswith("Wrong")
    page.shot(screens / "episode.png")
    assert not page.errors and not page.dialogs


def test_compare_lists_what_the_second_run_fixed_and_broke(page, runs, screens):
    a_path, b_path = runs["iterative"], runs["direct"]
    _, a = read_jsonl(a_path)
    _, b = read_jsonl(b_path)
    index_b = {(e["question_id"], e["seed"]): j for j, e in enumerate(b)}
    fixed = [
        (i, index_b[(e["question_id"], e["seed"])])
        for i, e in enumerate(a)
        if e["em"] < 1 and b[index_b[(e["question_id"], e["seed"])]]["em"] == 1
    ]
    broke = [
        (i, index_b[(e["question_id"], e["seed"])])
        for i, e in enumerate(a)
        if e["em"] == 1 and b[index_b[(e["question_id"], e["seed"])]]["em"] < 1
    ]
    assert broke, "the no-retrieval agent should lose questions the reader got right"
    p = page.open(write_report([a_path, b_path]))
    assert p.locator(".run-info").count() == 2
    p.click("button[data-tab=compare]")
    assert p.inner_text('#compare [data-count="fixed"] .n') == str(len(fixed))
    assert p.inner_text('#compare [data-count="broke"] .n') == str(len(broke))
    p.click('#compare [data-count="broke"]')
    rows = p.eval_on_selector_all(
        "#pair-list .pair-row", "els => els.map(e => [Number(e.dataset.a), Number(e.dataset.b)])"
    )
    assert [tuple(r) for r in rows] == broke
    p.click("#pair-list .pair-row")
    side_a = p.locator("#pair-detail .side-a .timeline")
    side_b = p.locator("#pair-detail .side-b .timeline")
    assert side_a.get_attribute("data-outcome") == "correct"
    assert side_b.get_attribute("data-outcome") in ("wrong", "no answer")
    assert side_a.locator(".question").inner_text() == side_b.locator(".question").inner_text()
    assert side_b.locator(".turn").count() == b[broke[0][1]]["steps"]
    page.shot(screens / "compare.png")
    assert not page.errors


def _without_csp(html_path: Path) -> Path:
    """The same report without its Content-Security-Policy, so that only the page's own
    behaviour (not the browser's policy) keeps it offline and escaped."""
    html = html_path.read_text()
    stripped, n = re.subn(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    assert n == 1
    out = html_path.with_name(html_path.stem + "-nocsp.html")
    out.write_text(stripped)
    return out


def test_report_works_offline_and_requests_nothing(browser, runs):
    report = write_report([runs["iterative"], runs["direct"]], runs["iterative"].with_name("off.html"))
    for path in (report, _without_csp(report)):
        page = Page(browser)
        page.context.route(re.compile(r"^(?!file:).*"), lambda route: route.abort())
        p = page.open(path)
        for tab in ("episodes", "compare", "summary", "episodes"):
            p.click(f"button[data-tab={tab}]")
        p.click("#ep-list .ep-row")
        p.keyboard.press("j")
        p.click("button[data-tab=compare]")
        p.click("#pair-list .pair-row")
        assert page.requests == [path.resolve().as_uri()], page.requests
        assert not page.errors, page.errors  # a request the policy refused would log an error
        page.context.close()


def test_dataset_text_cannot_inject_markup_or_script(browser, tmp_path, screens):
    report = write_report(payload_run(tmp_path), tmp_path / "payload.html")
    for path in (report, _without_csp(report)):
        page = Page(browser)
        p = page.open(path)
        p.click("button[data-tab=episodes]")
        p.click("#ep-list .ep-row")
        assert p.evaluate("() => window.__xss") is None and not page.dialogs
        assert p.locator("img").count() == 0 and p.locator("b:has-text('bold')").count() == 0
        assert p.inner_text("#ep-detail .question").endswith(PAYLOAD)
        assert p.inner_text("#ep-detail .reader .doc-title").endswith(PAYLOAD)
        assert PAYLOAD in p.inner_text("#ep-detail .turns .doc-text")
        assert any(
            o.endswith(PAYLOAD)
            for o in p.eval_on_selector_all("#f-kind option", "els => els.map(e => e.textContent)")
        )
        assert PAYLOAD in p.inner_text("#summary .breakdown")  # the Python-built summary
        assert not page.errors, page.errors
        if path == report:
            page.shot(screens / "payload.png")
        page.context.close()


def test_long_runs_are_paged_and_keyboard_navigable(page, tmp_path):
    path = eval_run(tmp_path, "long", "--env", "hopgym/Tiny-v1", "--agent", "random", "--episodes", "120")
    p = page.open(write_report(path))
    p.click("button[data-tab=episodes]")
    assert p.locator("#ep-list .ep-row").count() == 50  # one page in the DOM, not 120 rows
    assert p.inner_text("#ep-list .pager .page >> nth=0") == "page 1 of 3"
    p.click("#ep-list .pager .next >> nth=0")
    assert p.get_attribute("#ep-list .ep-row >> nth=0", "data-index") == "50"
    p.click("#ep-list .ep-row >> nth=0")
    p.keyboard.press("j")
    assert p.get_attribute("#ep-detail .timeline", "data-index") == "51"
    p.keyboard.press("k")
    p.keyboard.press("k")
    assert p.get_attribute("#ep-detail .timeline", "data-index") == "49"  # back to page 1
    assert p.inner_text("#ep-list .pager .page >> nth=0") == "page 1 of 3"
    assert not page.errors


def test_reports_of_hopgym_0_1_runs_open(page, tmp_path):
    old = FIXTURES / "trajectories_hopgym_0_1.jsonl"
    p = page.open(write_report(old, tmp_path / "old.html"))
    assert "hopgym 0.1" in p.inner_text("#summary .note")
    p.click("button[data-tab=episodes]")
    assert p.inner_text("#shown-count") == "4 of 4 episodes"
    p.click("#ep-list .ep-row")
    titles = p.eval_on_selector_all("#ep-detail .turns .doc-title", "els => els.map(e => e.textContent)")
    assert titles[0] == "Rikesu Foods Partners" and len(titles) == 9
    assert "not recorded" in p.inner_text("#ep-detail .reader")
    assert not page.errors


def _calls_shown(turn) -> list[dict]:
    """Each call box of a turn as the page shows it: signature, badge, gold and other documents."""
    return turn.locator(".call").evaluate_all(
        """els => els.map(c => ({
            sig: c.querySelector('.call-sig').textContent,
            type: c.querySelector('.b-type').textContent,
            gold: Array.from(c.querySelectorAll('.doc.gold')).map(d => d.dataset.docId),
            other: Array.from(c.querySelectorAll('.doc:not(.gold)')).map(d => d.dataset.docId),
            text: c.textContent}))""",
    )


def test_tool_call_turns_show_each_call_and_its_result(page, tmp_path, screens):
    # A real `hopgym eval --protocol tools` run: one call a turn, each with its documents.
    run = tools_eval_run(tmp_path)
    _, episodes = read_jsonl(run)
    p = page.open(write_report(run))
    p.click("button[data-tab=episodes]")
    target = max(episodes, key=lambda e: len(e["turns"]))
    p.fill("#f-text", target["question_id"])
    p.wait_for_selector('#shown-count[data-shown="1"]')
    p.click("#ep-list .ep-row")
    gold = set(target["supporting_ids"])
    turns = p.locator("#ep-detail .turns > .turn")
    assert turns.count() == len(target["turns"])
    for n, t in enumerate(target["turns"]):
        (shown,) = _calls_shown(turns.nth(n))
        (call,) = t["calls"]
        args = ", ".join(f"{k}={json.dumps(v)}" for k, v in call["arguments"].items())
        assert shown["sig"] == f"{call['name']}({args})" and shown["type"] == call["action_type"]
        ids = call.get("new_ids", [])
        assert shown["gold"] == [d for d in ids if d in gold] and shown["other"] == [
            d for d in ids if d not in gold
        ]
    assert not page.errors

    # One episode whose turns hold several calls: a tool error, calls not run, ids, a repeat.
    _, (ep,) = read_jsonl(many_calls_run(tmp_path))
    p = page.open(write_report(tmp_path / "many_calls.jsonl"))
    p.click("button[data-tab=episodes]")
    p.click("#ep-list .ep-row")
    turns = p.locator("#ep-detail .turns > .turn")
    first, second = turns.nth(0), turns.nth(1)
    assert first.locator(".turn-head .b-type").text_content() == "4 tool calls"
    calls = _calls_shown(first)
    titles = [ep["documents"][d]["title"] for d in ep["supporting_ids"]]
    assert [c["sig"] for c in calls] == [f'search(query="{t}")' for t in titles] + [
        "serch()",
        'answer(answer="x")',
    ]
    assert [c["type"] for c in calls] == ["search", "search", "invalid", "not run"]
    gold = set(ep["supporting_ids"])
    for c, rec in zip(calls, ep["turns"][0]["calls"], strict=True):
        ids = rec.get("new_ids", [])
        assert c["gold"] == [d for d in ids if d in gold] and c["other"] == [d for d in ids if d not in gold]
    assert sorted(d for c in calls for d in c["gold"]) == sorted(gold)
    assert "Tool error: unknown tool 'serch'" in calls[2]["text"]
    assert "Not run: an earlier call of this turn failed." in calls[3]["text"]
    calls = _calls_shown(second)
    assert [c["sig"] for c in calls] == [
        f'search(query="{titles[0]}")',
        f'answer(answer="{ep["answers"][0]}")',
        'search({"query": )',
    ]
    assert "id c1" in calls[0]["text"] and "You already searched for this" in calls[0]["text"]
    assert f"Answer: {ep['answers'][0]} (ends the episode)" in calls[1]["text"]
    assert "Not run: the answer ended the episode." in calls[2]["text"]
    page.shot(screens / "tool-calls.png")
    assert not page.errors and not page.dialogs
