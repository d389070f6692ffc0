"""Hybrid retrieval by reciprocal-rank fusion, and scored-search helpers every backend shares.

Classes: :class:`HybridRetriever`. Functions: :func:`scored_search_batch`, :func:`scored_search`.

Reciprocal-rank fusion (Cormack et al., 2009) scores a passage by ``sum_i w_i / (rrf_k + rank_i)``
over the retrievers that return it (rank 1-based). It needs no score calibration between BM25
and cosine similarity. Ties (common: a passage ranked 2nd by one retriever and another ranked
2nd by the other) break by the best single rank, then by the first retriever's rank, then by
doc id, so results never depend on dict or thread order.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from hopgym.corpora.types import Passage
from hopgym.errors import InvalidOptionError
from hopgym.retrieval.base import BatchScoredRetriever, Retriever, SearchHit
from hopgym.retrieval.query_cache import DEFAULT_CACHE_BYTES, DEFAULT_CACHE_ENTRIES

__all__ = ["HybridRetriever", "scored_search", "scored_search_batch"]


def scored_search_batch(
    retriever: Retriever, queries: Sequence[str], k: int, *, cached: bool = False
) -> list[list[SearchHit]]:
    """Top ``k`` hits with scores for each query, from any retriever.

    Uses ``search_batch_scored`` or ``search_scored`` when the retriever has them; a plain
    :class:`Retriever` gets rank-based scores ``1 / rank``. ``cached``: go through the
    retriever's query cache where it has one (a server answering clients); the parts of a fused
    retriever are searched uncached (the fused result is what its own cache holds).
    """
    if cached and hasattr(retriever, "search_batch_hits"):
        return retriever.search_batch_hits(queries, k)
    if hasattr(retriever, "search_batch_scored"):
        return retriever.search_batch_scored(queries, k)
    if hasattr(retriever, "search_scored"):
        return [retriever.search_scored(q, k) for q in queries]
    return [
        [SearchHit(p, 1.0 / (r + 1)) for r, p in enumerate(ps)] for ps in retriever.search_batch(queries, k)
    ]


def scored_search(retriever: Retriever, query: str, k: int) -> list[SearchHit]:
    """Top ``k`` hits with scores for one query (see :func:`scored_search_batch`)."""
    return scored_search_batch(retriever, [query], k)[0]


class HybridRetriever(BatchScoredRetriever):
    """Reciprocal-rank fusion of several retrievers (typically BM25 and dense).

    Args:
        retrievers: the retrievers to fuse; the first one breaks remaining ties.
        weights: one weight per retriever (default all 1).
        rrf_k: the fusion constant (60 in the original paper; smaller favours top ranks).
        depth: candidates taken from each retriever (at least ``k``).
        cache_entries, cache_bytes: bounds of the query cache of fused results
            (:mod:`hopgym.retrieval.query_cache`; 0: off), keyed by the parts' keys and ``k``. The
            parts are searched uncached.

    Example:
        >>> from hopgym.retrieval import BM25Retriever
        >>> from hopgym.retrieval.dense import DenseRetriever, HashingEmbedder
        >>> docs = [Passage("a", "Oslo", "Oslo is a city in Norway."),
        ...         Passage("b", "Rome", "Rome is the capital of Italy.")]
        >>> dense = DenseRetriever(docs, embedder=HashingEmbedder(64))
        >>> h = HybridRetriever([BM25Retriever(docs), dense])
        >>> [p.doc_id for p in h.search("capital of Italy", k=2)]
        ['b', 'a']
    """

    kind = "hybrid"

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        *,
        weights: Sequence[float] | None = None,
        rrf_k: float = 60.0,
        depth: int = 50,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if len(retrievers) < 2:
            raise InvalidOptionError(f"hybrid retrieval fuses at least two retrievers, got {len(retrievers)}")
        if weights is not None and len(weights) != len(retrievers):
            raise InvalidOptionError(f"{len(weights)} weights for {len(retrievers)} retrievers")
        if rrf_k < 0:
            raise InvalidOptionError(f"rrf_k must be non-negative, got {rrf_k}")
        if depth < 1:
            raise InvalidOptionError(f"depth must be at least 1, got {depth}")
        self.retrievers = list(retrievers)
        self.weights = [1.0] * len(retrievers) if weights is None else [float(w) for w in weights]
        self.rrf_k = float(rrf_k)
        self.depth = depth
        self.configure_cache(cache_entries, cache_bytes)

    def cache_key(self, query: str) -> Hashable:
        """The parts' keys (the exact string for a part without one)."""
        return tuple(
            r.cache_key(query) if isinstance(r, BatchScoredRetriever) else query for r in self.retrievers
        )

    @property
    def passages(self) -> list[Passage]:
        """The corpus of the first retriever (all fused retrievers index the same corpus)."""
        return self.retrievers[0].passages  # type: ignore[attr-defined,no-any-return]

    def __len__(self) -> int:
        return len(self.passages)

    @property
    def params(self) -> dict[str, Any]:
        return {"rrf_k": self.rrf_k, "depth": self.depth, "weights": self.weights}

    def _fuse(self, lists: Sequence[list[SearchHit]], k: int) -> list[SearchHit]:
        fused: dict[str, float] = {}
        best: dict[str, int] = {}
        first: dict[str, int] = {}
        passage: dict[str, Passage] = {}
        inf = 1 << 30
        for j, (hits, w) in enumerate(zip(lists, self.weights, strict=False)):
            seen: set[str] = set()
            rank = 0
            for h in hits:
                d = h.passage.doc_id
                if d in seen:  # a retriever should not repeat a passage; count it once
                    continue
                seen.add(d)
                rank += 1
                passage.setdefault(d, h.passage)
                fused[d] = fused.get(d, 0.0) + w / (self.rrf_k + rank)
                best[d] = min(best.get(d, inf), rank)
                if j == 0:
                    first[d] = rank
        order = sorted(fused, key=lambda d: (-round(fused[d], 12), best[d], first.get(d, inf), d))
        return [SearchHit(passage[d], fused[d]) for d in order[:k]]

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        """Fused top ``k`` with RRF scores for each query (each retriever called once, batched)."""
        if not queries:
            return []
        if k <= 0:
            return [[] for _ in queries]
        depth = max(k, self.depth)
        per = [scored_search_batch(r, queries, depth) for r in self.retrievers]
        return [self._fuse([p[i] for p in per], k) for i in range(len(queries))]
