"""What every retriever shares: the :class:`Retriever` protocol, :class:`SearchHit`,
:class:`BatchScoredRetriever` (batched, cached scoring) and :func:`tokenize`.

Ranking is deterministic: equal scores break by position in the corpus, and corpora are kept in
the order they were given (the synthetic world orders them by ``doc_id``).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from hopgym.corpora.types import Passage
from hopgym.retrieval.query_cache import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CACHE_ENTRIES,
    CacheInfo,
    QueryCache,
)

__all__ = ["Retriever", "SearchHit", "BatchScoredRetriever", "tokenize", "STOPWORDS"]


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A passage with its retrieval score."""

    passage: Passage
    score: float


@runtime_checkable
class Retriever(Protocol):
    """What the environment needs from a search backend.

    ``search`` returns at most ``k`` passages, best first. ``search_batch`` answers many queries
    at once (implementations that cannot batch may loop). Both raise :class:`RetrievalError` on
    failure; they never return error strings.
    """

    def search(self, query: str, k: int) -> list[Passage]: ...

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]: ...


class BatchScoredRetriever:
    """Base for retrievers whose one primitive is ``search_batch_scored(queries, k)``.

    It derives ``search_scored``, ``search`` and ``search_batch`` from it, through the
    retriever's query cache (:mod:`hopgym.retrieval.query_cache`): a query whose ranked result is
    cached is not searched again, a batch searches each distinct query once, and the rest go to
    ``search_batch_scored`` in one call. ``search_batch_scored`` itself never reads the cache
    (it is what a fused or served retriever calls on its parts).

    Subclasses set :attr:`prefix_exact` when their top ``k`` is a prefix of their top ``k + 1``
    and override :meth:`cache_key` with what determines their result; constructors call
    :meth:`configure_cache` (without it, nothing is cached).
    """

    #: The top ``k`` is a prefix of the top ``k + 1`` (one cache entry serves every shorter k).
    prefix_exact: bool = False
    _query_cache: QueryCache | None = None

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        """Top ``k`` hits with scores for each query, uncached (the subclass's primitive)."""
        raise NotImplementedError

    @property
    def shared_passages(self) -> bool:
        """Whether hits reference the retriever's own passages (an in-process corpus, whose text
        the cache does not count) rather than new objects (a server's answers)."""
        return hasattr(self, "passages")

    # ------------------------------------------------------------------ the cache
    def cache_key(self, query: str) -> Hashable:
        """What makes two queries the same for this retriever (here: the exact string)."""
        return query

    def configure_cache(
        self, max_entries: int = DEFAULT_CACHE_ENTRIES, max_bytes: int = DEFAULT_CACHE_BYTES
    ) -> None:
        """Give this retriever a new, empty query cache (``0`` for either bound: off).

        Raises:
            hopgym.errors.InvalidOptionError: a bound that is not an int >= 0.
        """
        self._query_cache = QueryCache(
            max_entries, max_bytes, prefix_exact=self.prefix_exact, shared_passages=self.shared_passages
        )

    @property
    def query_cache(self) -> QueryCache | None:
        """This retriever's :class:`~hopgym.retrieval.query_cache.QueryCache` (``None``: none)."""
        return self._query_cache

    def cache_info(self) -> CacheInfo:
        """Hits, misses and sizes of the query cache (all zero without one).

        Example:
            >>> from hopgym.retrieval import BM25Retriever
            >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome.")]
            >>> r = BM25Retriever(docs)
            >>> _ = r.search("Oslo city", 2), r.search("city, OSLO?", 1), r.search("Rome", 1)
            >>> r.cache_info().hits, r.cache_info().misses
            (1, 2)
        """
        cache = self._query_cache
        return cache.info() if cache is not None else CacheInfo()

    def cache_clear(self) -> None:
        """Empty the query cache and reset its counters."""
        if self._query_cache is not None:
            self._query_cache.clear()

    def _search_keyed(
        self, queries: Sequence[str], keys: Sequence[Hashable], k: int
    ) -> list[list[SearchHit]]:
        """Uncached search of distinct queries whose cache keys are ``keys`` (a subclass may
        search from the keys, already computed)."""
        return self.search_batch_scored(queries, k)

    def _search_cached(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        cache = self._query_cache
        if cache is None:
            return self.search_batch_scored(queries, k)
        if k <= 0:
            return [[] for _ in queries]
        keys = [self.cache_key(q) for q in queries]
        out: list[list[SearchHit] | None] = [None] * len(keys)
        todo: dict[Hashable, list[int]] = {}
        hits = 0
        for i, key in enumerate(keys):
            if key in todo:  # the same query earlier in this batch: answered by its search
                todo[key].append(i)
                hits += 1
                continue
            got = cache.lookup(key, k)
            if got is None:
                todo[key] = [i]
            else:
                out[i] = got
                hits += 1
        cache.record(hits=hits, misses=len(todo))
        if todo:
            firsts = [idx[0] for idx in todo.values()]
            found = self._search_keyed([queries[i] for i in firsts], list(todo), k)
            for (key, idx), result in zip(todo.items(), found, strict=True):
                cache.put(key, k, result)
                for j, i in enumerate(idx):
                    out[i] = result if j == 0 else list(result)
        return out  # type: ignore[return-value]

    # ------------------------------------------------------------------ derived searches
    def search_batch_hits(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        """Top ``k`` hits with scores for each query, through the query cache (what a server
        answers its clients with)."""
        return self._search_cached(queries, k)

    def search_scored(self, query: str, k: int) -> list[SearchHit]:
        """Top ``k`` hits with scores for one query."""
        return self._search_cached([query], k)[0]

    def search(self, query: str, k: int) -> list[Passage]:
        """Top ``k`` passages for ``query``, best first."""
        return [h.passage for h in self._search_cached([query], k)[0]]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top ``k`` passages for each query, in one call."""
        return [[h.passage for h in hits] for hits in self._search_cached(queries, k)]


_WORD = re.compile(r"\w\w+", re.UNICODE)

# A small stopword list of our own, used by both engines, so that bm25s and rank-bm25 rank the
# same way on the same corpus (bm25s' built-in list differs from anything rank-bm25 uses).
STOPWORDS = frozenset(
    """a an and are as at be by for from has he her his in is it its of on or she that the their
    this to was were which who whom whose with what when where how did does do""".split()
)


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens of two or more characters, without stopwords.

    Example:
        >>> tokenize("Who founded the Qelvor Dynamics company?")
        ['founded', 'qelvor', 'dynamics', 'company']
    """
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]
