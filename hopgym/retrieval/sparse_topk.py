"""Exact BM25 top-k that reads only the postings a query needs: :class:`SparseTopK`.

bm25s stores BM25 as a precomputed score matrix in compressed sparse column form
(``BM25.scores``: for term ``t``, ``indices[indptr[t]:indptr[t+1]]`` are the passages that contain
it, in corpus order, and ``data[...]`` their float32 scores for ``t``). Its ``get_scores`` adds
the columns of the query's terms into a dense float32 array of every passage, in query order
(``np.add.at``), and hopgym then selects the top ``k`` of that array (:func:`top_k_indices`:
best score first, ties by corpus position, zero scores left out). At 100k passages that costs
about a millisecond a query, mostly in passing over every passage.

:class:`SparseTopK` returns the same passages, in the same order, with the same scores, without
building the dense array:

1. **Candidates.** The query's terms are taken rarest first. A rare term's whole column joins
   the candidate set. A common term (more than ``full_df`` passages) is read in impact order
   (its passages sorted by their score for that term, computed once per term and kept), and
   only its first ``depth`` passages join.
2. **Exact scores of the candidates.** Each candidate's score is rebuilt as bm25s builds it: a
   float32 sum, starting from 0, of the query terms' scores taken in query order (a repeated
   term adds twice; a term absent from the passage adds 0.0, which changes no float). Float
   addition is deterministic, so a candidate's score is bit-for-bit the one in bm25s' dense
   array.
3. **A proof that nothing was missed.** A passage outside the candidates contains no rare term,
   and for each common term its score is at most the score at position ``depth`` of that term's
   impact order (or the column's maximum when ``depth`` is 0). Their sum, times the multiplicity
   of each term, bounds its exact real sum; the float32 sum of ``m`` positive terms exceeds the
   real sum by a factor of at most ``(1 + 2**-24) ** m``, which ``1 + (m + 1) * 2**-23``
   covers. When the ``k``-th best candidate's score is strictly greater than that bound, no
   other passage can reach the top ``k`` or tie with it (a tie would break by corpus
   position), so the top ``k`` of the candidates is the top ``k`` of the corpus. Otherwise the
   next term is expanded or the depth grows, until the bound holds or every posting of the
   query is a candidate.
4. The candidates' top ``k`` is taken by :func:`top_k_indices` over the candidate array, which
   is in corpus order, so its ties by array position are ties by corpus position.

A query whose terms are all rare (an entity's name) is answered from a few hundred postings.
The result of step 4 is the same total order (score, then position) cut at ``k``, so the top
``k`` is a prefix of the top ``k + 1``, which the query cache relies on.

Anything this module cannot prove exact falls back to the dense path: a column whose passages
are not in strictly increasing order (an index built elsewhere) or a BM25 variant with a
non-occurrence score (BM25L, BM25+: every passage scores, so there is nothing to skip). The
callers (:class:`~hopgym.retrieval.sparse.BM25Retriever`) check :attr:`SparseTopK.supported`.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["SparseTopK"]

# The float32 sum of m positive terms is at most (1 + 2**-24)**m times their real sum; this
# factor per term (twice that) covers it for any query length hopgym accepts.
_F32_MARGIN = 2.0**-23
# Candidate sets up to this size are ranked with one stable sort, larger ones by partition.
_SMALL = 512


def _union(parts: Sequence[np.ndarray]) -> np.ndarray:
    """The sorted distinct values of the arrays (``np.union1d`` of many, without its overhead)."""
    out = np.concatenate(parts)
    out.sort()
    if len(out) > 1:
        keep = np.empty(len(out), dtype=bool)
        keep[0] = True
        np.not_equal(out[1:], out[:-1], out=keep[1:])
        out = out[keep]
    return out


def _beats(kth: float, bound: float, n_terms: int) -> bool:
    """Whether a candidate scoring ``kth`` beats every passage whose terms' score bounds sum
    to ``bound`` (``n_terms`` float32 additions of slack)."""
    return kth > bound * (1.0 + (n_terms + 1) * _F32_MARGIN)


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


class SparseTopK:
    """Exact top-k over a bm25s score matrix, reading only the postings a query needs.

    See the module docstring for the algorithm and why it returns exactly what bm25s' dense
    scores with :func:`top_k_indices` return.

    Args:
        model: a built or loaded (also memory-mapped) ``bm25s.BM25``.
        full_df: terms in at most this many passages are read whole; more common terms are read
            in impact order.
        depth: the first impact-order depth for common terms (at least ``4 * k``); it grows
            fourfold until the bound holds.
        impact_bytes: memory for the impact orders of common terms (8 bytes a posting), least
            recently used first out.

    Thread-safe: searches share only the impact orders, kept under a lock.

    Example:
        >>> import bm25s
        >>> m = bm25s.BM25()
        >>> m.index([[0, 1], [1, 2], [1]], show_progress=False)
        >>> docs, scores = SparseTopK(m).top_k([1, 2], 2)
        >>> docs.tolist()
        [1, 2]
    """

    def __init__(
        self, model: Any, *, full_df: int = 1024, depth: int = 64, impact_bytes: int = 256 << 20
    ) -> None:
        scores = model.scores
        self.data: np.ndarray = scores["data"]
        self.indices: np.ndarray = scores["indices"]
        self.indptr: np.ndarray = np.asarray(scores["indptr"], dtype=np.int64)
        self.num_docs = int(scores["num_docs"])
        self.full_df = int(full_df)
        self.depth = int(depth)
        self.impact_bytes = int(impact_bytes)
        #: False for BM25 variants that score passages without any query term (BM25L, BM25+).
        self.supported = getattr(model, "nonoccurrence_array", None) is None
        n_terms = len(self.indptr) - 1
        # Per term: 0 not yet checked, 1 passages in strictly increasing order, 2 not.
        self._checked = np.zeros(n_terms, dtype=np.uint8)
        self._max: dict[int, float] = {}
        self._impact: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._impact_used = 0
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ per-term data
    def _column(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        s, e = self.indptr[t : t + 2].tolist()
        return self.indices[s:e], self.data[s:e]

    def _df(self, t: int) -> int:
        s, e = self.indptr[t : t + 2].tolist()
        return e - s

    def _sorted(self, t: int) -> bool:
        state = self._checked[t]
        if state == 0:
            docs = self._column(t)[0]
            ok = len(docs) < 2 or bool(np.all(docs[1:] > docs[:-1]))
            state = self._checked[t] = 1 if ok else 2
        return state == 1

    def _col_max(self, t: int) -> float:
        got = self._max.get(t)
        if got is None:
            vals = self._column(t)[1]
            got = self._max[t] = float(vals.max()) if len(vals) else 0.0
        return got

    def _impact_order(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """The passages of term ``t`` by descending score (ties by position), and the scores."""
        with self._lock:
            got = self._impact.get(t)
            if got is not None:
                self._impact.move_to_end(t)
                return got
        docs, vals = self._column(t)
        order = np.argsort(-vals, kind="stable")
        got = (np.ascontiguousarray(docs[order]), np.ascontiguousarray(vals[order]))
        size = got[0].nbytes + got[1].nbytes
        with self._lock:
            if t not in self._impact:
                self._impact[t] = got
                self._impact_used += size
                while self._impact_used > self.impact_bytes and len(self._impact) > 1:
                    _, (d, v) = self._impact.popitem(last=False)
                    self._impact_used -= d.nbytes + v.nbytes
        return got

    # ------------------------------------------------------------------ scoring
    def _exact(self, terms: Sequence[int], cand: np.ndarray, inside: set[int]) -> np.ndarray:
        """bm25s' float32 score of each candidate (sorted passage indices), as float64.

        ``inside``: terms whose every passage is a candidate.
        """
        n = len(cand)
        contrib: dict[int, np.ndarray] = {}
        acc: np.ndarray | None = None
        for t in terms:
            c = contrib.get(t)
            if c is None:
                docs, vals = self._column(t)
                if t in inside:  # place the column's passages among the candidates
                    c = np.zeros(n, dtype=np.float32)
                    c[np.searchsorted(cand, docs)] = vals
                elif len(docs) <= n:  # the same, for the passages that are candidates
                    c = np.zeros(n, dtype=np.float32)
                    pos = np.searchsorted(cand, docs)
                    match = cand.take(pos, mode="clip") == docs
                    c[pos[match]] = vals[match]
                else:  # look the candidates up in the column
                    pos = np.searchsorted(docs, cand)
                    match = docs.take(pos, mode="clip") == cand
                    c = np.where(match, vals.take(pos, mode="clip"), np.float32(0))
                contrib[t] = c
            # bm25s starts from float32 zeros and adds each query term in turn: 0 + x == x.
            acc = c if acc is None else acc + c
        assert acc is not None
        return acc.astype(np.float64)

    @staticmethod
    def _proved(scores: np.ndarray, k: int, bound: float, n_terms: int) -> bool:
        """Whether no passage outside the candidates can enter (or tie into) the top ``k``."""
        if bound <= 0.0:
            return True
        if len(scores) < k:
            return False
        kth = -np.partition(-scores, k - 1)[k - 1]
        return _beats(float(kth), bound, n_terms)

    @classmethod
    def _top_if_proved(
        cls, cand: np.ndarray, scores: np.ndarray, k: int, bound: float, n_terms: int
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The candidates' top ``k`` when it is the corpus' top ``k`` (see :meth:`_proved`)."""
        if len(scores) <= _SMALL:  # one stable sort: ties keep corpus order
            pick = np.argsort(-scores, kind="stable")[:k]
            if bound > 0.0 and (len(pick) < k or not _beats(float(scores[pick[-1]]), bound, n_terms)):
                return None
            pick = pick[scores[pick] > 0]
        elif cls._proved(scores, k, bound, n_terms):
            pick = top_k_indices(scores, k)
        else:
            return None
        return cand[pick].astype(np.int64), scores[pick]

    def top_k(self, terms: Sequence[int], k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The ``k`` best passages for a query of term ids, in query order.

        Returns:
            ``(indices, scores)``: passage indices (int64) best first and their scores
            (float64 of bm25s' float32), or ``None`` when this query cannot be answered here
            (see the module docstring); the caller then scores densely.
        """
        if not self.supported:
            return None
        terms = [int(t) for t in terms]
        if k <= 0 or not terms:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        mult: dict[int, int] = {}
        for t in terms:
            mult[t] = mult.get(t, 0) + 1
        if not all(self._sorted(t) for t in mult):
            return None
        df = {t: self._df(t) for t in mult}
        order = sorted(mult, key=lambda t: (df[t], t))
        m = len(terms)
        # Step 1: expand rare terms, rarest first, until the rest cannot matter.
        cand = np.zeros(0, dtype=self.indices.dtype)
        i = 0
        while i < len(order) and df[order[i]] <= self.full_df:
            docs = self._column(order[i])[0]
            cand = docs if i == 0 else _union([cand, docs])
            i += 1
            if len(cand) < k and i < len(order):
                continue  # too few candidates to prove anything yet
            scores = self._exact(terms, cand, set(order[:i]))
            rest = sum(self._col_max(t) * mult[t] for t in order[i:])
            got = self._top_if_proved(cand, scores, k, rest, m)
            if got is not None:
                return got
        # Step 2: the remaining (common) terms in impact order, deeper until proved.
        common, expanded = order[i:], set(order[:i])
        depth = max(self.depth, 4 * k)
        while True:
            parts = [cand]
            bound = 0.0
            for t in common:
                docs, vals = self._impact_order(t)
                parts.append(docs[:depth])
                if depth < len(docs):
                    bound += float(vals[depth]) * mult[t]
            pool = _union(parts)
            scores = self._exact(terms, pool, expanded)
            got = self._top_if_proved(pool, scores, k, bound, m)
            if got is not None:
                return got
            depth *= 4
