"""Plain data types shared by every corpus, retriever, environment and agent.

Classes: :class:`Passage`, :class:`Hop`, :class:`QASample`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hopgym.errors import InvalidOptionError

__all__ = ["Passage", "Hop", "QASample"]


@dataclass(frozen=True, slots=True)
class Passage:
    """One retrievable document.

    Example:
        >>> p = Passage("d1", "Qelvor Dynamics", "Qelvor Dynamics is a company.")
        >>> p.contents
        'Qelvor Dynamics\\nQelvor Dynamics is a company.'
    """

    doc_id: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        """The FlashRAG / Search-R1 layout: ``title`` and ``text`` joined by a newline."""
        return f"{self.title}\n{self.text}"


@dataclass(frozen=True, slots=True)
class Hop:
    """One step of a gold decomposition.

    Attributes:
        question: the sub-question, in words.
        answer: its intermediate (or, for the last hop, final) answer.
        doc_id: the passage that states the answer (``""`` when unknown).
        query: a search query that retrieves ``doc_id`` (defaults to the sub-question).
        source: the source whose index holds ``doc_id`` (``None``: any / the default one).
    """

    question: str
    answer: str
    doc_id: str = ""
    query: str = ""
    source: str | None = None

    @property
    def search_query(self) -> str:
        """The query an oracle issues for this hop."""
        return self.query or self.question


@dataclass(frozen=True, slots=True)
class QASample:
    """A multi-hop question with its gold answer, support and decomposition.

    Attributes:
        id: unique id within its dataset.
        question: the question shown to the agent.
        answers: accepted answers; the first is canonical, the rest are aliases.
        supporting_ids: doc ids of the passages needed to answer.
        hops: number of reasoning hops.
        kind: ``bridge``, ``comparison``, ``compositional``, ``inference``, ``bridge_comparison``, ...
        decomposition: gold sub-questions in order (may be empty for datasets without one).
        metadata: anything else a loader keeps (dataset type, level, ...).

    Example:
        >>> s = QASample("q1", "Who founded X?", ("Ann Lee", "A. Lee"), ("d1",), 1, "bridge")
        >>> s.answer
        'Ann Lee'
    """

    id: str
    question: str
    answers: tuple[str, ...]
    supporting_ids: tuple[str, ...] = ()
    hops: int = 1
    kind: str = "bridge"
    decomposition: tuple[Hop, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.answers:
            raise InvalidOptionError(f"QASample {self.id!r} has no answers")

    @property
    def answer(self) -> str:
        """The canonical answer."""
        return self.answers[0]
