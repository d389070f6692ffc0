"""Knowledge sources and tasks: what an environment searches and what it asks.

Classes: :class:`Source`, :class:`QATask`.

A :class:`QATask` bundles questions with one or more named sources. Each source has a retriever, a
cost (read by ``SearchCostReward``) and a description shown to the agent. A source whose retriever
depends on the question (HotpotQA's distractor mode, where each question searches only its own
paragraphs) overrides :meth:`Source.for_sample`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopgym.corpora.types import Passage, QASample
from hopgym.errors import InvalidOptionError
from hopgym.retrieval.base import Retriever

__all__ = ["Source", "QATask"]


@dataclass
class Source:
    """A named search backend.

    Attributes:
        name: what the agent writes in ``<route>name</route>``.
        retriever: the search backend; or ``None`` with ``retriever_factory`` for per-question ones.
        cost: price of one search here (read by ``SearchCostReward``; the bare env ignores it).
        description: one line shown in the prompt, so the agent knows what the source is good for.
        retriever_factory: ``sample -> Retriever``, for sources whose index depends on the question.
    """

    name: str
    retriever: Retriever | None = None
    cost: float = 0.0
    description: str = ""
    retriever_factory: Callable[[QASample], Retriever] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").replace("-", "").isalnum():
            raise InvalidOptionError(f"source name must be a non-empty identifier, got {self.name!r}")
        if (self.retriever is None) == (self.retriever_factory is None):
            raise InvalidOptionError(
                f"source {self.name!r}: give exactly one of retriever, retriever_factory"
            )

    def for_sample(self, sample: QASample) -> Retriever:
        """The retriever to use while ``sample`` is the current question."""
        if self.retriever_factory is not None:
            return self.retriever_factory(sample)
        assert self.retriever is not None
        return self.retriever


@dataclass
class QATask:
    """Questions plus the sources to answer them from.

    Attributes:
        name: a short name for tables and logs (``synthetic``, ``hotpotqa``, ...).
        samples: the questions; ``reset`` picks one with the env's ``np_random``.
        sources: the sources by name; the first is the default source at the start of an episode.
        documents: optional doc-id lookup for gold passages (oracle checks, relevance rewards).
        recipe: optional ``(function, args)`` that rebuilds this task. When set, pickling stores
            only the recipe, so a vector env's worker rebuilds (or finds in its cache) the task
            instead of receiving the corpus and its indexes through a pipe.
    """

    name: str
    samples: Sequence[QASample]
    sources: Mapping[str, Source]
    documents: Mapping[str, Passage] | None = None
    recipe: tuple[Callable[..., QATask], tuple[Any, ...]] | None = field(
        default=None, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if not self.samples:
            raise InvalidOptionError(f"task {self.name!r} has no questions")
        if not self.sources:
            raise InvalidOptionError(f"task {self.name!r} has no sources")
        for key, src in self.sources.items():
            if key != src.name:
                raise InvalidOptionError(f"source registered as {key!r} is named {src.name!r}")
        ids = [s.id for s in self.samples]
        if len(set(ids)) != len(ids):
            raise InvalidOptionError(f"task {self.name!r} has duplicate question ids")
        self._by_id = {s.id: i for i, s in enumerate(self.samples)}

    def __reduce__(self) -> tuple[Any, ...]:
        if self.recipe is not None:
            return self.recipe
        return (QATask, (self.name, self.samples, self.sources, self.documents))

    @property
    def default_source(self) -> str:
        """The source searched before any ``route`` action."""
        return next(iter(self.sources))

    def index_of(self, question_id: str) -> int:
        """Position of a question by id; ``KeyError`` names the id when it is unknown."""
        try:
            return self._by_id[question_id]
        except KeyError:
            raise KeyError(f"task {self.name!r} has no question with id {question_id!r}") from None
