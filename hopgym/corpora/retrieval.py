"""Retrievers: the :class:`Retriever` protocol and in-process BM25.

Classes: :class:`Retriever`, :class:`SearchHit`, :class:`BatchScoredRetriever`,
:class:`BM25Retriever`, :class:`RetrievalError`, :class:`DependencyNotInstalled`.

Ranking is deterministic: equal scores break by position in the corpus, and corpora are kept in
the order they were given (the synthetic world orders them by ``doc_id``).
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from hopgym.corpora.query_cache import (
    DEFAULT_CACHE_BYTES,
    DEFAULT_CACHE_ENTRIES,
    CacheInfo,
    QueryCache,
)
from hopgym.corpora.sparse_topk import SparseTopK, top_k_indices  # top_k_indices lived here
from hopgym.corpora.types import Passage
from hopgym.errors import DependencyNotInstalled, RetrievalError  # defined there, re-exported here

__all__ = [
    "Retriever",
    "SearchHit",
    "BatchScoredRetriever",
    "BM25Retriever",
    "RetrievalError",
    "DependencyNotInstalled",
    "tokenize",
    "top_k_indices",
    "BM25_ENGINES",
    "BM25_BACKENDS",
]

#: BM25 engines: bm25s (sparse matrices) and rank-bm25 (pure Python, the reference).
BM25_ENGINES = ("bm25s", "rank_bm25")
#: How the bm25s engine finds the top k (see :class:`BM25Retriever`); the first is the default.
BM25_BACKENDS = ("sparse", "numpy", "numba")


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
    retriever's query cache (:mod:`hopgym.corpora.query_cache`): a query whose ranked result is
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

    def configure_cache(self, max_entries: int = DEFAULT_CACHE_ENTRIES,
                        max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        """Give this retriever a new, empty query cache (``0`` for either bound: off).

        Raises:
            ValueError: a bound that is not an int >= 0.
        """
        self._query_cache = QueryCache(max_entries, max_bytes, prefix_exact=self.prefix_exact,
                                       shared_passages=self.shared_passages)

    @property
    def query_cache(self) -> QueryCache | None:
        """This retriever's :class:`~hopgym.corpora.query_cache.QueryCache` (``None``: none)."""
        return self._query_cache

    def cache_info(self) -> CacheInfo:
        """Hits, misses and sizes of the query cache (all zero without one).

        Example:
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

    def _search_keyed(self, queries: Sequence[str], keys: Sequence[Hashable], k: int
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


def _canonical(terms: Sequence[Any]) -> tuple[Any, ...]:
    # A score is a float sum in query order; with one or two terms every order gives the same
    # floats (0 + a + b == 0 + b + a), so their order is dropped; longer queries keep it.
    return tuple(sorted(terms)) if len(terms) == 2 else tuple(terms)


class BM25Retriever(BatchScoredRetriever):
    """BM25 over a list of passages, with bm25s (default) or rank-bm25 as the engine.

    Args:
        passages: the corpus; its order is the tie-break order.
        engine: ``"bm25s"`` (fast, sparse matrices) or ``"rank_bm25"`` (pure Python ``BM25Okapi``).
        backend: how bm25s finds the top ``k``:

            - ``"sparse"`` (default): reads only the postings of the query's terms and proves
              that no other passage can enter the top ``k``
              (:class:`~hopgym.corpora.sparse_topk.SparseTopK`); exactly the passages, order
              and scores of ``"numpy"``, 10-20x faster at 100k passages and more beyond.
            - ``"numpy"``: bm25s scores every passage and hopgym selects the top ``k`` exactly
              (:func:`top_k_indices`): the reference.
            - ``"numba"``: bm25s' compiled top-k (needs ``hopgym[fast]``; its first query in each
              process spends ~15 s compiling). It breaks ties on scores rounded to 1e-5, so
              near-ties may order differently from the other two.
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.
        cache_entries, cache_bytes: bounds of the query cache (:mod:`hopgym.corpora.query_cache`;
            0: off). Keys are the query's term ids after :func:`tokenize`.

    Every backend ranks best score first, ties by corpus position, and leaves out passages that
    share no term with the query. ``search_batch`` searches each distinct query once.

    Example:
        >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome is old.")]
        >>> [p.doc_id for p in BM25Retriever(docs).search("Rome old", k=1)]
        ['b']
    """

    kind = "bm25"
    #: Below this many passages the ``sparse`` backend scores densely, which is faster there
    #: (the results are the same).
    sparse_min_passages: int = 2048

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        engine: str = "bm25s",
        backend: str = "sparse",
        k1: float = 1.5,
        b: float = 0.75,
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if engine not in BM25_ENGINES:
            raise ValueError(f"engine must be one of {BM25_ENGINES}, got {engine!r}")
        if backend not in BM25_BACKENDS:
            raise ValueError(f"backend must be one of {BM25_BACKENDS}, got {backend!r}")
        if not passages:
            raise ValueError("cannot build a BM25 index over an empty corpus")
        self.passages: list[Passage] = list(passages)
        self.engine = engine
        self.k1, self.b = k1, b
        # A passage without indexable words gets a placeholder token: both engines fail on an
        # all-empty corpus, and an empty document must still keep its position.
        docs = [tokenize(p.contents) or ["\x00"] for p in self.passages]
        if engine == "rank_bm25":
            from rank_bm25 import BM25Okapi

            self._okapi = BM25Okapi(docs, k1=k1, b=b)
            self.backend = "python"
        else:
            import bm25s

            if backend == "numba":
                try:
                    import numba  # noqa: F401
                except ImportError:
                    raise DependencyNotInstalled.for_extra("numba", "fast") from None
            self.backend = backend
            self._vocab: dict[str, int] = {}
            ids = [[self._vocab.setdefault(w, len(self._vocab)) for w in d] for d in docs]
            self._bm25 = bm25s.BM25(k1=k1, b=b, backend="numba" if backend == "numba" else "numpy")
            self._bm25.index(bm25s.tokenization.Tokenized(ids=ids, vocab=self._vocab),
                             show_progress=False)
        self.configure_cache(cache_entries, cache_bytes)

    @classmethod
    def from_bm25s(cls, passages: Sequence[Passage], model: Any, *, k1: float = 1.5,
                   b: float = 0.75, backend: str = "sparse",
                   cache_entries: int = DEFAULT_CACHE_ENTRIES,
                   cache_bytes: int = DEFAULT_CACHE_BYTES) -> BM25Retriever:
        """Wrap an already built (e.g. loaded, memory-mapped) ``bm25s.BM25`` index over
        ``passages``, whose vocabulary came from :func:`tokenize`; nothing is re-indexed.
        ``backend`` is ``"sparse"`` or ``"numpy"`` (see the class)."""
        if backend not in ("sparse", "numpy"):
            raise ValueError(f"a loaded index searches with backend 'sparse' or 'numpy', got "
                             f"{backend!r}")
        self = cls.__new__(cls)
        self.passages = list(passages)
        self.engine, self.backend, self.k1, self.b = "bm25s", backend, k1, b
        model.backend = "numpy"
        self._vocab = dict(model.vocab_dict)
        self._bm25 = model
        self.configure_cache(cache_entries, cache_bytes)
        return self

    @property
    def prefix_exact(self) -> bool:  # type: ignore[override]
        # bm25s' numba top-k breaks ties on rounded scores among k + 8: not a fixed order.
        return self.backend != "numba"

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_topk", None)  # rebuilt on first use
        return state

    @property
    def bm25s_model(self) -> Any:
        """The underlying ``bm25s.BM25`` index (``None`` for the rank-bm25 engine)."""
        return getattr(self, "_bm25", None)

    def __len__(self) -> int:
        return len(self.passages)

    def _query_ids(self, query: str) -> list[int]:
        return [self._vocab[w] for w in tokenize(query) if w in self._vocab]

    def cache_key(self, query: str) -> tuple[Any, ...]:
        """The query's terms as the engine scores them: bm25s term ids (unknown words dropped)
        or rank-bm25 tokens, in query order (sorted for two terms).

        Example:
            >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome.")]
            >>> r = BM25Retriever(docs)
            >>> r.cache_key("Oslo, the city?") == r.cache_key("city OSLO zzz")
            True
        """
        if self.engine == "rank_bm25":
            return _canonical(tokenize(query))
        return _canonical(self._query_ids(query))

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query`` (a dense array, for tests and fusion)."""
        if self.engine == "rank_bm25":
            return self._dense_scores(tokenize(query))
        return self._dense_scores(self._query_ids(query))

    def _dense_scores(self, terms: Sequence[Any]) -> np.ndarray:
        if self.engine == "rank_bm25":
            return np.asarray(self._okapi.get_scores(list(terms)), dtype=np.float64)
        if not terms:
            return np.zeros(len(self.passages))
        return np.asarray(self._bm25.get_scores([int(t) for t in terms]), dtype=np.float64)

    def _sparse(self) -> SparseTopK:
        topk = self.__dict__.get("_topk")
        if topk is None:
            topk = self._topk = SparseTopK(self._bm25)
        return topk

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        """Top ``k`` hits with scores for each query (uncached; each distinct query once).

        ``sparse`` answers a batch query by query, sharing the per-term work (impact orders,
        column checks); a gather vectorised over the batch's queries measured 1.5x slower or more
        per query at 100k passages, as most terms of a batch are distinct names. ``numba`` sends
        the batch to bm25s in one call.
        """
        return self._search_keyed(queries, [self.cache_key(q) for q in queries], k)

    def _search_keyed(self, queries: Sequence[str], keys: Sequence[Hashable], k: int
                      ) -> list[list[SearchHit]]:
        if k <= 0:
            return [[] for _ in keys]
        pending = list(dict.fromkeys(keys))
        if self.backend == "numba":
            found = self._numba_top_k(pending, k)  # type: ignore[arg-type]
        else:
            found = {key: self._top_k(list(key), k) for key in pending}  # type: ignore[call-overload]
        out: list[list[SearchHit]] = []
        given: set[Hashable] = set()
        for key in keys:  # a repeated query gets its own list
            out.append(found[key] if key not in given else list(found[key]))
            given.add(key)
        return out

    def _top_k(self, terms: list[Any], k: int) -> list[SearchHit]:
        if not terms:
            return []
        got = None
        if self.backend == "sparse" and len(self.passages) >= self.sparse_min_passages:
            got = self._sparse().top_k(terms, k)
        if got is None:  # the reference path (also for what SparseTopK cannot prove)
            scores = self._dense_scores(terms)
            pick = top_k_indices(scores, k)
            got = pick, scores[pick]
        return [SearchHit(self.passages[i], s)
                for i, s in zip(got[0].tolist(), got[1].tolist(), strict=True)]

    def _numba_top_k(self, keys: Sequence[tuple[int, ...]], k: int
                     ) -> dict[Hashable, list[SearchHit]]:
        """bm25s' compiled top-k for every query in one call."""
        out: dict[Hashable, list[SearchHit]] = {key: [] for key in keys}
        asked = [key for key in keys if key]
        if not asked:
            return out
        # Ask for a few more than k so that ties at the cut-off break by corpus position.
        kk = min(len(self.passages), k + 8)
        docs, scores = self._bm25.retrieve([list(key) for key in asked], k=kk,
                                           show_progress=False, n_threads=1)
        for key, d, s in zip(asked, docs, scores, strict=True):
            order = np.lexsort((d, -np.round(s, 5)))[:k]
            out[key] = [SearchHit(self.passages[d[i]], float(s[i])) for i in order if s[i] > 0]
        return out
