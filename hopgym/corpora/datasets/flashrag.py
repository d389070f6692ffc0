"""FlashRAG QA records: ``{id, question, golden_answers}``, questions and answers only
(Bamboogle and the other FlashRAG_datasets). Search comes from ``corpus=`` (e.g. wiki-18), a saved
index or a retrieval server."""

from __future__ import annotations

import functools
from typing import Any

from hopgym.corpora.datasets.base import DatasetFormat, RawSample, get_answers, get_field, get_id
from hopgym.corpora.datasets.errors import DatasetFormatError

__all__ = ["FORMAT", "BAMBOOGLE", "parse", "detect"]

_HUB = "the RUC-NLPIR/FlashRAG_datasets repository"


def parse(rec: Any, where: str, line: int, kind: str = "unknown", hops: int = 1) -> RawSample:
    """A FlashRAG QA record; ``kind`` and ``hops`` for records that do not say (no ``type``)."""
    qid = get_id(rec, ("id", "_id", "qid"), where, line)
    question = get_field(rec, ("question", "query"), where, line, str).strip()
    if not question:
        raise DatasetFormatError(where, line, "question", "empty question")
    golds = get_field(rec, ("golden_answers", "answers", "answer"), where, line, (list, str, int, float))
    answers = get_answers(
        golds if isinstance(golds, (list, str)) else str(golds), None, where, line, "golden_answers"
    )
    meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
    return RawSample(qid, question, answers, [], [], [], str(rec.get("type", kind)), hops, dict(meta))


def detect(rec: dict[str, Any]) -> bool:
    """Any record with a ``question`` (tried after the formats that carry paragraphs)."""
    return "question" in rec


FORMAT = DatasetFormat(
    "flashrag",
    parse,
    detect,
    has_paragraphs=False,
    hub_split="test",
    options=("kind", "hops"),
    download_hint=f"a FlashRAG-format QA jsonl ({{id, question, golden_answers}}) from {_HUB}",
)

BAMBOOGLE = DatasetFormat(
    "bamboogle",
    functools.partial(parse, kind="compositional", hops=2),
    has_paragraphs=False,
    hub_config="bamboogle",
    hub_split="test",
    download_hint=f"bamboogle's test.jsonl from {_HUB}",
)
