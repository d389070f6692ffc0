from __future__ import annotations

import numpy as np
import pytest

from hopgym.corpora.types import Passage
from hopgym.retrieval.base import Retriever, tokenize
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.retrieval.sparse_topk import top_k_indices
from hopgym.tasks.tiny import TINY_PASSAGES

ENGINES = ["bm25s", "rank_bm25"]


@pytest.mark.parametrize("engine", ENGINES)
def test_finds_the_document_about_the_query(engine):
    r = BM25Retriever(TINY_PASSAGES, engine=engine)
    assert isinstance(r, Retriever)
    assert r.search("Maren Oskdal engineer born", 1)[0].doc_id == "t03"
    assert r.search("Night at Harrow Pier", 2)[0].doc_id == "t12"


@pytest.mark.parametrize("engine", ENGINES)
def test_no_match_and_stopwords_return_nothing(engine):
    r = BM25Retriever(TINY_PASSAGES, engine=engine)
    assert r.search("zzzz qqqq", 3) == []
    assert r.search("the of and", 3) == []
    assert r.search("", 3) == []
    assert r.search("Qelvor", 0) == []


@pytest.mark.parametrize("engine", ENGINES)
def test_ties_break_by_corpus_position(engine):
    # Six identical documents tie; the others keep the term's idf positive for BM25Okapi.
    docs = [Passage(f"d{i}", "same", "alpha beta") for i in range(6)]
    docs += [Passage(f"x{i}", "other", f"gamma delta {i}") for i in range(12)]
    r = BM25Retriever(docs, engine=engine)
    assert [p.doc_id for p in r.search("alpha", 4)] == ["d0", "d1", "d2", "d3"]


def test_engines_agree_on_the_top_document():
    a, b = BM25Retriever(TINY_PASSAGES), BM25Retriever(TINY_PASSAGES, engine="rank_bm25")
    for q in [
        "Qelvor Dynamics founder",
        "Sefa Quill father",
        "capital of Brenmark",
        "Glass Orchard directed",
        "Ilvane University",
    ]:
        assert a.search(q, 1)[0].doc_id == b.search(q, 1)[0].doc_id, q


def test_batch_equals_single():
    r = BM25Retriever(TINY_PASSAGES)
    qs = ["Qelvor", "Sefa Quill", "nothing here zz"]
    assert r.search_batch(qs, 2) == [r.search(q, 2) for q in qs]


def test_top_k_indices_is_exact_with_ties():
    rng = np.random.default_rng(0)
    for _ in range(200):
        s = rng.integers(0, 4, size=30).astype(float)
        k = int(rng.integers(1, 35))
        expected = [i for i in sorted(range(30), key=lambda i: (-s[i], i)) if s[i] > 0][:k]
        assert top_k_indices(s, k).tolist() == expected
    for _ in range(50):  # large arrays with many ties
        s = np.where(rng.random(5000) < 0.6, rng.integers(1, 50, 5000) / 7.0, 0.0)
        k = int(rng.integers(1, 20))
        expected = [i for i in sorted(range(5000), key=lambda i: (-s[i], i)) if s[i] > 0][:k]
        assert top_k_indices(s, k).tolist() == expected


@pytest.mark.parametrize("kw, msg", [({"engine": "lucene"}, "engine"), ({"backend": "cuda"}, "backend")])
def test_bad_arguments(kw, msg):
    with pytest.raises(ValueError, match=msg):
        BM25Retriever(TINY_PASSAGES, **kw)
    with pytest.raises(ValueError, match="empty"):
        BM25Retriever([])


def test_tokenize_drops_stopwords_and_case():
    assert tokenize("The Capital OF Osterra, 1962!") == ["capital", "osterra", "1962"]


@pytest.mark.parametrize("engine", ENGINES)
def test_passages_without_words_are_indexed_but_never_found(engine):
    docs = [Passage("a", "b", "c d"), Passage("e", "?", "!")]
    r = BM25Retriever(docs, engine=engine)
    assert r.search("c d b", 2) == [] and len(r) == 2
