"""HotpotQA records: ``context`` paragraphs, ``supporting_facts`` by title, one hop per
supporting paragraph (its title as the query). 2WikiMultihopQA shares the layout
(:mod:`hopgym.corpora.datasets.twowiki` reads it with :func:`read_context_record`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hopgym.corpora.datasets.base import (
    DatasetFormat,
    RawHop,
    RawSample,
    add_paragraph,
    get_answers,
    get_field,
    get_id,
    join_sentences,
)
from hopgym.corpora.datasets.errors import DatasetFormatError

__all__ = ["FORMAT", "parse", "detect", "read_context_record", "title_hops"]


def _pairs_context(ctx: Any, where: str, line: int) -> list[tuple[str, list[str]]]:
    """``context``: ``[[title, [sentences]]]`` or the hub's column dict."""
    if isinstance(ctx, dict):
        titles, sents = ctx.get("title"), ctx.get("sentences")
        if not isinstance(titles, list) or not isinstance(sents, list) or len(titles) != len(sents):
            raise DatasetFormatError(
                where, line, "context", "expected {'title': [...], 'sentences': [[...]]}"
            )
        ctx = [[t, s] for t, s in zip(titles, sents, strict=False)]
    if not isinstance(ctx, list):
        raise DatasetFormatError(where, line, "context", f"expected a list, got {type(ctx).__name__}")
    out = []
    for i, item in enumerate(ctx):
        if (
            not isinstance(item, (list, tuple))
            or len(item) != 2
            or not isinstance(item[0], str)
            or not isinstance(item[1], (list, tuple))
        ):
            raise DatasetFormatError(where, line, f"context[{i}]", "expected [title, [sentences]]")
        if not all(isinstance(s, str) for s in item[1]):
            raise DatasetFormatError(where, line, f"context[{i}][1]", "sentences must be strings")
        out.append((item[0], list(item[1])))
    return out


def _pairs_facts(facts: Any, where: str, line: int) -> list[tuple[str, int]]:
    """``supporting_facts``: ``[[title, sent_id]]`` or the hub's column dict."""
    if isinstance(facts, dict):
        titles, ids = facts.get("title"), facts.get("sent_id")
        if not isinstance(titles, list) or not isinstance(ids, list) or len(titles) != len(ids):
            raise DatasetFormatError(
                where, line, "supporting_facts", "expected {'title': [...], 'sent_id': [...]}"
            )
        facts = [[t, s] for t, s in zip(titles, ids, strict=False)]
    if not isinstance(facts, list):
        raise DatasetFormatError(where, line, "supporting_facts", "expected a list")
    out = []
    for i, f in enumerate(facts):
        if (
            not isinstance(f, (list, tuple))
            or len(f) != 2
            or not isinstance(f[0], str)
            or not isinstance(f[1], int)
            or isinstance(f[1], bool)
        ):
            raise DatasetFormatError(
                where, line, f"supporting_facts[{i}]", "expected [title, sentence index]"
            )
        out.append((f[0], f[1]))
    return out


def title_hops(raw_titles: list[str], title_index: dict[str, int], answer: str) -> list[RawHop]:
    """One hop per supporting paragraph, the title as the query; the last carries the answer."""
    hops = []
    for j, t in enumerate(raw_titles):
        last = j == len(raw_titles) - 1
        hops.append((f"What does the article on {t} say?", answer if last else "", title_index.get(t), t))
    return hops


@dataclass
class ContextRecord:
    """A HotpotQA-layout record read up to its hops (which the two formats make differently)."""

    raw: RawSample
    title_index: dict[str, int]  # title -> its first paragraph
    sup_titles: list[str]  # supporting titles, in order of first mention


def read_context_record(rec: Any, where: str, line: int) -> ContextRecord:
    """Question, answer, paragraphs, supporting titles and metadata of a HotpotQA-layout record."""
    qid = get_id(rec, ("_id", "id"), where, line)
    question = get_field(rec, "question", where, line, str).strip()
    if not question:
        raise DatasetFormatError(where, line, "question", "empty question")
    answer = get_field(rec, "answer", where, line, (str, int, float))
    answers = get_answers(str(answer), None, where, line, "answer")
    ctx = _pairs_context(get_field(rec, "context", where, line, (list, dict)), where, line)
    facts = _pairs_facts(get_field(rec, "supporting_facts", where, line, (list, dict)), where, line)
    paragraphs: list[tuple[str, str]] = []
    pindex: dict[tuple[str, str], int] = {}
    title_index: dict[str, int] = {}
    for title, sents in ctx:
        i = add_paragraph(paragraphs, pindex, title, join_sentences(sents))
        title_index.setdefault(title, i)
    sup_titles: list[str] = []
    for t, _ in facts:
        if t not in sup_titles:
            sup_titles.append(t)
    missing = [t for t in sup_titles if t not in title_index]
    support = [title_index[t] for t in sup_titles if t in title_index]
    kind = str(rec.get("type") or "bridge")
    meta: dict[str, Any] = {"type": kind, "supporting_facts": facts, "supporting_titles": sup_titles}
    if missing:
        meta["missing_support"] = missing
    if rec.get("level") is not None:
        meta["level"] = rec["level"]
    raw = RawSample(qid, question, answers, paragraphs, support, [], kind, 2, meta)
    return ContextRecord(raw, title_index, sup_titles)


def parse(rec: Any, where: str, line: int) -> RawSample:
    """A HotpotQA record (``hotpot_dev_distractor_v1.json``, its jsonl, or a hub row)."""
    c = read_context_record(rec, where, line)
    c.raw.hops = title_hops(c.sup_titles, c.title_index, c.raw.answers[0])
    c.raw.n_hops = len(c.raw.hops) or 2
    return c.raw


def detect(rec: dict[str, Any]) -> bool:
    """A HotpotQA-layout record: ``context`` and ``supporting_facts``."""
    return "context" in rec and "supporting_facts" in rec


FORMAT = DatasetFormat(
    "hotpotqa",
    parse,
    detect,
    default_hub_name="hotpotqa/hotpot_qa",
    hub_config="distractor",
    download_hint="hotpot_dev_distractor_v1.json from http://curtis.ml.cmu.edu/datasets/hotpot/",
)
