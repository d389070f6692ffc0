"""Retrievers: the :class:`Retriever` protocol and in-process BM25.

Classes: :class:`Retriever`, :class:`SearchHit`, :class:`BM25Retriever`, :class:`RetrievalError`,
:class:`DependencyNotInstalled`.

Ranking is deterministic: equal scores break by position in the corpus, and corpora are kept in
the order they were given (the synthetic world orders them by ``doc_id``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

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
]


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
    """Base for retrievers whose one primitive is ``search_batch_scored(queries, k)``: it derives
    ``search_scored``, ``search`` and ``search_batch`` from it (dense, hybrid and HTTP retrievers
    answer a batch in one call, so single queries are a batch of one)."""

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        raise NotImplementedError

    def search_scored(self, query: str, k: int) -> list[SearchHit]:
        """Top ``k`` hits with scores for one query."""
        return self.search_batch_scored([query], k)[0]

    def search(self, query: str, k: int) -> list[Passage]:
        """Top ``k`` passages for ``query``, best first."""
        return [h.passage for h in self.search_scored(query, k)]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top ``k`` passages for each query, in one call."""
        return [[h.passage for h in hits] for hits in self.search_batch_scored(queries, k)]


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


def top_k_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` best positive scores, best first, ties broken by lower index.

    Exact (all ties at the cut-off are considered) and O(n) for a small ``k``.

    Example:
        >>> top_k_indices(np.array([0.5, 2.0, 0.5, 0.0, 2.0]), 3).tolist()
        [1, 4, 0]
    """
    n = len(scores)
    if k <= 0 or n == 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        cut = -np.partition(-scores, k - 1)[k - 1]
        cand = np.flatnonzero(scores >= cut) if cut > 0 else np.flatnonzero(scores > 0)
    else:
        cand = np.flatnonzero(scores > 0)
    order = np.lexsort((cand, -scores[cand]))
    return cand[order[:k]]


class BM25Retriever:
    """BM25 over a list of passages, with bm25s (default) or rank-bm25 as the engine.

    Args:
        passages: the corpus; its order is the tie-break order.
        engine: ``"bm25s"`` (fast, sparse matrices) or ``"rank_bm25"`` (pure Python ``BM25Okapi``).
        backend: for bm25s, ``"numpy"`` (default: bm25s scores every passage, hopgym selects the
            top ``k`` exactly, ties by corpus position) or ``"numba"`` (bm25s' compiled top-k: about
            4x faster per query on large corpora, but its first query in each process spends ~15 s
            compiling, so it pays off only for long runs in one process; needs ``hopgym[fast]``).
        k1: BM25 term-frequency saturation.
        b: BM25 length normalisation.

    Example:
        >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome is old.")]
        >>> [p.doc_id for p in BM25Retriever(docs).search("Rome old", k=1)]
        ['b']
    """

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        engine: str = "bm25s",
        backend: str = "numpy",
        k1: float = 1.5,
        b: float = 0.75,
    ) -> None:
        if engine not in ("bm25s", "rank_bm25"):
            raise ValueError(f"engine must be 'bm25s' or 'rank_bm25', got {engine!r}")
        if backend not in ("numba", "numpy"):
            raise ValueError(f"backend must be 'numpy' or 'numba', got {backend!r}")
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
            self._bm25 = bm25s.BM25(k1=k1, b=b, backend=self.backend)
            self._bm25.index(bm25s.tokenization.Tokenized(ids=ids, vocab=self._vocab),
                             show_progress=False)

    kind = "bm25"

    @classmethod
    def from_bm25s(cls, passages: Sequence[Passage], model: Any, *, k1: float = 1.5,
                   b: float = 0.75) -> BM25Retriever:
        """Wrap an already built (e.g. loaded, memory-mapped) ``bm25s.BM25`` index over
        ``passages``, whose vocabulary came from :func:`tokenize`; nothing is re-indexed."""
        self = cls.__new__(cls)
        self.passages = list(passages)
        self.engine, self.backend, self.k1, self.b = "bm25s", "numpy", k1, b
        model.backend = "numpy"
        self._vocab = dict(model.vocab_dict)
        self._bm25 = model
        return self

    @property
    def bm25s_model(self) -> Any:
        """The underlying ``bm25s.BM25`` index (``None`` for the rank-bm25 engine)."""
        return getattr(self, "_bm25", None)

    def __len__(self) -> int:
        return len(self.passages)

    def _query_ids(self, query: str) -> list[int]:
        return [self._vocab[w] for w in tokenize(query) if w in self._vocab]

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every passage for ``query`` (a dense array, for tests and fusion)."""
        if self.engine == "rank_bm25":
            return np.asarray(self._okapi.get_scores(tokenize(query)), dtype=np.float64)
        ids = self._query_ids(query)
        if not ids:
            return np.zeros(len(self.passages))
        return np.asarray(self._bm25.get_scores(ids), dtype=np.float64)

    def search_scored(self, query: str, k: int) -> list[SearchHit]:
        """Top ``k`` passages with scores; zero-score passages are not returned."""
        if k <= 0:
            return []
        if self.engine == "rank_bm25" or self.backend == "numpy":
            scores = self.scores(query)
            return [SearchHit(self.passages[i], float(scores[i])) for i in top_k_indices(scores, k)]
        ids = self._query_ids(query)
        if not ids:
            return []
        # Ask for a few more than k so that ties at the cut-off break by corpus position.
        kk = min(len(self.passages), k + 8)
        docs, scores = self._bm25.retrieve([ids], k=kk, show_progress=False, n_threads=1)
        docs, scores = docs[0], scores[0]
        order = np.lexsort((docs, -np.round(scores, 5)))[:k]
        return [SearchHit(self.passages[docs[i]], float(scores[i])) for i in order if scores[i] > 0]

    def search(self, query: str, k: int) -> list[Passage]:
        """Top ``k`` passages for ``query``, best first."""
        return [h.passage for h in self.search_scored(query, k)]

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top ``k`` passages for each query."""
        return [self.search(q, k) for q in queries]
