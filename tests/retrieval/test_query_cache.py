"""The query cache: exact answers, bounds, threads, pickling, specs and the env's counters."""

from __future__ import annotations

import pickle
import threading

import gymnasium as gym
import numpy as np
import pytest

import hopgym  # noqa: F401
from hopgym.agents.scripted import OracleAgent
from hopgym.corpora.synthetic import WorldConfig
from hopgym.corpora.types import Passage
from hopgym.retrieval.dense import DenseRetriever, HashingEmbedder
from hopgym.retrieval.http import HTTPRetriever
from hopgym.retrieval.hybrid import HybridRetriever
from hopgym.retrieval.query_cache import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CACHE_ENTRIES,
    CacheInfo,
    QueryCache,
)
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.retrieval.specs import RetrieverSpec, make_retriever
from hopgym.tasks.synthetic import build_task
from hopgym.tasks.tiny import TINY_PASSAGES
from hopgym.turns import Answer, Search

SMALL_WORLD = {"n_entities": 400, "n_questions": 40}


def ids(hits):
    return [getattr(h, "passage", h).doc_id for h in hits]


# ----------------------------------------------------------------------------- the table
def test_prefix_entries_serve_shorter_k_and_complete_lists_any_k():
    c = QueryCache(8, 1 << 20, prefix_exact=True)
    c.put("q", 3, ["a", "b", "c"])
    assert c.get("q", 2) == ["a", "b"] and c.get("q", 3) == ["a", "b", "c"]
    assert c.get("q", 4) is None  # three of at least four: not known to be all
    c.put("q", 5, ["a", "b", "c", "d"])  # fewer than asked: every match
    assert c.get("q", 50) == ["a", "b", "c", "d"]
    c.put("q", 2, ["a", "b"])  # a shorter list never replaces a longer one
    assert c.get("q", 4) == ["a", "b", "c", "d"]
    assert c.info()[:3] == (4, 1, 1)


def test_other_retrievers_key_entries_by_k():
    c = QueryCache(8, 1 << 20, prefix_exact=False)
    c.put("q", 3, ["a", "b", "c"])
    assert c.get("q", 2) is None and c.get("q", 3) == ["a", "b", "c"]
    c.put("q", 2, ["b", "a"])
    assert c.get("q", 2) == ["b", "a"] and len(c) == 2


def test_returned_lists_are_copies():
    c = QueryCache(8, 1 << 20, prefix_exact=True)
    c.put("q", 2, ["a", "b"])
    got = c.get("q", 2)
    got.append("x")
    assert c.get("q", 2) == ["a", "b"]


def test_entry_bound_evicts_least_recently_used():
    c = QueryCache(2, 1 << 20, prefix_exact=True)
    c.put("a", 1, ["1"])
    c.put("b", 1, ["2"])
    assert c.get("a", 1)  # a is now the most recent
    c.put("c", 1, ["3"])
    assert c.get("b", 1) is None and c.get("a", 1) and c.get("c", 1)
    assert len(c) == 2


def test_byte_bound_holds_and_counts_unshared_passages():
    hits = [Passage(str(i), "T", "x" * 1000) for i in range(5)]
    shared = QueryCache(1000, 40_000, prefix_exact=True)
    own = QueryCache(1000, 40_000, prefix_exact=True, shared_passages=False)
    for n in range(100):
        shared.put(f"q{n}", 5, hits)
        own.put(f"q{n}", 5, hits)
        assert shared.info().bytes <= 40_000 and own.info().bytes <= 40_000
    assert own.info().entries < shared.info().entries  # the text counts where it is not shared
    assert own.info().bytes > 0.5 * 40_000
    tiny = QueryCache(1000, 300, prefix_exact=True)
    tiny.put("big", 5, hits)  # larger than the whole bound: not stored
    assert len(tiny) == 0


@pytest.mark.parametrize("entries, size", [(0, 1 << 20), (10, 0)])
def test_zero_turns_it_off(entries, size):
    c = QueryCache(entries, size, prefix_exact=True)
    c.put("q", 1, ["a"])
    assert not c.enabled and c.get("q", 1) is None and len(c) == 0


@pytest.mark.parametrize("entries, size", [(-1, 10), (1.5, 10), (True, 10), (10, "1MB")])
def test_bad_bounds_name_the_setting(entries, size):
    with pytest.raises(ValueError, match="cache_entries|cache_bytes"):
        QueryCache(entries, size)


def test_pickles_as_its_settings_empty():
    c = QueryCache(7, 9999, prefix_exact=True)
    c.put("q", 1, ["a"])
    c.get("q", 1)
    clone = pickle.loads(pickle.dumps(c))
    assert (clone.max_entries, clone.max_bytes, clone.prefix_exact) == (7, 9999, True)
    assert clone.info() == CacheInfo(0, 0, 0, 0, 7, 9999)
    clone.put("q", 1, ["a"])  # and works (its lock was rebuilt)
    assert clone.get("q", 1) == ["a"]


# ----------------------------------------------------------------------------- retrievers
def test_bm25_results_with_and_without_the_cache_are_identical():
    rng = np.random.default_rng(0)
    words = sorted({w for p in TINY_PASSAGES for w in p.contents.split()})
    cached = BM25Retriever(TINY_PASSAGES)
    plain = BM25Retriever(TINY_PASSAGES, cache_entries=0)
    for _ in range(400):  # few distinct queries, growing and shrinking k: many prefix hits
        q = " ".join(rng.choice(words[:25], size=int(rng.integers(1, 4))))
        k = int(rng.integers(1, 20))
        assert cached.search_scored(q, k) == plain.search_scored(q, k), (q, k)
    info = cached.cache_info()
    assert info.hits > 100 and info.misses > 10 and info.hits + info.misses == 400
    assert plain.cache_info() == CacheInfo(0, 400, 0, 0, 0, DEFAULT_CACHE_BYTES)


def test_bm25_keys_merge_only_what_scores_the_same():
    r = BM25Retriever(TINY_PASSAGES)
    key = r.cache_key
    assert key("Qelvor Dynamics") == key("dynamics, QELVOR?") == key("the Qelvor zzz dynamics")
    three = key("Maren Oskdal engineer")
    assert len(three) == 3
    assert three != key("engineer Maren Oskdal")  # three terms: order can move a float
    assert key("Qelvor Qelvor") != key("Qelvor")
    assert BM25Retriever(TINY_PASSAGES, engine="rank_bm25").cache_key("rome oslo") == ("oslo", "rome")


def test_batch_searches_each_distinct_query_once_and_counts_repeats_as_hits():
    r = BM25Retriever(TINY_PASSAGES)
    qs = ["Qelvor Dynamics", "dynamics qelvor", "Sefa Quill", "Qelvor Dynamics", "zz top"]
    got = r.search_batch(qs, 3)
    assert got == [BM25Retriever(TINY_PASSAGES, cache_entries=0).search(q, 3) for q in qs]
    assert got[0] == got[1] == got[3] and got[0] is not got[3]
    assert r.cache_info()[:3] == (2, 3, 3)
    assert r.search_batch(qs, 2) == [g[:2] for g in got]
    assert r.cache_info()[:2] == (7, 3)


@pytest.mark.parametrize("backend", ["sparse", "numpy"])
def test_bm25_batch_equals_a_loop_of_single_searches(backend):
    rng = np.random.default_rng(1)
    words = sorted({w for p in TINY_PASSAGES for w in p.contents.split()})
    qs = [" ".join(rng.choice(words, size=int(rng.integers(0, 5)))) for _ in range(60)]
    qs += qs[:10]
    r = BM25Retriever(TINY_PASSAGES, backend=backend, cache_entries=0)
    r.sparse_min_passages = 0
    for k in (1, 4, 30):
        assert r.search_batch_scored(qs, k) == [r.search_scored(q, k) for q in qs]
        assert r.search_batch(qs, k) == [r.search(q, k) for q in qs]


def test_dense_and_hybrid_batches_equal_loops_and_key_by_string_and_k():
    docs = TINY_PASSAGES
    dense = DenseRetriever(docs, embedder=HashingEmbedder(64))
    hybrid = HybridRetriever(
        [
            BM25Retriever(docs, cache_entries=0),
            DenseRetriever(docs, embedder=HashingEmbedder(64), cache_entries=0),
        ]
    )
    qs = [
        "Qelvor Dynamics founder",
        "capital of Brenmark",
        "qelvor dynamics founder",
        "Sefa Quill father",
        "capital of Brenmark",
    ]
    for r in (dense, hybrid):
        plain = [r.search_batch_scored([q], 3)[0] for q in qs]
        assert r.search_batch(qs, 3) == [[h.passage for h in hits] for hits in plain]
        # Cached from the batch of five: the same hits; a score may differ in its last bit, since
        # FAISS's inner products over a batch may sum in another order than over one query.
        again = [r.search_scored(q, 3) for q in qs]
        assert [[h.passage for h in hits] for hits in again] == [[h.passage for h in hits] for hits in plain]
        assert [h.score for hits in again for h in hits] == pytest.approx(
            [h.score for hits in plain for h in hits], rel=1e-6
        )
        assert r.cache_info().hits >= 5
        assert r.search("Qelvor Dynamics founder", 2) == [h.passage for h in plain[0][:2]]
        assert not r.prefix_exact
    assert dense.cache_key("Qelvor Dynamics") != dense.cache_key("qelvor dynamics")
    assert hybrid.cache_key("a b")[0] == hybrid.retrievers[0].cache_key("b a")


def test_threads_share_one_cache_safely():
    r = BM25Retriever(TINY_PASSAGES, cache_entries=5)  # small: entries come and go meanwhile
    r.sparse_min_passages = 0
    words = sorted({w for p in TINY_PASSAGES for w in p.contents.split()})[:12]
    queries = [f"{a} {b}" for a in words for b in words[:4]]
    expected = {q: BM25Retriever(TINY_PASSAGES, cache_entries=0).search(q, 4) for q in queries}
    errors: list[str] = []

    def work(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(300):
            q = queries[int(rng.integers(len(queries)))]
            if r.search(q, 4) != expected[q]:
                errors.append(q)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    info = r.cache_info()
    assert not errors
    assert info.hits + info.misses == 1200 and info.entries <= 5 and info.hits > 0


# ----------------------------------------------------------------------------- specs
def test_specs_set_the_bounds_in_process_and_leave_http_off():
    assert RetrieverSpec().cache_bounds() == (DEFAULT_CACHE_ENTRIES, DEFAULT_CACHE_BYTES)
    r = make_retriever({"kind": "bm25", "cache_entries": 3, "cache_bytes": 5000}, TINY_PASSAGES)
    assert r.query_cache.max_entries == 3 and r.query_cache.max_bytes == 5000
    assert not make_retriever({"cache_entries": 0}, TINY_PASSAGES).query_cache.enabled
    http = make_retriever("http://127.0.0.1:9")
    assert isinstance(http, HTTPRetriever) and http.query_cache is None
    http = make_retriever({"url": "http://127.0.0.1:9", "cache_entries": 64})
    assert http.query_cache.max_entries == 64 and not http.query_cache.shared_passages
    hybrid = make_retriever({"kind": "hybrid", "model": "hashing-32", "cache_entries": 9}, TINY_PASSAGES)
    assert hybrid.query_cache.max_entries == 9
    assert all(not p.query_cache.enabled for p in hybrid.retrievers)


@pytest.mark.parametrize("settings", [{"cache_entries": -1}, {"cache_bytes": 1.5}, {"cache_entries": True}])
def test_bad_cache_settings_name_the_field(settings):
    with pytest.raises(ValueError, match="cache_entries|cache_bytes"):
        RetrieverSpec(**settings)


# ----------------------------------------------------------------------------- the env
class NoisyOracle(OracleAgent):
    """The oracle's hop queries with seeded noise (a dropped, moved or added word), and some
    repeated searches: exercises hits, misses and growing k under de-duplication."""

    def __init__(self, env: gym.Env, seed: int) -> None:
        super().__init__(env)
        self.rng = np.random.default_rng(seed)

    def act(self, observation, info):
        action = super().act(observation, info)
        if isinstance(action, Search):
            words = action.query.split()
            roll = self.rng.random()
            if roll < 0.2 and len(words) > 1:
                words.pop(int(self.rng.integers(len(words))))
            elif roll < 0.4:
                words.insert(0, words.pop())
            elif roll < 0.5:
                words.append("again")
            if roll > 0.85:
                self.attempted.discard(max(self.attempted))  # search this hop once more
            return Search(" ".join(words))
        return action


def transcripts(env: gym.Env, episodes: int, seed: int) -> list[list[dict[str, str]]]:
    out = []
    for ep in range(episodes):
        agent = NoisyOracle(env, seed=ep)
        obs, info = env.reset(seed=seed + ep)
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(agent.act(obs, info))
            done = term or trunc
        out.append([dict(m) for m in env.unwrapped.transcript])
    return out


def test_episodes_are_identical_with_and_without_the_cache():
    task = build_task(WorldConfig(**SMALL_WORLD))
    retriever = task.sources["local"].retriever
    env = gym.make("hopgym/Synthetic-v1", **SMALL_WORLD, top_k=2, max_turns=10)
    try:
        retriever.configure_cache(0, 0)
        plain = transcripts(env, 40, seed=5)
        assert retriever.cache_info().hits == 0
        retriever.configure_cache()
        first = transcripts(env, 40, seed=5)
        again = transcripts(env, 40, seed=5)  # now mostly answered from the cache
        info = env.unwrapped.retrieval_cache_info()["local"]
    finally:
        retriever.configure_cache()
    assert plain == first == again
    assert info.hit_rate > 0.5 and info.misses > 0
    assert sum("Search" in m["content"] or "<search>" in m["content"] for t in plain for m in t) > 60


def test_env_cache_info_names_each_source():
    env = gym.make("hopgym/Synthetic-v1", n_entities=400, n_questions=40, sources=("local", "web"))
    env.reset(seed=0)
    env.step(Search("anything at all"))
    info = env.unwrapped.retrieval_cache_info()
    assert set(info) == {"local", "web"} and all(isinstance(i, CacheInfo) for i in info.values())
    env.step(Answer("x"))


def test_synthetic_world_starts_with_an_empty_cache():
    """The world's hop-query checks are not the agents' searches: counters start at zero."""
    import gymnasium as gym

    env = gym.make("hopgym/Synthetic-v1", n_entities=300, n_questions=20, seed=11)
    info = env.unwrapped.retrieval_cache_info()["local"]
    assert (info.hits, info.misses) == (0, 0)
