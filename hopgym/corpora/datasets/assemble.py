"""From parsed records to a :class:`QADataset`: doc ids and passages for each mode.

- ``distractor``: each question keeps its own paragraphs; ids ``"{question id}:{title}"``
  (``#2``, ``#3``... for a repeated title with another text), independent of paragraph order.
- ``open``: the paragraphs of the whole file pooled, de-duplicated by title and text; ids are
  :func:`~hopgym.corpora.datasets.corpus.passage_id` of title and text.
- ``corpus``: an external corpus; gold paragraphs mapped to its passages by title (the first
  passage with that title, i.e. the lead of the article). Without a corpus (questions only),
  mode ``none``: no passages.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hopgym.corpora.datasets.base import RawHop, RawSample, norm_title
from hopgym.corpora.datasets.corpus import load_corpus, passage_id
from hopgym.corpora.datasets.errors import DatasetFormatError
from hopgym.corpora.datasets.records import LoadReport
from hopgym.corpora.types import Hop, Passage, QASample

__all__ = ["QADataset", "assemble"]


@dataclass
class QADataset:
    """Questions and the passages they are asked over.

    Attributes:
        name: the format's name: ``hotpotqa``, ``2wiki``, ``musique``, ``bamboogle``,
            ``flashrag`` or a registered one.
        mode: ``distractor``, ``open`` or ``corpus`` (``none`` for a questions-only file loaded
            without a corpus: search must come from an index or a server).
        samples: the questions.
        passages: the corpus: every distinct paragraph (distractor: all questions' paragraphs,
            in file order), the pooled corpus (open), or the external corpus.
        by_sample: distractor mode: each question's own paragraphs, by question id.
        path: where the questions came from.
        corpus_path: the external corpus file, if any.
        skipped: malformed records skipped (``lenient=True``), questions and corpus together.
        errors: the first few messages of the skipped records.
        unresolved_support: gold titles that matched no passage (corpus mode), by question id.
    """

    name: str
    mode: str
    samples: list[QASample]
    passages: list[Passage]
    by_sample: dict[str, tuple[Passage, ...]] = field(default_factory=dict)
    path: str = ""
    corpus_path: str | None = None
    skipped: int = 0
    errors: list[str] = field(default_factory=list)
    unresolved_support: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def documents(self) -> dict[str, Passage]:
        """Doc-id lookup: every passage in distractor/open mode, the gold ones in corpus mode."""
        if self.mode != "corpus":
            return {p.doc_id: p for p in self.passages}
        gold = {d for s in self.samples for d in s.supporting_ids}
        gold.update(h.doc_id for s in self.samples for h in s.decomposition if h.doc_id)
        return {p.doc_id: p for p in self.passages if p.doc_id in gold}


def _uniquify_titles(sample_id: str, paragraphs: list[tuple[str, str]]) -> list[str]:
    """Distractor doc ids: ``{sample}:{title}``, with ``#2``... for a title repeated with other
    text (numbered in text order, so independent of paragraph order)."""
    by_title: dict[str, list[str]] = {}
    for t, x in paragraphs:
        by_title.setdefault(t, []).append(x)
    rank = {(t, x): k for t, xs in by_title.items() for k, x in enumerate(sorted(xs))}
    return [f"{sample_id}:{t}" + (f"#{rank[(t, x)] + 1}" if rank[(t, x)] else "") for t, x in paragraphs]


def _sample(raw: RawSample, ids: Sequence[str | None]) -> QASample:
    support = tuple(dict.fromkeys(i for i in (ids[j] for j in raw.support) if i))
    hops = tuple(Hop(q, a, (ids[p] or "") if p is not None else "", query) for q, a, p, query in raw.hops)
    return QASample(raw.id, raw.question, raw.answers, support, raw.n_hops, raw.kind, hops, raw.metadata)


def _unique(
    raws: Iterable[tuple[int, RawSample]], where: str, report: LoadReport, lenient: bool
) -> Iterable[RawSample]:
    """The records with a question id not seen before; a repeated id raises or is skipped."""
    seen: dict[str, int] = {}
    for line, raw in raws:
        if raw.id in seen:
            err = DatasetFormatError(
                where, line, "id", f"duplicate question id {raw.id!r} (first on line {seen[raw.id]})"
            )
            if not lenient:
                raise err
            report.skip(err)
            continue
        seen[raw.id] = line
        yield raw


def _distractor(name: str, raws: Iterable[RawSample], where: str) -> QADataset:
    samples: list[QASample] = []
    passages: list[Passage] = []
    by_sample: dict[str, tuple[Passage, ...]] = {}
    for raw in raws:
        ids = _uniquify_titles(raw.id, raw.paragraphs)
        ps = tuple(Passage(i, t, x) for i, (t, x) in zip(ids, raw.paragraphs, strict=False))
        by_sample[raw.id] = ps
        passages.extend(ps)
        samples.append(_sample(raw, ids))
    return QADataset(name, "distractor", samples, passages, by_sample, where)


def _open(name: str, raws: Iterable[RawSample], where: str) -> QADataset:
    samples: list[QASample] = []
    pool: dict[str, Passage] = {}
    for raw in raws:
        ids = [passage_id(t, x) for t, x in raw.paragraphs]
        for i, (t, x) in zip(ids, raw.paragraphs, strict=False):
            pool.setdefault(i, Passage(i, t, x))
        samples.append(_sample(raw, ids))
    return QADataset(name, "open", samples, list(pool.values()), {}, where)


def _questions_only(name: str, raws: Iterable[RawSample], where: str) -> QADataset:
    """No passages; gold titles stay in metadata for title-based scoring."""
    samples = []
    for r in raws:
        hops: list[RawHop] = [(q, a, None, qu) for q, a, _, qu in r.hops]
        samples.append(
            _sample(RawSample(r.id, r.question, r.answers, [], [], hops, r.kind, r.n_hops, r.metadata), [])
        )
    return QADataset(name, "none", samples, [], {}, where)


def _external(
    name: str,
    raws: Iterable[RawSample],
    corpus: str | os.PathLike[str],
    where: str,
    report: LoadReport,
    lenient: bool,
    corpus_limit: int | None,
) -> QADataset:
    raw_list = list(raws)
    wanted = {t for r in raw_list for t, _ in r.paragraphs}
    wanted_folded = {norm_title(t) for t in wanted}
    passages = load_corpus(corpus, lenient=lenient, limit=corpus_limit, report=report)
    first_by_title: dict[str, str] = {}
    folded: dict[str, str] = {}
    for p in passages:
        if p.title in wanted and p.title not in first_by_title:
            first_by_title[p.title] = p.doc_id
        f = norm_title(p.title)
        if f in wanted_folded and f not in folded:
            folded[f] = p.doc_id
    samples: list[QASample] = []
    unresolved: dict[str, tuple[str, ...]] = {}
    for r in raw_list:
        ids = [first_by_title.get(t) or folded.get(norm_title(t)) for t, _ in r.paragraphs]
        missing = tuple(r.paragraphs[j][0] for j in r.support if ids[j] is None)
        if missing:
            unresolved[r.id] = missing
        samples.append(_sample(r, ids))
    return QADataset(
        name, "corpus", samples, passages, {}, where, os.fspath(corpus), unresolved_support=unresolved
    )


def assemble(
    name: str,
    raws: Iterable[tuple[int, RawSample]],
    mode: str,
    corpus: str | os.PathLike[str] | None,
    where: str,
    report: LoadReport,
    lenient: bool,
    corpus_limit: int | None,
) -> QADataset:
    """The dataset of ``(line, raw sample)`` pairs in ``mode`` (``corpus`` without a corpus:
    questions only)."""
    unique = _unique(raws, where, report, lenient)
    if mode == "distractor":
        return _distractor(name, unique, where)
    if mode == "open":
        return _open(name, unique, where)
    if corpus is None:
        return _questions_only(name, unique, where)
    return _external(name, unique, corpus, where, report, lenient, corpus_limit)
