from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from hopgym.corpora.datasets import load_corpus
from hopgym.corpora.types import Passage
from hopgym.retrieval.base import Retriever, SearchHit
from hopgym.retrieval.hybrid import HybridRetriever, scored_search, scored_search_batch
from hopgym.retrieval.sparse import BM25Retriever

CORPUS = load_corpus(Path(__file__).resolve().parents[1] / "fixtures" / "wiki_corpus.jsonl")
DOCS = {c: Passage(c, c.upper(), f"text {c}") for c in "abcdef"}


class Fixed:
    """A retriever that returns a fixed ranking whatever the query."""

    def __init__(self, order: str) -> None:
        self.order = order
        self.calls = 0
        self.passages = list(DOCS.values())

    def search(self, query: str, k: int) -> list[Passage]:
        return [DOCS[c] for c in self.order[:k]]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls += 1
        return [self.search(q, k) for q in queries]


def ids(ps: Sequence[Passage]) -> str:
    return "".join(p.doc_id for p in ps)


def test_rrf_scores_and_order():
    h = HybridRetriever([Fixed("abc"), Fixed("cba")], rrf_k=0.0)
    hits = h.search_scored("q", 3)
    # b: 1/2 + 1/2 = 1.0 ; a and c: 1/1 + 1/3. a and c tie on score and best rank: the first
    # retriever's rank decides.
    assert [h.passage.doc_id for h in hits] == ["a", "c", "b"]
    assert hits[0].score == pytest.approx(1 + 1 / 3)
    assert hits[2].score == pytest.approx(1.0)


def test_rrf_with_the_usual_constant():
    h = HybridRetriever([Fixed("abcd"), Fixed("dbca")])
    s = {x.passage.doc_id: x.score for x in h.search_scored("q", 4)}
    assert s["b"] == pytest.approx(2 / 62)
    assert s["a"] == pytest.approx(1 / 61 + 1 / 64)
    # a and d tie (ranks 1 and 4 each): a is ranked higher by the first retriever.
    assert ids(h.search("q", 4)) == "badc"


def test_ties_are_deterministic_by_doc_id():
    # e and f each appear once at rank 1 of a retriever with equal weight: same score, same best
    # rank, neither in the first list: doc id decides, whatever the order of retrievers after it.
    h1 = HybridRetriever([Fixed(""), Fixed("f"), Fixed("e")])
    h2 = HybridRetriever([Fixed(""), Fixed("e"), Fixed("f")])
    assert ids(h1.search("q", 2)) == ids(h2.search("q", 2)) == "ef"


def test_weights_and_depth():
    h = HybridRetriever([Fixed("abc"), Fixed("cba")], weights=[3.0, 1.0], rrf_k=0.0)
    assert ids(h.search("q", 1)) == "a"
    h = HybridRetriever([Fixed("abcdef"), Fixed("fedcba")], depth=1)
    # k raises the depth to at least k.
    assert len(h.search("q", 4)) == 4


def test_repeated_passage_in_one_list_counts_once():
    h = HybridRetriever([Fixed("aab"), Fixed("b")], rrf_k=0.0)
    s = {x.passage.doc_id: x.score for x in h.search_scored("q", 2)}
    assert s["a"] == pytest.approx(1.0) and s["b"] == pytest.approx(1 / 2 + 1)


def test_each_retriever_is_called_once_per_batch():
    a, b = Fixed("abc"), Fixed("cab")
    h = HybridRetriever([a, b])
    out = h.search_batch(["q1", "q2", "q3"], 2)
    assert len(out) == 3 and a.calls == 1 and b.calls == 1
    assert h.search_batch([], 2) == [] and h.search("q", 0) == []


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least two"):
        HybridRetriever([Fixed("a")])
    with pytest.raises(ValueError, match="weights"):
        HybridRetriever([Fixed("a"), Fixed("b")], weights=[1.0])
    with pytest.raises(ValueError, match="rrf_k"):
        HybridRetriever([Fixed("a"), Fixed("b")], rrf_k=-1)


def test_scored_search_falls_back_to_rank_scores():
    hits = scored_search(Fixed("ab"), "q", 2)
    assert hits == [SearchHit(DOCS["a"], 1.0), SearchHit(DOCS["b"], 0.5)]
    bm = BM25Retriever(CORPUS)
    assert scored_search_batch(bm, ["Kaldor"], 2) == [bm.search_scored("Kaldor", 2)]


def test_bm25_plus_dense_hybrid_on_a_corpus():
    pytest.importorskip("faiss")
    from hopgym.retrieval.dense import DenseRetriever, HashingEmbedder

    bm = BM25Retriever(CORPUS)
    h = HybridRetriever([bm, DenseRetriever(CORPUS, embedder=HashingEmbedder(128))])
    assert isinstance(h, Retriever) and h.passages == CORPUS and len(h) == len(CORPUS)
    assert h.search("Corvin Institute mineralogy", 1)[0].title == "Corvin Institute"
    qs = ["Tolva River Kaldor", "music school Halden"]
    assert h.search_batch(qs, 3) == [h.search(q, 3) for q in qs]
