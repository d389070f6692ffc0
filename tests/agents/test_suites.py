"""``hopgym eval --suite``: the metrics against hand-computed values, a suite run over tiny files
(skipped, empty and untitled inputs; gold mapped to the corpus; trajectories; the JSON after
each set), bad layouts, and the settings guard of ``--compare``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hopgym.agents.scripted import make_agent
from hopgym.agents.suites import (
    compare_settings,
    pass_at_k,
    read_results,
    run_suite,
    set_metrics,
    suite_table,
)
from hopgym.agents.trajectories import read_trajectories
from hopgym.cli import main
from hopgym.corpora.datasets import DatasetFormatError
from hopgym.errors import InvalidOptionError
from hopgym.rewards.judges import CallableJudge


def _rec(qid, pred, answers=("Oslo",), steps=2, searches=1, invalid=0):
    return {
        "question_id": qid,
        "question": f"where is {qid}?",
        "answers": list(answers),
        "prediction": pred,
        "steps": steps,
        "searches": searches,
        "invalid": invalid,
    }


def test_pass_at_k_matches_the_formula():
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k: every draw holds a right one
    assert pass_at_k(10, 1, 1) == pytest.approx(0.1)
    with pytest.raises(InvalidOptionError):
        pass_at_k(2, 1, 3)


def test_set_metrics_hand_computed():
    recs = [
        _rec("a", "Oslo", steps=3, searches=2),  # EM 1, F1 1, cover 1
        _rec("a", "the city of Oslo in Norway", steps=2, searches=1, invalid=1),  # EM 0, cover 1
        _rec("b", "Bergen", answers=("Bergen city",), steps=4, searches=3),  # EM 0, F1 2/3, cover 0
        _rec("b", None, steps=4, searches=0, invalid=2),  # unanswered: all 0
    ]
    m = set_metrics(recs, cover_em_max_extra=20, attempts=2)
    assert m["episodes"] == 4 and m["questions"] == 2
    assert m["em"] == pytest.approx(1 / 4)
    # F1 of "the city of Oslo in Norway" vs "Oslo": tokens city, oslo, norway (articles and
    # punctuation dropped; "of", "in" kept) -> 5 tokens, 1 common: P 1/5, R 1 -> 2/6
    assert m["f1"] == pytest.approx((1 + 1 / 3 + 2 / 3 + 0) / 4)
    assert m["cover_em"] == pytest.approx(2 / 4)
    assert m["answered"] == pytest.approx(3 / 4)
    assert m["invalid_rate"] == pytest.approx(3 / 13)
    assert m["avg_searches"] == pytest.approx(6 / 4)
    assert m["avg_turns"] == pytest.approx(13 / 4)
    # question a: 1 of 2 right; b: 0 of 2. pass@1 = (1/2 + 0)/2, pass@2 = (1 + 0)/2
    assert m["pass@1"] == pytest.approx(0.25) and m["pass@2"] == pytest.approx(0.5)
    # bounded cover-EM: 5 extra tokens are too many for a bound of 2
    assert set_metrics(recs, cover_em_max_extra=2)["cover_em"] == pytest.approx(1 / 4)


def test_set_metrics_judge_is_asked_only_past_string_match():
    asked = []

    def verdict(question, prediction, golds):
        asked.append(prediction)
        return prediction == "Oslo, Norway"

    recs = [_rec("a", "Oslo"), _rec("b", "Oslo, Norway"), _rec("c", "Bergen"), _rec("d", None)]
    m = set_metrics(recs, judge=CallableJudge(answer_fn=verdict))
    assert m["judge"] == pytest.approx(2 / 4)
    assert asked == ["Oslo, Norway", "Bergen"]


# ------------------------------------------------------------------------------ tiny files
CORPUS = [
    {"id": "0", "contents": '"Brenna Observatory"\nThe Brenna Observatory is an observatory in Kaldor.'},
    {"id": "1", "contents": '"Kaldor"\nKaldor is a city on the Tolva River.'},
    {"id": "2", "contents": '"Lake Ombra"\nLake Ombra is a lake in Vandria.'},
    {"id": "3", "contents": "\nA passage without a title about the Tolva River delta."},
]
HOTPOT = [
    {
        "_id": "h1",
        "question": "Which river flows through the city where the Brenna Observatory is located?",
        "answer": "Tolva River",
        "supporting_facts": [["Brenna Observatory", 0], ["Kaldor", 0]],
        "context": [
            ["Brenna Observatory", ["The Brenna Observatory is an observatory in Kaldor."]],
            ["Kaldor", ["Kaldor is a city on the Tolva River."]],
            ["Lake Ombra", ["Lake Ombra is a lake in Vandria."]],
        ],
        "type": "bridge",
        "level": "easy",
    }
]
BAMBOOGLE = [{"id": "b1", "question": "Which lake is in Vandria?", "golden_answers": ["Lake Ombra"]}]


def _write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


@pytest.fixture
def data(tmp_path):
    root = tmp_path / "data"
    _write(root / "hotpotqa" / "dev.jsonl", HOTPOT)  # the original HotpotQA layout
    _write(root / "bamboogle" / "test.jsonl", BAMBOOGLE)  # FlashRAG layout
    _write(root / "nq" / "test.jsonl", [])  # empty
    _write(tmp_path / "corpus.jsonl", CORPUS)
    return root


def _oracle(env):
    return make_agent("oracle", env, seed=0)


def test_run_suite_over_tiny_files(data, tmp_path):
    lines = []
    out = tmp_path / "run.json"
    result = run_suite(
        "searchr1",
        data,
        _oracle,
        agent_name="oracle",
        corpus=tmp_path / "corpus.jsonl",
        retriever="bm25",
        json_path=str(out),
        trajectories=tmp_path / "traj",
        log=lines.append,
    )
    assert set(result["sets"]) == {"hotpotqa", "bamboogle"}
    assert result["empty"] == ["nq"]
    assert "triviaqa/test.jsonl" in result["skipped"]["triviaqa"]
    assert sum("popqa/test.jsonl" in line for line in lines) == 1  # one line per missing set
    assert sum("no title" in line for line in lines) == 1  # said once
    hot = result["sets"]["hotpotqa"]
    assert hot["em"] == 1.0 and hot["episodes"] == 1
    # gold mapped to the corpus by title: both paragraphs found by the question at top-3
    assert hot["recall@3"] == 1.0
    assert result["sets"]["bamboogle"]["recall@3"] is None  # no gold passages known
    # the empty set is not averaged as 0: general has no set, multihop is the mean of two
    assert result["averages"]["em"]["general"] is None
    assert result["averages"]["em"]["multihop"] == 1.0
    settings = result["settings"]
    assert settings["corpus"]["passages"] == 4 and settings["corpus"]["untitled"] == 1
    assert len(settings["corpus"]["xxh3_64"]) == 16
    assert settings["retriever"]["top_k"] == 3 and settings["max_turns"] == 4
    assert settings["protocol"] == "tags" and settings["reward"] is None
    assert read_results(out)["sets"].keys() == result["sets"].keys()
    run = read_trajectories(tmp_path / "traj" / "hotpotqa.jsonl")
    assert run.header["agent"] == "oracle" and len(run.episodes) == 1
    table = suite_table([result])
    assert table.splitlines()[2].startswith(
        "| oracle | – | – | – | 100.0 | – | – | 100.0 | – | 100.0 | 100.0 |"
    )


def test_the_suite_retriever_records_e5_prefixes_and_pooling(data, tmp_path):
    with pytest.raises(InvalidOptionError, match="prefix or pooling"):
        # the hashing embedder has no prefixes: the e5 settings are refused, not dropped
        run_suite(
            "searchr1",
            data,
            _oracle,
            agent_name="oracle",
            corpus=tmp_path / "corpus.jsonl",
            retriever={"kind": "dense", "model": "hashing-64", "query_prefix": "query: ", "pooling": "mean"},
            log=lambda _: None,
        )


def test_interrupt_keeps_the_finished_sets(data, tmp_path):
    calls = []

    def agent(env):
        calls.append(env)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return _oracle(env)

    out = tmp_path / "run.json"
    result = run_suite(
        "searchr1",
        data,
        agent,
        agent_name="oracle",
        corpus=tmp_path / "corpus.jsonl",
        retriever="bm25",
        json_path=str(out),
        log=lambda _: None,
    )
    saved = json.loads(out.read_text())
    assert result["interrupted"] and saved["interrupted"]
    assert list(saved["sets"]) == ["hotpotqa"]


def test_a_file_of_the_wrong_layout_names_file_line_and_field(data, tmp_path):
    bad = dict(HOTPOT[0])
    del bad["question"]
    _write(data / "hotpotqa" / "dev.jsonl", [HOTPOT[0] | {"_id": "h0"}, bad])
    with pytest.raises(DatasetFormatError) as err:
        run_suite(
            "searchr1",
            data,
            _oracle,
            agent_name="oracle",
            corpus=tmp_path / "corpus.jsonl",
            retriever="bm25",
            log=lambda _: None,
        )
    assert err.value.line == 2 and err.value.field == "question"
    assert "hotpotqa/dev.jsonl" in str(err.value)


def test_cli_suite_and_compare_guard(data, tmp_path, capsys):
    corpus = str(tmp_path / "corpus.jsonl")
    base = ["eval", "--suite", "searchr1", "--data", str(data), "--corpus", corpus, "--retriever", "bm25"]
    a, b, c = (str(tmp_path / f"{n}.json") for n in "abc")
    md = tmp_path / "table.md"
    assert main([*base, "--agent", "oracle", "--json", a, "--markdown", str(md)]) == 0
    assert "| oracle |" in md.read_text() and "corpus.xxh3_64" in md.read_text()
    assert main([*base, "--agent", "direct", "--json", b]) == 0
    assert main([*base, "--agent", "direct", "--json", c, "--max-turns", "2"]) == 0
    capsys.readouterr()
    assert main(["eval", "--suite", "searchr1", "--compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "| oracle |" in out and "| direct |" in out
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--suite", "searchr1", "--compare", a, c])
    assert "max_turns: 4 != 2" in str(exc.value.code)
    assert compare_settings(read_results(a), read_results(c)) == ["max_turns: 4 != 2"]


def test_compare_puts_rows_with_different_agent_settings_side_by_side(data, tmp_path, capsys):
    """Sampling describes a row's agent, not the protocol: a greedy row and a sampled one compare,
    and the table lists each row's own settings."""
    corpus = str(tmp_path / "corpus.jsonl")
    base = ["eval", "--suite", "searchr1", "--data", str(data), "--corpus", corpus, "--retriever", "bm25"]
    a, b = str(tmp_path / "a.json"), str(tmp_path / "b.json")
    assert main([*base, "--agent", "oracle", "--json", a]) == 0
    assert main([*base, "--agent", "direct", "--json", b]) == 0
    sampled = read_results(b)
    sampled["settings"]["sampling"] = {"temperature": 1.0, "max_new_tokens": 64}
    Path(b).write_text(json.dumps(sampled))
    capsys.readouterr()
    assert main(["eval", "--suite", "searchr1", "--compare", a, b]) == 0
    out = capsys.readouterr().out
    assert "| oracle |" in out and "| direct |" in out
    assert "- oracle: sampling.temperature=0.0" in out
    assert "- direct: sampling.temperature=1.0, sampling.max_new_tokens=64" in out


def test_cli_suite_needs_data_and_a_corpus(data):
    with pytest.raises(SystemExit, match="--data"):
        main(["eval", "--suite", "searchr1", "--corpus", "c.jsonl"])
    with pytest.raises(SystemExit, match="--corpus FILE, --index DIR or --retriever URL"):
        main(["eval", "--suite", "searchr1", "--data", str(data)])


def test_run_suite_on_a_saved_index(data, tmp_path):
    from hopgym.corpora.datasets import load_corpus
    from hopgym.retrieval.index_store import save_index
    from hopgym.retrieval.specs import make_retriever

    corpus = tmp_path / "corpus.jsonl"
    save_index(make_retriever("bm25", load_corpus(corpus)), tmp_path / "idx", corpus_path=corpus)
    result = run_suite(
        "searchr1",
        data,
        _oracle,
        agent_name="oracle",
        index=tmp_path / "idx",
        sets=["hotpotqa"],
        log=lambda _: None,
    )
    assert result["sets"]["hotpotqa"]["recall@3"] == 1.0
    assert result["settings"]["corpus"]["passages"] == 4 and result["settings"]["retriever"]["kind"] == "bm25"
