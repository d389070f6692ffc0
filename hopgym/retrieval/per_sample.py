"""Per-question search for distractor mode: :class:`PerSampleIndex`, one small index per question."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from hopgym.corpora.types import Passage, QASample
from hopgym.errors import InvalidOptionError
from hopgym.retrieval.base import Retriever
from hopgym.retrieval.specs import RetrieverBuilder

__all__ = ["PerSampleIndex"]


class PerSampleIndex:
    """A ``retriever_factory`` for distractor mode: one small index per question.

    Each question's index is built the first time it is asked for and kept in an LRU cache, so
    an episode's searches and later episodes of the same question reuse it.

    Args:
        by_sample: each question's passages, by question id (:attr:`QADataset.by_sample`).
        build: ``passages -> Retriever``; BM25 (bm25s) by default (a
            :class:`~hopgym.retrieval.specs.RetrieverBuilder`). Must pickle for vector envs.
        maxsize: questions kept in the cache.

    Example:
        >>> ps = (Passage("q:A", "A", "Alpha is red."), Passage("q:B", "B", "Beta is blue."))
        >>> factory = PerSampleIndex({"q": ps})
        >>> [p.doc_id for p in factory(QASample("q", "Beta?", ("blue",))).search("beta", 1)]
        ['q:B']
    """

    def __init__(
        self,
        by_sample: Mapping[str, Sequence[Passage]],
        build: Callable[[Sequence[Passage]], Retriever] | None = None,
        maxsize: int = 4096,
    ) -> None:
        if maxsize < 1:
            raise InvalidOptionError(f"maxsize must be at least 1, got {maxsize}")
        self.by_sample = by_sample
        self.build = build if build is not None else RetrieverBuilder()
        self.maxsize = maxsize
        self._cache: OrderedDict[str, Retriever] = OrderedDict()

    def __call__(self, sample: QASample) -> Retriever:
        r = self._cache.get(sample.id)
        if r is not None:
            self._cache.move_to_end(sample.id)
            return r
        try:
            passages = self.by_sample[sample.id]
        except KeyError:
            raise KeyError(f"no paragraphs for question {sample.id!r} (distractor mode)") from None
        r = _EmptyRetriever() if not passages else self.build(passages)
        self._cache[sample.id] = r
        if len(self._cache) > self.maxsize:
            self._cache.popitem(last=False)
        return r

    def __getstate__(self) -> dict[str, Any]:
        return {"by_sample": self.by_sample, "build": self.build, "maxsize": self.maxsize}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["by_sample"], state["build"], state["maxsize"])  # type: ignore[misc]


class _EmptyRetriever:
    """A question with no paragraphs finds nothing."""

    def search(self, query: str, k: int) -> list[Passage]:
        return []

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [[] for _ in queries]
