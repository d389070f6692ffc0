"""MuSiQue records (``musique_ans_v1.0_dev.jsonl``): ``is_supporting`` gold, the
``question_decomposition`` as hops (``#1`` replaced by the first hop's answer), aliases.

Records with ``answerable: false`` (MuSiQue-Full) are left out unless the option
``include_unanswerable`` is set.
"""

from __future__ import annotations

import re
from typing import Any

from hopgym.corpora.datasets.base import (
    DatasetFormat,
    RawHop,
    RawSample,
    add_paragraph,
    get_answers,
    get_field,
    get_id,
)
from hopgym.corpora.datasets.errors import DatasetFormatError

__all__ = ["FORMAT", "parse", "detect"]


def _paragraphs(
    paras: list[Any], where: str, line: int
) -> tuple[list[tuple[str, str]], dict[int, int], list[int]]:
    """Paragraphs, MuSiQue's ``idx`` -> paragraph index, and the supporting ones."""
    paragraphs: list[tuple[str, str]] = []
    pindex: dict[tuple[str, str], int] = {}
    by_idx: dict[int, int] = {}
    support: list[int] = []
    for i, p in enumerate(paras):
        if not isinstance(p, dict):
            raise DatasetFormatError(where, line, f"paragraphs[{i}]", "expected an object")
        title = p.get("title")
        text = p.get("paragraph_text", p.get("text"))
        if not isinstance(title, str):
            raise DatasetFormatError(where, line, f"paragraphs[{i}].title", "missing or not a string")
        if not isinstance(text, str):
            raise DatasetFormatError(
                where, line, f"paragraphs[{i}].paragraph_text", "missing or not a string"
            )
        j = add_paragraph(paragraphs, pindex, title, text.strip())
        idx = p.get("idx", i)
        by_idx[idx if isinstance(idx, int) else i] = j
        if p.get("is_supporting") and j not in support:
            support.append(j)
    return paragraphs, by_idx, support


def _hops(
    decomp: list[Any], paragraphs: list[tuple[str, str]], by_idx: dict[int, int], where: str, line: int
) -> list[RawHop]:
    hops: list[RawHop] = []
    answers_so_far: list[str] = []
    for i, step in enumerate(decomp):
        if not isinstance(step, dict) or not isinstance(step.get("question"), str):
            raise DatasetFormatError(
                where, line, f"question_decomposition[{i}].question", "missing or not a string"
            )
        ans = step.get("answer")
        if not isinstance(ans, str):
            raise DatasetFormatError(
                where, line, f"question_decomposition[{i}].answer", "missing or not a string"
            )

        def fill(m: re.Match[str]) -> str:
            k = int(m.group(1)) - 1
            return answers_so_far[k] if 0 <= k < len(answers_so_far) else m.group(0)

        sub = re.sub(r"#(\d+)", fill, step["question"]).strip()
        sidx = step.get("paragraph_support_idx")
        para = by_idx.get(sidx) if isinstance(sidx, int) else None
        query = re.sub(r"\s*>>\s*", " ", sub)
        if para is not None and paragraphs[para][0].casefold() not in query.casefold():
            # The paragraph's title makes the oracle's query find it (MuSiQue's sub-questions
            # often share no word with their paragraph: "Ernst Mach employer" -> Vinko Dvorak).
            query = f"{paragraphs[para][0]}: {query}"
        hops.append((sub, ans, para, query))
        answers_so_far.append(ans)
    return hops


def parse(rec: Any, where: str, line: int, include_unanswerable: bool = False) -> RawSample | None:
    """A MuSiQue record; ``None`` for an unanswerable one unless ``include_unanswerable``."""
    qid = get_id(rec, ("id", "_id"), where, line)
    if rec.get("answerable") is False and not include_unanswerable:
        return None
    question = get_field(rec, "question", where, line, str).strip()
    if not question:
        raise DatasetFormatError(where, line, "question", "empty question")
    answers = get_answers(
        get_field(rec, "answer", where, line, str),
        get_field(rec, "answer_aliases", where, line, list, optional=True),
        where,
        line,
        "answer",
    )
    paragraphs, by_idx, support = _paragraphs(get_field(rec, "paragraphs", where, line, list), where, line)
    decomp = get_field(rec, "question_decomposition", where, line, list, optional=True) or []
    hops = _hops(decomp, paragraphs, by_idx, where, line)
    # Gold support in hop order first, then any other paragraph marked supporting.
    hop_paras = [p for _, _, p, _ in hops if p is not None and p in support]
    support = list(dict.fromkeys([*hop_paras, *support]))
    m = re.match(r"(\d)hop", qid)
    n_hops = len(hops) or (int(m.group(1)) if m else 2)
    meta: dict[str, Any] = {
        "type": qid.split("__")[0] if "__" in qid else "musique",
        "supporting_titles": [paragraphs[j][0] for j in support],
    }
    if rec.get("answerable") is not None:
        meta["answerable"] = rec["answerable"]
    return RawSample(qid, question, answers, paragraphs, support, hops, "compositional", n_hops, meta)


def detect(rec: dict[str, Any]) -> bool:
    """A MuSiQue record: ``paragraphs`` and ``question``."""
    return "paragraphs" in rec and "question" in rec


FORMAT = DatasetFormat(
    "musique",
    parse,
    detect,
    options=("include_unanswerable",),
    download_hint="musique_ans_v1.0_dev.jsonl from https://github.com/StonyBrookNLP/musique",
)
