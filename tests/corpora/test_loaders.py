from __future__ import annotations

import gzip
import json
import pickle
import socket
import sys
import time
import types
from pathlib import Path

import pytest

from hopgym.corpora.datasets import (
    DatasetFormatError,
    DatasetUnavailableError,
    detect_format,
    iter_corpus,
    iter_records,
    load_2wiki,
    load_bamboogle,
    load_corpus,
    load_flashrag_qa,
    load_hotpotqa,
    load_musique,
    load_pooled_corpus,
    load_qa,
    parse_contents,
    passage_id,
)
from hopgym.corpora.datasets.hub import offline_reason, unreachable_reason
from hopgym.corpora.datasets.records import _iter_json_array
from hopgym.corpora.types import Passage, QASample
from hopgym.retrieval.per_sample import PerSampleIndex

FIX = Path(__file__).resolve().parents[1] / "fixtures"
HOTPOT_ARRAY = FIX / "hotpotqa_dev.json"
HOTPOT_JSONL = FIX / "hotpotqa_dev.jsonl"
WIKI2 = FIX / "2wiki_dev.json"
WIKI2_REORDERED = FIX / "2wiki_dev_reordered.jsonl"
MUSIQUE = FIX / "musique_dev.jsonl"
BAMBOOGLE = FIX / "bamboogle_test.jsonl"
CORPUS = FIX / "wiki_corpus.jsonl"
CORPUS_TT = FIX / "corpus_title_text.jsonl"

Q1 = "5a8b57f25542995d1e6f1371"


def by_id(ds, qid: str) -> QASample:
    return next(s for s in ds.samples if s.id == qid)


# --------------------------------------------------------------------------------- HotpotQA
def test_hotpotqa_array_and_jsonl_give_the_same_samples():
    a, b = load_hotpotqa(HOTPOT_ARRAY), load_hotpotqa(HOTPOT_JSONL)
    assert [s.id for s in a.samples] == [Q1, "5a7a06935542990198eaf050", "5ae61bfd5542992663a4f261"]
    assert a.samples == b.samples
    assert a.passages == b.passages
    assert a.mode == "distractor" and a.skipped == 0


def test_hotpotqa_distractor_gold_and_ids():
    ds = load_hotpotqa(HOTPOT_ARRAY)
    s = by_id(ds, Q1)
    assert s.question.startswith("Which river flows through")
    assert s.answers == ("Tolva River",)
    assert s.kind == "bridge" and s.hops == 2
    assert s.supporting_ids == (f"{Q1}:Brenna Observatory", f"{Q1}:Kaldor")
    assert s.metadata["level"] == "medium"
    assert s.metadata["supporting_facts"] == [("Brenna Observatory", 0), ("Kaldor", 1)]
    own = ds.by_sample[Q1]
    assert len(own) == 10
    kaldor = next(p for p in own if p.title == "Kaldor")
    # Leading spaces of HotpotQA sentences are kept, no doubled spaces.
    assert kaldor.text == (
        "Kaldor is the second largest city of Vandria. The Tolva River flows "
        "through Kaldor. It has a population of 310,000."
    )
    # Hops: one per supporting paragraph, queried by title; the last one carries the answer.
    assert [(h.query, h.doc_id, h.answer) for h in s.decomposition] == [
        ("Brenna Observatory", f"{Q1}:Brenna Observatory", ""),
        ("Kaldor", f"{Q1}:Kaldor", "Tolva River"),
    ]
    docs = ds.documents
    assert all(d in docs for d in s.supporting_ids)


def test_hotpotqa_fewer_than_ten_paragraphs_and_comparison():
    ds = load_hotpotqa(HOTPOT_JSONL)
    s = by_id(ds, "5a7a06935542990198eaf050")
    assert s.kind == "comparison"
    assert len(ds.by_sample[s.id]) == 4
    assert len(ds.by_sample["5ae61bfd5542992663a4f261"]) == 3
    # Every question's gold is among its own paragraphs.
    for q in ds.samples:
        own = {p.doc_id for p in ds.by_sample[q.id]}
        assert set(q.supporting_ids) <= own


def test_hotpotqa_open_mode_pools_and_deduplicates():
    ds = load_hotpotqa(HOTPOT_ARRAY, mode="open")
    assert ds.mode == "open" and ds.by_sample == {}
    ids = [p.doc_id for p in ds.passages]
    assert len(ids) == len(set(ids))
    # "Brenna Observatory" appears verbatim in two questions and once in the pool.
    assert sum(p.title == "Brenna Observatory" for p in ds.passages) == 1
    obs = next(p for p in ds.passages if p.title == "Brenna Observatory")
    assert obs.doc_id == passage_id(obs.title, obs.text)
    assert by_id(ds, Q1).supporting_ids[0] == obs.doc_id
    assert by_id(ds, "5ae61bfd5542992663a4f261").supporting_ids[0] == obs.doc_id
    total = sum(len(r["context"]) for r in json.loads(HOTPOT_ARRAY.read_text()))
    assert len(ds.passages) < total


def test_hotpotqa_missing_supporting_title_is_recorded(tmp_path):
    rec = json.loads(HOTPOT_JSONL.read_text().splitlines()[0])
    rec["supporting_facts"].append(["Not In Context", 0])
    f = tmp_path / "h.jsonl"
    f.write_text(json.dumps(rec) + "\n")
    s = load_hotpotqa(f).samples[0]
    assert s.metadata["missing_support"] == ["Not In Context"]
    assert len(s.supporting_ids) == 2


def test_corpus_mode_maps_gold_titles_to_the_first_passage():
    ds = load_hotpotqa(HOTPOT_ARRAY, corpus=CORPUS)
    assert ds.mode == "corpus" and ds.corpus_path == str(CORPUS)
    assert len(ds.passages) == 22
    # "Brenna Observatory" has two passages (ids 0 and 1): the lead one is the gold.
    assert by_id(ds, Q1).supporting_ids == ("0", "2")
    assert by_id(ds, Q1).decomposition[1].doc_id == "2"
    # Brenna Telescope is not in the corpus: unresolved, reported.
    assert ds.unresolved_support == {"5ae61bfd5542992663a4f261": ("Brenna Telescope",)}
    assert set(ds.documents) == {"0", "2", "6", "7"}


def test_mode_and_corpus_are_checked():
    with pytest.raises(ValueError, match="mode must be"):
        load_hotpotqa(HOTPOT_ARRAY, mode="closed")
    with pytest.raises(ValueError, match="corpus= is given"):
        load_hotpotqa(HOTPOT_ARRAY, mode="open", corpus=CORPUS)
    with pytest.raises(ValueError, match="needs corpus"):
        load_hotpotqa(HOTPOT_ARRAY, mode="corpus")


def test_limit_reads_only_the_first_questions():
    ds = load_hotpotqa(HOTPOT_ARRAY, limit=2)
    assert len(ds) == 2 and set(ds.by_sample) == {s.id for s in ds.samples}


# ------------------------------------------------------------------------------------ 2Wiki
def test_2wiki_evidence_hops_match_titles_that_differ_from_subjects():
    ds = load_2wiki(WIKI2)
    s = ds.samples[0]
    assert s.kind == "compositional" and s.answers == ("Lancashire",)
    earl = f"{s.id}:Thomas Stanley, 1st Earl of Derby"
    assert s.supporting_ids == (f"{s.id}:James Stanley (bishop)", earl)
    assert [(h.question, h.answer, h.doc_id) for h in s.decomposition] == [
        (
            "What is the father of James Stanley?",
            "Thomas Stanley, 1st Earl of Derby",
            f"{s.id}:James Stanley (bishop)",
        ),
        ("What is the place of death of Thomas Stanley?", "Lancashire", earl),
    ]
    assert s.metadata["answer_id"] == "Q23077"
    assert s.metadata["evidences"][1] == ["Thomas Stanley", "place of death", "Lancashire"]


def test_2wiki_duplicate_paragraph_is_merged():
    ds = load_2wiki(WIKI2)
    s = ds.samples[1]
    assert s.kind == "comparison" and s.hops == 2
    assert len(ds.by_sample[s.id]) == 4  # five in the file, one repeated verbatim


def test_2wiki_paragraph_order_does_not_change_ids_or_gold():
    a, b = load_2wiki(WIKI2), load_2wiki(WIKI2_REORDERED)
    assert a.samples == b.samples
    for qid in a.by_sample:
        assert set(a.by_sample[qid]) == set(b.by_sample[qid])
    assert detect_format(WIKI2) == "2wiki"


# ---------------------------------------------------------------------------------- MuSiQue
def test_musique_decomposition_aliases_and_support_order():
    ds = load_musique(MUSIQUE)
    assert [s.id for s in ds.samples] == ["2hop__574419_270105", "3hop1__9285_5188_23307"]
    s = ds.samples[0]
    assert s.answers == ("Stanley", "Stanley, North Dakota")
    assert s.hops == 2 and s.kind == "compositional"
    # Gold in hop order (the file lists paragraph 1 before paragraph 3).
    assert s.supporting_ids == (f"{s.id}:Van Hook Township", f"{s.id}:Mountrail County Courthouse")
    h1, h2 = s.decomposition
    assert h1.answer == "Mountrail County" and h1.doc_id == s.supporting_ids[0]
    assert h2.question == "Mountrail County >> capital"  # "#1" filled in
    assert h2.doc_id == s.supporting_ids[1]
    # The oracle's query names the paragraph and has no ">>".
    assert h2.query == "Mountrail County Courthouse: Mountrail County capital"


def test_musique_repeated_title_gets_distinct_ids():
    ds = load_musique(MUSIQUE)
    s = ds.samples[1]
    assert s.hops == 3 and s.answers == ("Tolva River", "the Tolva", "Tolva")
    own = {p.doc_id: p for p in ds.by_sample[s.id]}
    assert len(own) == 5
    gold = own[s.decomposition[2].doc_id]
    assert gold.text.startswith("Kaldor is a city on the Tolva River")
    assert s.decomposition[1].question == "Where was Mara Corvin born?"
    assert s.decomposition[2].question == "Which river flows through Kaldor?"


def test_musique_unanswerable_records_are_optional():
    assert len(load_musique(MUSIQUE)) == 2
    ds = load_musique(MUSIQUE, include_unanswerable=True)
    s = ds.samples[2]
    assert s.metadata["answerable"] is False
    assert s.decomposition[1].doc_id == ""  # no supporting paragraph given


# ------------------------------------------------------------------ Bamboogle, FlashRAG, corpora
def test_bamboogle_without_corpus_has_questions_only():
    ds = load_bamboogle(BAMBOOGLE)
    assert ds.mode == "none" and ds.passages == []
    assert ds.samples[0].answers == ("Tolva River", "the Tolva")
    assert ds.samples[0].kind == "compositional" and ds.samples[0].hops == 2
    assert ds.documents == {}


def test_bamboogle_with_corpus():
    ds = load_bamboogle(BAMBOOGLE, corpus=CORPUS)
    assert ds.mode == "corpus" and len(ds.passages) == 22
    assert load_flashrag_qa(BAMBOOGLE).samples == load_qa(BAMBOOGLE).samples


def test_flashrag_corpus_titles_are_unquoted():
    ps = load_corpus(CORPUS)
    assert ps[0] == Passage("0", "Brenna Observatory", ps[0].text)
    assert ps[2].title == "Kaldor"  # unquoted single word
    assert ps[14].title == 'The "Grey" Harbour'  # doubled quotes unescaped
    assert ps[20].title == ps[21].title == "Absalon"
    assert parse_contents('"A"\nline one\nline two') == ("A", "line one\nline two")
    assert parse_contents("no newline") == ("no newline", "")


def test_title_text_corpus_layout():
    ps = load_corpus(CORPUS_TT)
    assert ps[0] == Passage("doc0", "Brenna Observatory", ps[0].text)
    assert [p.doc_id for p in iter_corpus(CORPUS_TT, limit=2)] == ["doc0", "doc1"]


def test_detect_format_of_every_fixture():
    assert detect_format(HOTPOT_ARRAY) == "hotpotqa"
    assert detect_format(HOTPOT_JSONL) == "hotpotqa"
    assert detect_format(MUSIQUE) == "musique"
    assert detect_format(BAMBOOGLE) == "flashrag"
    assert detect_format(CORPUS) == "corpus"
    assert detect_format(CORPUS_TT) == "corpus"
    assert load_qa(WIKI2).name == "2wiki"
    with pytest.raises(ValueError, match="is a corpus"):
        load_qa(CORPUS)


def test_pooled_corpus_matches_open_mode():
    assert load_pooled_corpus(MUSIQUE) == load_musique(MUSIQUE, mode="open").passages
    assert load_pooled_corpus(CORPUS, limit=3) == load_corpus(CORPUS)[:3]


# --------------------------------------------------------------------------- reading & errors
def test_json_array_is_decoded_incrementally_with_line_numbers():
    recs = list(iter_records(HOTPOT_ARRAY))
    assert [r["_id"] for _, r in recs] == [Q1, "5a7a06935542990198eaf050", "5ae61bfd5542992663a4f261"]
    lines = HOTPOT_ARRAY.read_text().splitlines()
    for line, rec in recs:
        assert lines[line - 1].strip() == "{"
        assert rec["_id"] in lines[line]
    # Tiny chunks force the decoder to refill its buffer mid-record.
    with open(HOTPOT_ARRAY, encoding="utf-8") as f:
        small = list(_iter_json_array(f, "x", chunk=7))
    assert small == recs


@pytest.mark.parametrize("text", ['[{"a": 1}, {"a": 2}', '[{"a": 1} {"a": 2}]', '[{"a": 1}, {"a": ]'])
def test_broken_json_array_names_the_file(tmp_path, text):
    f = tmp_path / "broken.json"
    f.write_text(text)
    with pytest.raises(DatasetFormatError, match="broken.json"):
        list(iter_records(f))


def _bad_hotpot(tmp_path: Path) -> Path:
    good = HOTPOT_JSONL.read_text().splitlines()
    no_question = json.loads(good[1])
    del no_question["question"]
    bad_ctx = json.loads(good[2])
    bad_ctx["context"][1] = "just a string"
    f = tmp_path / "bad.jsonl"
    f.write_text("\n".join([good[0], "{not json", json.dumps(no_question), json.dumps(bad_ctx)]) + "\n")
    return f


def test_malformed_record_error_names_file_line_and_field(tmp_path):
    f = _bad_hotpot(tmp_path)
    with pytest.raises(DatasetFormatError) as err:
        load_hotpotqa(f)
    assert err.value.line == 2 and err.value.field == "<json>"
    assert str(f) in str(err.value) and "line 2" in str(err.value)
    lines = f.read_text().splitlines()
    f.write_text("\n".join([lines[0], lines[2]]) + "\n")
    with pytest.raises(DatasetFormatError) as err:
        load_hotpotqa(f)
    assert (err.value.line, err.value.field) == (2, "question")


def test_lenient_loading_skips_and_counts(tmp_path):
    f = _bad_hotpot(tmp_path)
    with pytest.warns(UserWarning, match="skipped 3 malformed"):
        ds = load_hotpotqa(f, lenient=True)
    assert len(ds) == 1 and ds.skipped == 3
    assert any("context[1]" in e for e in ds.errors)
    assert any("'question'" in e for e in ds.errors)


def test_bad_field_types_and_duplicates(tmp_path):
    f = tmp_path / "q.jsonl"
    f.write_text('{"id": "a", "question": "Q?", "golden_answers": [3, null]}\n')
    with pytest.raises(DatasetFormatError, match=r"golden_answers\[1\]"):
        load_flashrag_qa(f)
    f.write_text('{"id": "a", "question": "Q?", "golden_answers": []}\n')
    with pytest.raises(DatasetFormatError, match="no answer"):
        load_flashrag_qa(f)
    row = '{"id": "a", "question": "Q?", "golden_answers": ["x"]}\n'
    f.write_text(row * 2)
    with pytest.raises(DatasetFormatError, match="duplicate question id"):
        load_flashrag_qa(f)
    with pytest.warns(UserWarning):
        assert len(load_flashrag_qa(f, lenient=True)) == 1
    c = tmp_path / "c.jsonl"
    c.write_text('{"id": "1", "contents": "A\\nx"}\n{"id": "1", "contents": "B\\ny"}\n')
    with pytest.raises(DatasetFormatError, match="duplicate passage id"):
        load_corpus(c)
    c.write_text('{"contents": "A\\nx"}\n')
    with pytest.raises(DatasetFormatError, match="'id'"):
        load_corpus(c)


def test_empty_and_missing_files(tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_text("\n\n")
    with pytest.raises(DatasetFormatError, match="no questions"):
        load_musique(f)
    with pytest.raises(FileNotFoundError, match="no such file"):
        load_musique(tmp_path / "nope.jsonl")


# -------------------------------------------------------------------------------- hub names
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")


@pytest.fixture
def online_hub(monkeypatch):
    """A reachable 'hub': the offline variables unset and HF_ENDPOINT on a listening socket."""
    for var in _OFFLINE_VARS:
        monkeypatch.delenv(var, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        yield


def _fake_datasets(monkeypatch, load):
    mod = types.ModuleType("datasets")
    mod.load_dataset = load  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "datasets", mod)


def test_hub_name_offline_says_what_to_do(monkeypatch, online_hub):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'hotpotqa/hotpot_qa' on the Hub")

    _fake_datasets(monkeypatch, offline)
    with pytest.raises(DatasetUnavailableError) as err:
        load_hotpotqa("hotpotqa/hotpot_qa")
    msg = str(err.value)
    assert "hotpot_dev_distractor_v1.json" in msg and "path=" in msg
    assert "ConnectionError" in msg


def test_hub_name_without_datasets_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(DatasetUnavailableError, match=r"hopgym\[hub\]"):
        load_musique("someone/musique")


def test_hub_rows_in_column_layout_are_read(monkeypatch, online_hub):
    calls = []

    def load(name, config, split):
        calls.append((name, config, split))
        return [
            {
                "id": "h1",
                "question": "Where is Kaldor?",
                "answer": "Vandria",
                "type": "bridge",
                "level": "easy",
                "supporting_facts": {"title": ["Kaldor"], "sent_id": [0]},
                "context": {
                    "title": ["Kaldor", "Halden"],
                    "sentences": [["Kaldor is in Vandria."], ["Halden is a city."]],
                },
            }
        ]

    _fake_datasets(monkeypatch, load)
    ds = load_hotpotqa("hotpotqa/hotpot_qa")
    assert calls == [("hotpotqa/hotpot_qa", "distractor", "validation")]
    assert ds.samples[0].supporting_ids == ("h1:Kaldor",)
    assert len(ds.by_sample["h1"]) == 2


# ------------------------------------------------------------------------- per-sample indexes
def test_per_sample_index_searches_only_the_question_and_caches():
    ds = load_hotpotqa(HOTPOT_ARRAY)
    factory = PerSampleIndex(ds.by_sample, maxsize=2)
    s1, s2, s3 = ds.samples
    r1 = factory(s1)
    assert factory(s1) is r1
    hits = r1.search("Kaldor Tolva River", 10)
    assert hits and all(p.doc_id.startswith(f"{s1.id}:") for p in hits)
    factory(s2)
    factory(s3)  # evicts s1 (least recently used)
    assert factory(s1) is not r1
    clone = pickle.loads(pickle.dumps(factory))
    assert [p.doc_id for p in clone(s2).search("Marlow", 2)] == [
        p.doc_id for p in factory(s2).search("Marlow", 2)
    ]
    with pytest.raises(KeyError, match="no paragraphs"):
        factory(QASample("unknown", "?", ("x",)))


# ------------------------------------------------------------------- offline / unreachable hub
def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _recording_datasets(monkeypatch, offline_mode: bool | None = None):
    """A stand-in ``datasets`` whose load_dataset records its calls (and would hang for 23 s)."""
    calls = []

    def load(*args, **kwargs):
        calls.append(args)
        raise ConnectionError("Couldn't reach the Hub")

    _fake_datasets(monkeypatch, load)
    if offline_mode is not None:
        sys.modules["datasets"].config = types.SimpleNamespace(HF_HUB_OFFLINE=offline_mode)
    return calls


@pytest.mark.parametrize("var", _OFFLINE_VARS)
def test_offline_variable_fails_at_once_without_touching_the_hub(monkeypatch, var):
    for v in _OFFLINE_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(var, "1")
    calls = _recording_datasets(monkeypatch)  # imported "before" the variable: not offline
    with pytest.raises(DatasetUnavailableError) as err:
        load_hotpotqa()
    assert calls == []
    msg = str(err.value)
    assert f"{var}=1" in msg and "hotpot_dev_distractor_v1.json" in msg and "path=" in msg


def test_datasets_in_offline_mode_is_asked_for_its_cached_copy(monkeypatch, tmp_path):
    for v in _OFFLINE_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    calls = _recording_datasets(monkeypatch, offline_mode=True)
    with pytest.raises(DatasetUnavailableError, match=r"HF_HUB_OFFLINE=1 \(cache only\)"):
        load_musique("someone/musique")
    assert len(calls) == 1
    rows = [json.loads(line) for line in MUSIQUE.read_text().splitlines()]
    sys.modules["datasets"].load_dataset = lambda *a, **k: rows
    assert len(load_musique("someone/musique")) == len(load_musique(MUSIQUE))


def test_hub_offline_variable_overridden_by_datasets_variable(monkeypatch):
    # datasets' rule: HF_DATASETS_OFFLINE=0 wins over HF_HUB_OFFLINE=1, so the hub is probed.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    calls = _recording_datasets(monkeypatch)
    with pytest.raises(DatasetUnavailableError, match="unreachable"):
        load_hotpotqa()
    assert calls == []


def test_unreachable_hub_fails_at_once_with_what_to_download(monkeypatch):
    for v in _OFFLINE_VARS:
        monkeypatch.delenv(v, raising=False)
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    calls = _recording_datasets(monkeypatch)
    t0 = time.monotonic()
    with pytest.raises(DatasetUnavailableError) as err:
        load_2wiki("someone/2wiki")
    assert time.monotonic() - t0 < 5  # datasets' own retries take ~23 s
    assert calls == []
    msg = str(err.value)
    assert endpoint in msg and "unreachable" in msg and "2WikiMultihopQA" in msg
    assert "HF_HUB_OFFLINE=1" in msg  # how to use a cached copy


def test_real_datasets_offline_and_unreachable_fail_fast(monkeypatch):
    """The `datasets` library itself: offline it answers from its (empty) cache at once; with the
    variables unset and the hub unreachable, gym.make fails before calling it."""
    datasets = pytest.importorskip("datasets")
    import gymnasium as gym

    t0 = time.monotonic()
    with pytest.raises(DatasetUnavailableError, match="path="):
        load_hotpotqa("hopgym-tests/not-in-any-cache")
    assert time.monotonic() - t0 < 5
    assert datasets.config.HF_HUB_OFFLINE  # tests/conftest.py sets the variables before import
    for v in _OFFLINE_VARS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    t0 = time.monotonic()
    with pytest.raises(DatasetUnavailableError, match="unreachable.*pass path="):
        gym.make("hopgym/HotpotQA-v1")
    assert time.monotonic() - t0 < 5


def test_reachability_goes_through_the_https_proxy(monkeypatch):
    for v in ("no_proxy", "NO_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.delenv(v, raising=False)
    assert unreachable_reason(f"http://127.0.0.1:{_closed_port()}") is not None
    assert "no host" in unreachable_reason("not a url")
    with socket.socket() as proxy:
        proxy.bind(("127.0.0.1", 0))
        proxy.listen()
        monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{proxy.getsockname()[1]}")
        # .invalid never resolves: only the proxy is contacted.
        assert unreachable_reason("https://hub.invalid") is None
    assert offline_reason({}) is None
    assert offline_reason({"TRANSFORMERS_OFFLINE": "yes"}) == "TRANSFORMERS_OFFLINE=yes"


# ------------------------------------------------------- every file error names the file and line
def _raises_at(path: Path, line: int, *what: str, load=None) -> DatasetFormatError:
    with pytest.raises(DatasetFormatError) as err:
        (load or load_hotpotqa)(path)
    msg = str(err.value)
    assert err.value.path == str(path) and str(path) in msg
    assert err.value.line == line and f"line {line}" in msg, msg
    for w in what:
        assert w in msg, msg
    return err.value


def test_binary_file_names_the_file_and_line(tmp_path):
    f = tmp_path / "model.jsonl"
    f.write_bytes(b"\x80\x04\x95\x1f\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01a\x94K\x01u.\n")
    _raises_at(f, 1, "not UTF-8", "byte 0x80", "binary")
    _raises_at(f, 1, "not UTF-8", load=detect_format)
    _raises_at(f, 1, "not UTF-8", load=load_corpus)


def test_bad_utf8_in_json_lines_and_in_an_array(tmp_path):
    good = HOTPOT_JSONL.read_text().splitlines()
    f = tmp_path / "latin1.jsonl"
    f.write_bytes("\n".join([good[0], good[1]]).encode() + "\nCafé\n".encode("latin-1"))
    _raises_at(f, 3, "not UTF-8", "byte 0xe9", "column 4")
    with pytest.warns(UserWarning, match="skipped 1"):
        assert len(load_hotpotqa(f, lenient=True)) == 2
    arr = tmp_path / "latin1.json"
    arr.write_bytes(b'[\n{"id": "a",\n "question": "Caf\xe9?"}\n]\n')
    _raises_at(arr, 3, "not UTF-8", "byte 0xe9", load=iter_records_list)
    # A multi-byte character cut by the end of the file.
    cut = tmp_path / "cut.json"
    cut.write_bytes('[{"question": "Kö'.encode()[:-1])
    _raises_at(cut, 1, "not UTF-8", "truncated character", load=iter_records_list)


def iter_records_list(path):
    return list(iter_records(path))


def test_truncated_json_names_the_line(tmp_path):
    text = HOTPOT_ARRAY.read_text()
    f = tmp_path / "cut.json"
    f.write_text(text[: len(text) // 2])
    err = _raises_at(f, text[: len(text) // 2].count("\n") + 1, "truncated", load=iter_records_list)
    assert err.field in ("<file>", "<json>")
    lines = HOTPOT_JSONL.read_text().splitlines()
    g = tmp_path / "cut.jsonl"
    g.write_text(lines[0] + "\n" + lines[1][:200])
    _raises_at(g, 2, "invalid JSON")


def test_wrong_top_level_type_names_the_line(tmp_path):
    obj = tmp_path / "squad.json"
    obj.write_text(json.dumps({"version": "1.1", "data": [{"question": "Q?"}]}, indent=2))
    _raises_at(obj, 1, "one JSON object")
    one_line = tmp_path / "one.json"
    one_line.write_text(json.dumps({"version": "1.1", "data": []}))
    _raises_at(one_line, 1, "_id", "missing")
    lists = tmp_path / "lists.json"
    lists.write_text('[\n  ["a", "b"],\n  ["c"]\n]\n')
    _raises_at(lists, 2, "expected a JSON object, got list")
    _raises_at(lists, 2, "expected a JSON object, got list", load=detect_format)
    scalar = tmp_path / "n.jsonl"
    scalar.write_text("42\n")
    _raises_at(scalar, 1, "expected a JSON object, got int", load=load_corpus)


def test_gzip_files_are_read_whatever_their_name(tmp_path):
    f = tmp_path / "hotpot_dev.json"  # gzip data under a .json name
    f.write_bytes(gzip.compress(HOTPOT_ARRAY.read_bytes()))
    assert load_hotpotqa(f).samples == load_hotpotqa(HOTPOT_ARRAY).samples
    c = tmp_path / "wiki.jsonl.gz"
    c.write_bytes(gzip.compress(CORPUS.read_bytes()))
    assert load_corpus(c) == load_corpus(CORPUS)
    assert detect_format(c) == "corpus"
    data = gzip.compress(HOTPOT_JSONL.read_bytes())
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetFormatError, match="corrupt or truncated gzip") as err:
        load_hotpotqa(cut)
    assert err.value.path == str(cut) and err.value.line >= 1


@pytest.mark.parametrize(
    "head, what",
    [
        (b"PAR1\x15\x04\x15", "Parquet"),
        (b"PK\x03\x04\x14\x00", "zip archive"),
        (b"\xff\xff\xff\xff\xb8\x00", "Arrow stream"),
        ("[]".encode("utf-16"), "UTF-16"),
        (b"BZh91AY&SY", "bzip2"),
    ],
)
def test_known_binary_formats_are_named(tmp_path, head, what):
    f = tmp_path / "data.json"
    f.write_bytes(head + b"\x00" * 64)
    _raises_at(f, 1, what)


def test_directory_and_nul_bytes(tmp_path):
    with pytest.raises(DatasetFormatError, match="is a directory") as err:
        load_hotpotqa(tmp_path)
    assert err.value.path == str(tmp_path)
    f = tmp_path / "nul.jsonl"
    f.write_bytes(b'{"id": "a", "question": "Q?", "golden_answers": ["x"]}\n\x00\x00\x01\x02\n')
    _raises_at(f, 2, "NUL bytes", load=load_flashrag_qa)


def test_duplicates_name_their_line(tmp_path):
    row = '{"id": "a", "question": "Q?", "golden_answers": ["x"]}\n'
    f = tmp_path / "q.jsonl"
    f.write_text(row + "\n" + row)
    _raises_at(f, 3, "duplicate question id 'a'", "first on line 1", load=load_flashrag_qa)
    c = tmp_path / "c.jsonl"
    c.write_text('{"id": "1", "contents": "A\\nx"}\n{"id": "1", "contents": "B\\ny"}\n')
    _raises_at(c, 2, "duplicate passage id '1'", load=load_corpus)


def test_bom_crlf_and_blank_lines(tmp_path):
    arr = tmp_path / "a.json"
    arr.write_bytes(b'\xef\xbb\xbf\r\n [\r\n{"x": 1},\r\n{"x": "\xc3\xa9"}]\r\n')
    assert list(iter_records(arr)) == [(3, {"x": 1}), (4, {"x": "\u00e9"})]
    lines = tmp_path / "b.jsonl"
    lines.write_bytes(b'\xef\xbb\xbf{"x": 1}\r\n \r\n{"x": 2}\r\n')
    assert list(iter_records(lines)) == [(1, {"x": 1}), (3, {"x": 2})]


def test_array_decoding_across_small_chunks_keeps_characters_and_lines(tmp_path):
    from hopgym.corpora.datasets.records import _Utf8Text

    recs = [{"q": f"Köln–Zürich {i} 🚲"} for i in range(40)]
    f = tmp_path / "u.json"
    f.write_text("[\n" + ",\n".join(json.dumps(r, ensure_ascii=False) for r in recs) + "\n]")
    with open(f, "rb") as raw:
        got = list(_iter_json_array(_Utf8Text(raw, str(f)), str(f), chunk=5))
    assert got == [(i + 2, r) for i, r in enumerate(recs)]
    data = f.read_bytes()
    bad = data.index(b"Z\xc3\xbcrich 30")  # record 30 is on line 32
    f.write_bytes(data[: bad + 1] + b"\xfc" + data[bad + 3 :])
    with open(f, "rb") as raw, pytest.raises(DatasetFormatError, match="line 32: not UTF-8"):
        list(_iter_json_array(_Utf8Text(raw, str(f)), str(f), chunk=5))
