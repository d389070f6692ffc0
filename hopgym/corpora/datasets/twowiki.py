"""2WikiMultihopQA records: the HotpotQA layout plus ``evidences`` triples, read as hops.

Paragraph order is irrelevant to ids and gold (it differs between copies of the dataset);
identical duplicated paragraphs are merged.
"""

from __future__ import annotations

from typing import Any

from hopgym.corpora.datasets.base import DatasetFormat, RawHop, RawSample, norm_title
from hopgym.corpora.datasets.hotpotqa import read_context_record, title_hops

__all__ = ["FORMAT", "parse", "detect", "evidence_hops"]


def evidence_hops(
    evidences: Any, sup_titles: list[str], title_index: dict[str, int], answer: str
) -> list[RawHop]:
    """2Wiki evidence triples ``[subject, relation, object]`` as hops.

    The subject names the paragraph that states the fact, but not always by its exact title
    ("Thomas Stanley" for "Thomas Stanley, 1st Earl of Derby"): match exactly, then
    case-insensitively, then by prefix among the supporting titles, then by position (evidences
    and supporting facts run in parallel in the dataset). Returns ``[]`` when a triple cannot
    be placed, so that the caller falls back to title hops.
    """
    if not isinstance(evidences, list) or not evidences:
        return []
    folded = {norm_title(t): t for t in title_index}
    hops: list[tuple[str, str, int | None, str]] = []
    for j, ev in enumerate(evidences):
        if not (isinstance(ev, (list, tuple)) and len(ev) == 3 and all(isinstance(x, str) for x in ev)):
            return []
        subj, rel, obj = ev
        title = subj if subj in title_index else folded.get(norm_title(subj))
        if title is None:
            cands = [t for t in sup_titles if t in title_index and norm_title(t).startswith(norm_title(subj))]
            if len(cands) == 1:
                title = cands[0]
        if title is None and len(evidences) == len(sup_titles) and sup_titles[j] in title_index:
            title = sup_titles[j]
        if title is None:
            return []
        hops.append((f"What is the {rel} of {subj}?", obj, title_index[title], title))
    # The last hop of a chain answers the question; comparisons end with a judgement instead.
    return hops


def parse(rec: Any, where: str, line: int) -> RawSample:
    """A 2WikiMultihopQA record (``dev.json`` array or jsonl)."""
    c = read_context_record(rec, where, line)
    raw, meta = c.raw, c.raw.metadata
    evidences = rec.get("evidences")
    hops = evidence_hops(evidences, c.sup_titles, c.title_index, raw.answers[0])
    if evidences is not None:
        meta["evidences"] = evidences
    for k in ("answer_id", "entity_ids"):
        if rec.get(k) is not None:
            meta[k] = rec[k]
    raw.hops = hops or title_hops(c.sup_titles, c.title_index, raw.answers[0])
    raw.n_hops = len(raw.hops) or 2
    return raw


def detect(rec: dict[str, Any]) -> bool:
    """The HotpotQA layout with 2Wiki's ``evidences``."""
    return "context" in rec and "supporting_facts" in rec and "evidences" in rec


FORMAT = DatasetFormat(
    "2wiki",
    parse,
    detect,
    download_hint="dev.json of 2WikiMultihopQA from https://github.com/Alab-NII/2wikimultihop",
)
