"""A per-retriever LRU cache of ranked search results: :class:`QueryCache`, :class:`CacheInfo`.

In GRPO the rollouts of one question mostly issue the same queries, and a vector env's
sub-envs often search the same thing in one step. An in-process retriever keeps the ranked
results of its recent queries and answers a repeated query from them. It holds ranked results
only: what an episode has already seen (the env's de-duplication) is applied by the env after
the search, per episode.

**Keys.** A retriever decides what makes two queries the same (its ``cache_key``): exactly what
determines its result, and nothing coarser, so a cached answer is always the one a new search
would give.

- BM25: the query's term ids after hopgym's tokenizer (:func:`~hopgym.retrieval.base.tokenize`:
  lower case, punctuation and stopwords dropped) and the index's vocabulary (unknown words
  dropped), in query order. Order is kept because a score is a float sum taken in query order,
  and a different order can move a score by one unit in the last place and flip a near-tie; a
  query of one or two known terms is keyed by their sorted ids, since ``0 + a + b == 0 + b + a``
  in floating point. So "Oslo, capital?" and "the capital of OSLO" share an entry when they
  tokenize to the same two terms.
- Dense: the exact query string. The encoder sees every character (its tokenizer, casing,
  punctuation), so no normalisation is safe for every embedder.
- Hybrid: the keys of its parts together.
- HTTP: the exact query string (off by default: a remote index may change under the cache).

**k.** Where a retriever's ranking is a fixed total order cut at ``k`` (BM25: score, then corpus
position), the top ``k`` is a prefix of any longer top list, so one entry per query holds the
longest list asked for and answers every shorter ``k`` from its prefix; a list shorter than the
``k`` it was asked for holds every match and answers any ``k``. The env asks for ``top_k`` plus the
number of documents the episode has seen (with de-duplication on), so the same query asked later
in an episode hits the entry of its first asking when the list is long enough, and replaces it
with the longer list otherwise. Retrievers whose top ``k`` is not such a prefix (dense, hybrid,
HTTP: FAISS' approximate indexes and the tie-breaking of float scores depend on ``k``) key their
entries by ``(query, k)``.

**Bounds.** At most ``max_entries`` entries and about ``max_bytes`` bytes (the estimate counts
the key, the result list and its hits; the passages' text only when the hits do not share the
retriever's own passage objects, as an HTTP retriever's do not); the least recently used entries
go first. ``0`` for either turns the cache off.

A cache is thread-safe (one lock around its table; searches run outside it, so two threads may
both compute a missing entry, with the same result). It pickles as its settings, empty.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

from hopgym.errors import InvalidOptionError

__all__ = ["QueryCache", "CacheInfo", "DEFAULT_CACHE_ENTRIES", "DEFAULT_CACHE_BYTES", "check_cache_bounds"]

#: Entries an in-process retriever's cache holds by default.
DEFAULT_CACHE_ENTRIES = 4096
#: Bytes (estimated) an in-process retriever's cache holds by default.
DEFAULT_CACHE_BYTES = 32 << 20

# Per entry: the table's slot and node, the stored tuple and the result list (CPython, 64-bit).
_ENTRY_OVERHEAD = 200
# Per hit: a SearchHit (two slots), its float score and a list slot.
_HIT_BYTES = sys.getsizeof(object()) + 16 + sys.getsizeof(1.0) + 8


class CacheInfo(NamedTuple):
    """Counters of a :class:`QueryCache`, as ``functools.lru_cache``'s ``cache_info()``.

    Attributes:
        hits: searches answered from the cache.
        misses: searches that ran (the cache was off, the query new, or its entry too short).
        entries: entries held now.
        bytes: estimated bytes held now.
        max_entries: the entry bound (0: off).
        max_bytes: the byte bound (0: off).
    """

    hits: int = 0
    misses: int = 0
    entries: int = 0
    bytes: int = 0
    max_entries: int = 0
    max_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        """``hits / (hits + misses)``, 0.0 before any search."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


def check_cache_bounds(max_entries: Any, max_bytes: Any) -> tuple[int, int]:
    """The two bounds as ints; ``ValueError`` naming the one that is not an int >= 0."""
    for name, value in (("cache_entries", max_entries), ("cache_bytes", max_bytes)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidOptionError(f"{name} must be an int >= 0 (0 turns the cache off), got {value!r}")
    return int(max_entries), int(max_bytes)


def _key_bytes(key: Any) -> int:
    size = sys.getsizeof(key)
    if isinstance(key, tuple):
        size += sum(_key_bytes(part) for part in key)
    return size


class QueryCache:
    """An LRU of ranked results, bounded in entries and estimated bytes.

    Args:
        max_entries: the most entries held (0: off).
        max_bytes: the most estimated bytes held (0: off).
        prefix_exact: the retriever's top ``k`` is a prefix of its top ``k + 1`` (see the module
            docstring); entries then serve every ``k`` up to the longest list stored.
        shared_passages: the hits reference the retriever's own passages (their text is not
            counted).

    Example:
        >>> cache = QueryCache(2, 1 << 20, prefix_exact=True)
        >>> cache.put(("oslo",), 5, ["a", "b"])      # a complete list: two matches for k=5
        >>> cache.get(("oslo",), 1), cache.get(("oslo",), 9), cache.get(("rome",), 1)
        (['a'], ['a', 'b'], None)
        >>> info = cache.info()
        >>> info.hits, info.misses, info.entries, round(info.hit_rate, 2)
        (2, 1, 1, 0.67)
    """

    def __init__(
        self,
        max_entries: int = DEFAULT_CACHE_ENTRIES,
        max_bytes: int = DEFAULT_CACHE_BYTES,
        *,
        prefix_exact: bool = False,
        shared_passages: bool = True,
    ) -> None:
        self.max_entries, self.max_bytes = check_cache_bounds(max_entries, max_bytes)
        self.prefix_exact = bool(prefix_exact)
        self.shared_passages = bool(shared_passages)
        self._setup()

    def _setup(self) -> None:
        # key -> (k asked, hits, estimated bytes)
        self._table: OrderedDict[Hashable, tuple[int, list[Any], int]] = OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether the cache holds anything at all (both bounds > 0)."""
        return self.max_entries > 0 and self.max_bytes > 0

    def __getstate__(self) -> dict[str, Any]:
        return {
            "max_entries": self.max_entries,
            "max_bytes": self.max_bytes,
            "prefix_exact": self.prefix_exact,
            "shared_passages": self.shared_passages,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return (
            f"QueryCache(max_entries={self.max_entries}, max_bytes={self.max_bytes}, "
            f"prefix_exact={self.prefix_exact})"
        )

    def _slot(self, key: Hashable, k: int) -> Hashable:
        return key if self.prefix_exact else (key, k)

    def lookup(self, key: Hashable, k: int) -> list[Any] | None:
        """The top ``k`` for ``key`` when an entry answers it, else ``None`` (counts nothing)."""
        if not self.enabled:
            return None
        slot = self._slot(key, k)
        with self._lock:
            entry = self._table.get(slot)
            if entry is None:
                return None
            asked, hits, _ = entry
            if k > asked and len(hits) >= asked:
                return None  # shorter than asked for now, and not known to be complete
            self._table.move_to_end(slot)
        return hits[:k]

    def record(self, hits: int = 0, misses: int = 0) -> None:
        """Count searches answered without running (``hits``) and searches that ran."""
        with self._lock:
            self.hits += hits
            self.misses += misses

    def get(self, key: Hashable, k: int) -> list[Any] | None:
        """:meth:`lookup`, counted as a hit or a miss."""
        got = self.lookup(key, k)
        self.record(hits=got is not None, misses=got is None)
        return got

    def put(self, key: Hashable, k: int, hits: Sequence[Any]) -> None:
        """Store the top ``k`` for ``key`` (kept when it is the longest list asked for)."""
        if not self.enabled:
            return
        slot = self._slot(key, k)
        hits = list(hits)
        size = _ENTRY_OVERHEAD + _key_bytes(slot) + len(hits) * _HIT_BYTES
        if not self.shared_passages:
            size += sum(_passage_bytes(h) for h in hits)
        if size > self.max_bytes:
            return
        with self._lock:
            old = self._table.get(slot)
            if old is not None:
                if old[0] >= k:
                    return
                self._bytes -= old[2]
                del self._table[slot]
            self._table[slot] = (k, hits, size)
            self._bytes += size
            while len(self._table) > self.max_entries or self._bytes > self.max_bytes:
                _, (_, _, freed) = self._table.popitem(last=False)
                self._bytes -= freed

    def clear(self) -> None:
        """Drop every entry and reset the counters."""
        with self._lock:
            self._table.clear()
            self._bytes = 0
            self.hits = self.misses = 0

    def info(self) -> CacheInfo:
        """The counters and sizes now."""
        with self._lock:
            return CacheInfo(
                self.hits, self.misses, len(self._table), self._bytes, self.max_entries, self.max_bytes
            )


def _passage_bytes(hit: Any) -> int:
    p = getattr(hit, "passage", hit)
    return sum(sys.getsizeof(getattr(p, name, "")) for name in ("doc_id", "title", "text")) + 64
