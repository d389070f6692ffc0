"""Retrievers owned by corpora: RetrieverSpec, make_retriever and the registry of kinds."""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import pytest

import hopgym  # noqa: F401
from hopgym.corpora.datasets import load_corpus
from hopgym.corpora.types import Passage
from hopgym.envs.datasets import clear_task_cache
from hopgym.retrieval.base import tokenize
from hopgym.retrieval.http import HTTPRetriever
from hopgym.retrieval.index_store import RETRIEVER_KINDS, build_index, build_retriever
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.retrieval.specs import (
    RetrieverBuilder,
    RetrieverSpec,
    make_retriever,
    persistable_kinds,
    register_retriever,
    retriever_kinds,
    unregister_retriever,
)
from hopgym.turns import Search

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = load_corpus(FIX / "wiki_corpus.jsonl")
MUSIQUE = str(FIX / "musique_dev.jsonl")


# --------------------------------------------------------------------------------- the spec
@pytest.mark.parametrize(
    "value,expected",
    [
        (None, RetrieverSpec()),
        ("bm25", RetrieverSpec(kind="bm25")),
        ("dense", RetrieverSpec(kind="dense")),
        ("hybrid", RetrieverSpec(kind="hybrid")),
        ("http://127.0.0.1:8000", RetrieverSpec(kind="http", urls=("http://127.0.0.1:8000",))),
        (
            "https://search.example/retrieve",
            RetrieverSpec(kind="http", urls=("https://search.example/retrieve",)),
        ),
        (["http://a:1", "http://b:2"], RetrieverSpec(kind="http", urls=("http://a:1", "http://b:2"))),
        (
            {"url": "http://a:1", "timeout": 30, "retries": 5, "backoff": 0.5},
            RetrieverSpec(kind="http", urls=("http://a:1",), timeout=30, retries=5, backoff=0.5),
        ),
        (
            {"kind": "dense", "model": "hashing-64", "index_type": "hnsw"},
            RetrieverSpec(kind="dense", model="hashing-64", index_type="hnsw"),
        ),
        ({"urls": ["http://a:1"]}, RetrieverSpec(kind="http", urls=("http://a:1",))),
    ],
)
def test_coerce_takes_what_users_pass(value, expected):
    spec = RetrieverSpec.coerce(value)
    assert spec == expected
    assert RetrieverSpec.coerce(spec) is spec
    assert hash(spec) == hash(expected)  # a cache key
    assert pickle.loads(pickle.dumps(spec)) == spec


@pytest.mark.parametrize(
    "value,error,match",
    [
        ("bm52", ValueError, "retriever must be one of .* got 'bm52' \\(did you mean 'bm25'\\?\\)"),
        ("tfidf", ValueError, "retriever must be one of"),
        (5, TypeError, "retriever must be a kind name, a URL"),
        ({"kind": "dense", "modle": "x"}, TypeError, "did you mean 'model'"),
        ({"kind": "bm25", "url": "http://a:1"}, ValueError, "urls are for a retrieval server"),
        ({"kind": "http"}, ValueError, "needs urls="),
        ({"url": "ftp://a"}, ValueError, "urls must be http:// or https:// URLs"),
        ({"url": "http://a:1", "urls": ["http://b:1"]}, ValueError, "url or urls"),
        ({"engine": "lucene"}, ValueError, "engine must be one of"),
        ({"engine": "rank_bm25", "backend": "numba"}, ValueError, "bm25s backend"),
        ({"index_type": "lsh"}, ValueError, "index_type must be one of"),
        ({"batch_size": True}, ValueError, "batch_size must be an int >= 1, got True"),
        ({"threads": 0}, ValueError, "threads must be None or an int >= 1"),
        ({"url": "http://a:1", "timeout": 0}, ValueError, "timeout must be None or a number"),
        ({"url": "http://a:1", "retries": -1}, ValueError, "retries must be None or an int >= 0"),
        ({"url": "http://a:1", "backoff": -0.1}, ValueError, "backoff must be None"),
        ({"rrf_k": -1}, ValueError, "rrf_k must be a number >= 0"),
        ({"model": ""}, ValueError, "model must be"),
        ({"device": "gpu"}, ValueError, r"device must be .* got 'gpu' \(did you mean 'cuda'\?\)"),
        ({"device": None}, ValueError, "device must be 'cpu', 'cuda', 'cuda:N' or 'auto'"),
        ({"index_backend": "tf"}, ValueError, "index_backend must be one of"),
        ({"index_backend": "torch", "index_type": "ivf"}, ValueError, "must be 'flat', got 'ivf'"),
    ],
)
def test_bad_specs_name_the_field(value, error, match):
    with pytest.raises(error, match=match):
        RetrieverSpec.coerce(value)


def test_every_setting_has_one_default_and_help():
    import dataclasses

    for f in dataclasses.fields(RetrieverSpec):
        assert f.metadata["help"], f.name
        assert f.default is not dataclasses.MISSING, f.name


def test_shorthands_merge_and_conflicts_are_errors():
    spec = RetrieverSpec.coerce("dense").updated(model="hashing-64", engine=None)
    assert spec == RetrieverSpec(kind="dense", model="hashing-64")
    assert spec.updated(model="hashing-64") == spec  # the same value twice is fine
    with pytest.raises(ValueError, match="model is given twice"):
        spec.updated(model="hashing-32")


# ------------------------------------------------------------------------------- building
def test_make_retriever_builds_each_kind():
    bm25 = make_retriever("bm25", CORPUS)
    assert isinstance(bm25, BM25Retriever)
    assert bm25.search("Corvin Institute", 1) == BM25Retriever(CORPUS).search("Corvin Institute", 1)
    assert make_retriever({"kind": "bm25", "engine": "rank_bm25"}, CORPUS).engine == "rank_bm25"
    http = make_retriever({"url": "http://127.0.0.1:9", "timeout": 0.5, "retries": 0, "backoff": 0.0})
    assert isinstance(http, HTTPRetriever)
    assert (http.endpoint, http.timeout, http.retries, http.backoff) == (
        "http://127.0.0.1:9/retrieve",
        0.5,
        0,
        0.0,
    )
    default = HTTPRetriever("http://127.0.0.1:9")  # unset settings keep the client's defaults
    assert make_retriever("http://127.0.0.1:9").timeout == default.timeout


def test_make_retriever_checks_passages_against_the_kind():
    with pytest.raises(ValueError, match="pass passages="):
        make_retriever("bm25")
    with pytest.raises(ValueError, match="takes no passages"):
        make_retriever("http://127.0.0.1:9", CORPUS)


def test_dense_and_hybrid_share_one_embedder_per_builder():
    pytest.importorskip("faiss")
    build = RetrieverBuilder({"kind": "hybrid", "model": "hashing-64"})
    a, b = build(CORPUS[:5]), build(CORPUS[5:])
    assert a.retrievers[1].embedder is b.retrievers[1].embedder  # loaded once
    assert a.rrf_k == 60.0 and [p.doc_id for p in b.search("Corvin Institute", 1)] == ["7"]
    clone = pickle.loads(pickle.dumps(build))
    assert clone.spec == build.spec and clone._cache == {}  # the model is not pickled
    assert [p.doc_id for p in clone(CORPUS).search("Corvin Institute", 1)] == ["7"]


def test_index_store_uses_the_registry():
    assert RETRIEVER_KINDS == persistable_kinds() == ("bm25", "dense", "hybrid")
    assert set(RETRIEVER_KINDS) < set(retriever_kinds())
    r = build_retriever(CORPUS, "bm25", model="default", engine="bm25s")  # the old keywords
    assert isinstance(r, BM25Retriever)


def test_build_index_takes_a_spec(tmp_path):
    m = build_index(CORPUS, tmp_path / "a", retriever=RetrieverSpec(kind="bm25"))
    assert m.retriever == "bm25" and m.num_passages == len(CORPUS)
    with pytest.raises(ValueError, match="to be saved"):
        build_index(CORPUS, tmp_path / "b", retriever="http://127.0.0.1:9")
    assert not (tmp_path / "b").exists()


# --------------------------------------------------------------------- a new kind, one line
class TermOverlapRetriever:
    """Ranks passages by how many distinct query words they contain (ties: corpus order)."""

    def __init__(self, passages: Sequence[Passage]) -> None:
        self.passages = list(passages)
        self._words = [set(tokenize(p.contents)) for p in self.passages]

    def search(self, query: str, k: int) -> list[Passage]:
        q = set(tokenize(query))
        scored = [(len(q & w), -i) for i, w in enumerate(self._words)]
        best = sorted((s for s in scored if s[0] > 0), reverse=True)[:k]
        return [self.passages[-i] for _, i in best]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [self.search(q, k) for q in queries]


def build_overlap(spec, passages, cache):
    return TermOverlapRetriever(passages)


@pytest.fixture
def overlap_kind():
    register_retriever("overlap", build_overlap)
    clear_task_cache()
    yield "overlap"
    unregister_retriever("overlap")
    clear_task_cache()


def test_a_registered_kind_works_everywhere(overlap_kind):
    r = make_retriever(overlap_kind, CORPUS)
    assert isinstance(r, TermOverlapRetriever)
    assert r.search("Corvin Institute mineralogy", 1)[0].doc_id == "7"
    # Open mode: one index over the file's pooled paragraphs.
    env = gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, mode="open", retriever=overlap_kind, reward=None)
    assert isinstance(env.unwrapped.task.sources["local"].retriever, TermOverlapRetriever)
    env.reset(seed=0, options={"question_id": "3hop1__9285_5188_23307"})
    info = env.step(Search("Corvin Institute founded"))[4]
    assert info["documents"][0].title == "Corvin Institute"
    # Distractor mode: one small index per question, through the picklable builder.
    env = gym.make("hopgym/MuSiQue-v1", path=MUSIQUE, retriever={"kind": overlap_kind}, reward=None)
    env.reset(seed=0, options={"question_id": "3hop1__9285_5188_23307"})
    info = env.step(Search("Corvin Institute founded"))[4]
    assert info["documents"][0].title == "Corvin Institute"
    assert all(d.startswith("3hop1__9285_5188_23307:") for d in info["retrieved_ids"])
    assert isinstance(env.unwrapped._retriever("local"), TermOverlapRetriever)
    # It is not a kind an index directory can hold.
    assert overlap_kind not in persistable_kinds()


def test_registry_refuses_duplicates_and_bad_names(overlap_kind):
    with pytest.raises(ValueError, match="already registered"):
        register_retriever(overlap_kind, build_overlap)
    register_retriever(overlap_kind, build_overlap, override=True)
    with pytest.raises(ValueError, match="identifier"):
        register_retriever("two words", build_overlap)
    with pytest.raises(KeyError, match="no retriever kind 'nothing'"):
        unregister_retriever("nothing")


# ------------------------------------------------------------------- devices and backends
def test_device_and_index_backend_reach_every_dense_retriever(tmp_path):
    pytest.importorskip("faiss")
    pytest.importorskip("torch")
    from hopgym.retrieval.devices import TorchFlatIndex

    spec = {"kind": "dense", "model": "hashing-64", "index_backend": "torch", "device": "auto"}
    assert RetrieverSpec.coerce(spec).device == "auto"  # resolved when built, not when written
    dense = make_retriever(spec, CORPUS)
    assert isinstance(dense.index, TorchFlatIndex) and dense.device in ("cpu", "cuda")
    hybrid = RetrieverBuilder({**spec, "kind": "hybrid"})(CORPUS)
    assert isinstance(hybrid.retrievers[1].index, TorchFlatIndex)
    faiss_hybrid = make_retriever({"kind": "hybrid", "model": "hashing-64"}, CORPUS)
    qs = ["Corvin Institute founded", "music school", "Tolva River"]
    assert [[p.doc_id for p in ps] for ps in hybrid.search_batch(qs, 3)] == [
        [p.doc_id for p in ps] for ps in faiss_hybrid.search_batch(qs, 3)
    ]
    # An env loading a saved index gets the spec's device and backend too.
    clear_task_cache()
    idx = tmp_path / "idx"
    build_index(MUSIQUE, idx, retriever="dense", model="hashing-64")
    env = gym.make(
        "hopgym/MuSiQue-v1",
        path=MUSIQUE,
        mode="open",
        index=str(idx),
        retriever={"kind": "dense", "index_backend": "torch"},
        reward=None,
    )
    local = env.unwrapped.task.sources["local"].retriever
    assert local.index_backend == "torch" and isinstance(local.index, TorchFlatIndex)
    env.reset(seed=0, options={"question_id": "3hop1__9285_5188_23307"})
    assert env.step(Search("Corvin Institute founded"))[4]["documents"]
    clear_task_cache()
