"""The sparse BM25 top-k returns exactly what the dense reference returns.

The reference is today's default before the sparse path: bm25s scores every passage (float32,
query order) and :func:`top_k_indices` takes the top ``k`` (ties by corpus position, zero
scores left out). Scores are compared bit for bit, so a changed summation order would show.
"""

from __future__ import annotations

import pickle
import threading

import bm25s
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hopgym.corpora.synthetic import WorldConfig
from hopgym.corpora.types import Passage
from hopgym.retrieval import index_store
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.retrieval.sparse_topk import SparseTopK, top_k_indices
from hopgym.tasks.synthetic import build_task
from hopgym.tasks.tiny import TINY_PASSAGES

WORDS = [f"w{i}" for i in range(12)]


def reference(r: BM25Retriever, terms: list[int], k: int) -> tuple[list[int], list[float]]:
    scores = np.asarray(r.bm25s_model.get_scores(terms), dtype=np.float64) if terms else np.zeros(len(r))
    pick = top_k_indices(scores, k)
    return pick.tolist(), scores[pick].tolist()


def sparse(topk: SparseTopK, terms: list[int], k: int) -> tuple[list[int], list[float]]:
    got = topk.top_k(terms, k)
    assert got is not None
    return got[0].tolist(), got[1].tolist()


corpora = st.lists(  # small vocabularies: many ties, duplicate passages, empty passages
    st.lists(st.sampled_from(WORDS), min_size=0, max_size=9), min_size=1, max_size=40
)
queries = st.lists(st.integers(0, len(WORDS) + 2), min_size=0, max_size=7)  # > 11: unknown


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    docs=corpora,
    query=queries,
    k=st.integers(1, 45),
    full_df=st.sampled_from([0, 1, 3, 1024]),
    depth=st.sampled_from([1, 2, 64]),
)
def test_sparse_top_k_equals_the_dense_reference(docs, query, k, full_df, depth):
    passages = [Passage(f"d{i}", "", " ".join(d)) for i, d in enumerate(docs)]
    r = BM25Retriever(passages, backend="numpy", cache_entries=0)
    terms = [r._vocab[w] for w in (WORDS[q] for q in query if q < len(WORDS)) if w in r._vocab]
    # full_df 0/1/3 and depth 1/2 force the impact-order rounds on these small corpora.
    topk = SparseTopK(r.bm25s_model, full_df=full_df, depth=depth)
    assert sparse(topk, terms, k) == reference(r, terms, k)


@settings(max_examples=60, deadline=None)
@given(docs=corpora, text=st.text(alphabet="w0123456789 ,.?XYZ", max_size=40), k=st.integers(0, 12))
def test_backends_return_the_same_hits_for_any_text(docs, text, k):
    passages = [Passage(f"d{i}", "", " ".join(d)) for i, d in enumerate(docs)]
    fast = BM25Retriever(passages, cache_entries=0)
    fast.sparse_min_passages = 0  # small corpora are scored densely otherwise
    slow = BM25Retriever(passages, backend="numpy", cache_entries=0)
    assert fast.backend == "sparse"
    assert fast.search_scored(text, k) == slow.search_scored(text, k)


def test_query_order_is_kept_where_it_changes_a_float():
    # Three terms whose float32 sums differ by order for some passage: the sparse path must add
    # them in query order, as bm25s does.
    rng = np.random.default_rng(3)
    docs = [" ".join(rng.choice(WORDS[:6], size=int(rng.integers(1, 12)))) for _ in range(300)]
    r = BM25Retriever([Passage(str(i), "", d) for i, d in enumerate(docs)], backend="numpy", cache_entries=0)
    topk = SparseTopK(r.bm25s_model, full_df=4, depth=2)
    model = r.bm25s_model
    differs = 0
    for perm in ([0, 1, 2], [2, 1, 0], [1, 2, 0], [0, 2, 1, 0], [3, 4, 5, 3, 4]):
        terms = [r._vocab[WORDS[i]] for i in perm]
        a = model.get_scores(terms)
        b = model.get_scores(sorted(terms))
        differs += int(np.any(a != b))
        for k in (1, 5, 40, 300):
            assert sparse(topk, terms, k) == reference(r, terms, k)
    assert differs  # the orders do change some float here, so the test can fail


def test_ties_break_by_corpus_position_and_k_beyond_the_matches():
    passages = [Passage(f"d{i}", "", "alpha beta") for i in range(8)]
    passages += [Passage(f"x{i}", "", f"gamma {i} delta") for i in range(20)]
    r = BM25Retriever(passages)
    r.sparse_min_passages = 0
    assert [p.doc_id for p in r.search("alpha", 3)] == ["d0", "d1", "d2"]
    assert [p.doc_id for p in r.search("beta alpha", 100)] == [f"d{i}" for i in range(8)]
    assert r.search("", 3) == [] and r.search("unknown words", 3) == []


def test_gold_hop_queries_of_a_synthetic_world():
    task = build_task(WorldConfig(n_entities=3000, n_questions=300))
    queries = [h.query for s in task.samples for h in s.decomposition]
    r = task.sources["local"].retriever
    assert r.backend == "sparse"
    topk = r._sparse()
    for q in queries:
        terms = r._query_ids(q)
        for k in (1, 3, 6, 12):
            assert sparse(topk, terms, k) == reference(r, terms, k), (q, k)


def test_what_it_cannot_prove_falls_back_to_dense_scoring():
    corpus = [[0, 1], [1, 2], [1], [2, 2, 0]]
    model = bm25s.BM25(method="bm25l")  # every passage scores: nothing to skip
    model.index(corpus, show_progress=False)
    assert SparseTopK(model).top_k([1], 2) is None
    model = bm25s.BM25()
    model.index(corpus, show_progress=False)
    ok = SparseTopK(model)
    assert ok.top_k([1], 2) is not None
    # A column whose passages are out of order (an index built elsewhere) is refused.
    s, e = model.scores["indptr"][1], model.scores["indptr"][2]
    model.scores["indices"][s:e] = model.scores["indices"][s:e][::-1].copy()
    model.scores["data"][s:e] = model.scores["data"][s:e][::-1].copy()
    assert SparseTopK(model).top_k([1], 2) is None
    assert SparseTopK(model).top_k([0], 2) is not None


def test_a_retriever_whose_index_cannot_be_proved_still_ranks_exactly():
    passages = [Passage(str(i), "", t) for i, t in enumerate(["a1 b1", "b1 c1", "b1", "c1 a1"])]
    r = BM25Retriever(passages)
    r.sparse_min_passages = 0
    model = r.bm25s_model
    t = r._vocab["b1"]
    s, e = model.scores["indptr"][t], model.scores["indptr"][t + 1]
    model.scores["indices"][s:e] = model.scores["indices"][s:e][::-1].copy()
    model.scores["data"][s:e] = model.scores["data"][s:e][::-1].copy()
    assert r._sparse().top_k([t], 2) is None
    expected = reference(r, [t], 2)
    assert [h.passage.doc_id for h in r.search_scored("b1", 2)] == [str(i) for i in expected[0]]


def test_loaded_memory_mapped_index_uses_the_sparse_path(tmp_path):
    r = BM25Retriever(TINY_PASSAGES)
    index_store.save_index(r, tmp_path / "ix")
    loaded = index_store.load_index(tmp_path / "ix", passages=TINY_PASSAGES, mmap=True)
    assert isinstance(loaded, BM25Retriever) and loaded.backend == "sparse"
    loaded.sparse_min_passages = 0
    assert isinstance(loaded.bm25s_model.scores["data"], np.memmap)
    ref = BM25Retriever(TINY_PASSAGES, backend="numpy")
    for q in ["Qelvor Dynamics founder", "Sefa Quill father", "capital of Brenmark", "born"]:
        for k in (1, 3, 50):
            assert loaded.search_scored(q, k) == ref.search_scored(q, k)
    assert loaded.cache_info().misses > 0


def test_retriever_pickles_without_its_search_state():
    r = BM25Retriever(TINY_PASSAGES)
    r.sparse_min_passages = 0
    before = r.search_scored("Qelvor Dynamics", 3)
    assert "_topk" in r.__dict__
    clone = pickle.loads(pickle.dumps(r))
    assert "_topk" not in clone.__dict__
    assert clone.search_scored("Qelvor Dynamics", 3) == before
    assert clone.cache_info().entries == 1 and r.cache_info().entries == 1


def test_the_proof_needs_a_strict_margin_over_the_bound():
    proved = SparseTopK._proved
    scores = np.array([3.0, 2.0])
    assert proved(scores, 2, 1.9, 2)
    assert not proved(scores, 2, 2.0, 2)  # a passage outside could tie and come first
    # float32 sums may exceed the real sum by a few units in the last place: kept out too.
    assert not proved(scores, 2, 2.0 * (1 - 2.0**-22), 2)
    assert proved(scores[:1], 2, 0.0, 2)  # nothing else can score at all
    assert not proved(scores[:1], 2, 1.0, 2)  # fewer than k candidates


def test_threads_share_the_impact_orders_safely():
    rng = np.random.default_rng(4)
    docs = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 9)))) for _ in range(400)]
    r = BM25Retriever([Passage(str(i), "", d) for i, d in enumerate(docs)], backend="numpy", cache_entries=0)
    # Every term read in impact order, and room for about two of them: constant eviction.
    topk = SparseTopK(r.bm25s_model, full_df=0, depth=1, impact_bytes=2400)
    queries = [[r._vocab[w] for w in rng.choice(WORDS, size=int(rng.integers(1, 5)))] for _ in range(60)]
    expected = [reference(r, q, 5) for q in queries]
    errors: list[int] = []

    def work(seed: int) -> None:
        order = np.random.default_rng(seed).permutation(len(queries))
        for i in order.tolist() * 3:
            if sparse(topk, queries[i], 5) != expected[i]:
                errors.append(i)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert topk._impact_used <= 2400 + 8 * 400 and len(topk._impact) >= 1
