"""Loaders for real multi-hop QA benchmarks and retrieval corpora.

Functions: :func:`load_hotpotqa`, :func:`load_2wiki`, :func:`load_musique`, :func:`load_bamboogle`,
:func:`load_flashrag_qa`, :func:`load_qa` (any of them, by ``format``), :func:`load_corpus` /
:func:`iter_corpus` (FlashRAG ``{id, contents}`` or ``{id, title, text}`` jsonl),
:func:`iter_records`, :func:`detect_format`, :func:`passage_id`.
Classes: :class:`QADataset`, :class:`LoadReport`, :class:`PerSampleIndex`,
:class:`DatasetFormatError`, :class:`DatasetUnavailableError`.

Every loader reads its file lazily, record by record (JSON lines, or a JSON array decoded
incrementally), and returns a :class:`QADataset`: the questions as :class:`QASample`, and the
passages they are asked over, in one of three modes:

- ``"distractor"``: each question keeps its own paragraphs (HotpotQA's and 2Wiki's ten, MuSiQue's
  twenty). Doc ids are ``"{question id}:{title}"`` (``#2``, ``#3``... for a repeated title with
  another text), so they do not depend on the order of the paragraphs, which differs between
  copies of 2Wiki. :class:`PerSampleIndex` gives each question a small index of its own.
- ``"open"``: the paragraphs of the whole file pooled into one corpus, de-duplicated by title and
  text; doc ids are :func:`passage_id` of title and text, the same in every file and run.
- ``"corpus"`` (``corpus=`` given): an external corpus such as wiki-18; gold paragraphs are mapped
  to corpus passages by title (the first passage with that title, i.e. the lead of the article).

Gold: ``supporting_ids`` from HotpotQA / 2Wiki supporting facts (by title) and MuSiQue's
``is_supporting``; ``decomposition`` from MuSiQue's ``question_decomposition``, 2Wiki's evidence
triples, or (HotpotQA) one hop per supporting paragraph with its title as the query; aliases
from MuSiQue's ``answer_aliases`` and FlashRAG's ``golden_answers``.

A malformed record raises :class:`DatasetFormatError` naming file, line and field; with
``lenient=True`` it is skipped, counted in :attr:`QADataset.skipped` and reported by a warning.

Hub names (``hotpotqa/hotpot_qa``) are read through the ``datasets`` library when installed and
online; offline, :class:`DatasetUnavailableError` says which file to download and pass as ``path``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopgym.corpora.retrieval import BM25Retriever, DependencyNotInstalled, Retriever
from hopgym.corpora.types import Hop, Passage, QASample
from hopgym.errors import HopgymError

__all__ = [
    "DatasetFormatError",
    "DatasetUnavailableError",
    "LoadReport",
    "QADataset",
    "PerSampleIndex",
    "FORMATS",
    "MODES",
    "iter_records",
    "iter_corpus",
    "load_corpus",
    "load_hotpotqa",
    "load_2wiki",
    "load_musique",
    "load_bamboogle",
    "load_flashrag_qa",
    "load_qa",
    "load_pooled_corpus",
    "detect_format",
    "passage_id",
    "parse_contents",
    "is_hub_name",
]

#: Dataset layouts :func:`load_qa` understands.
FORMATS = ("hotpotqa", "2wiki", "musique", "flashrag")
#: Modes of a QA dataset (``corpus`` is implied by passing ``corpus=``).
MODES = ("distractor", "open", "corpus")

# Where to get each benchmark when the hub is out of reach (shown in DatasetUnavailableError).
_DOWNLOAD_HINTS = {
    "hotpotqa": "hotpot_dev_distractor_v1.json from http://curtis.ml.cmu.edu/datasets/hotpot/",
    "2wiki": "dev.json of 2WikiMultihopQA from https://github.com/Alab-NII/2wikimultihop",
    "musique": "musique_ans_v1.0_dev.jsonl from https://github.com/StonyBrookNLP/musique",
    "flashrag": "the dataset's jsonl from the RUC-NLPIR/FlashRAG_datasets repository",
}


class DatasetFormatError(HopgymError, ValueError):
    """A record does not have the layout its loader expects.

    Attributes:
        path: the file (or hub name) being read.
        line: 1-based line of the record (row number for hub datasets; ``0`` when unknown).
        field: the offending field, as a path such as ``context[3][1]``.
    """

    def __init__(self, path: str, line: int, field: str, reason: str) -> None:
        self.path, self.line, self.field, self.reason = path, line, field, reason
        super().__init__(f"{path}, line {line}, field {field!r}: {reason}")


class DatasetUnavailableError(HopgymError, RuntimeError):
    """A hub dataset could not be fetched (offline, unknown name, no ``datasets`` library)."""


@dataclass
class LoadReport:
    """What happened while reading a file: skipped records and the first error messages."""

    skipped: int = 0
    errors: list[str] = field(default_factory=list)

    def skip(self, err: DatasetFormatError) -> None:
        self.skipped += 1
        if len(self.errors) < 20:
            self.errors.append(str(err))

    def warn(self, what: str) -> None:
        """Emit one warning summarising the skipped records (nothing when none were skipped)."""
        if self.skipped:
            warnings.warn(
                f"skipped {self.skipped} malformed record(s) in {what} (lenient=True); "
                f"first: {self.errors[0]}", stacklevel=3)


@dataclass
class QADataset:
    """Questions and the passages they are asked over.

    Attributes:
        name: ``hotpotqa``, ``2wiki``, ``musique``, ``bamboogle`` or ``flashrag``.
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


# ---------------------------------------------------------------------------------- reading
def _where(path: str | os.PathLike[str]) -> str:
    return os.fspath(path)


def _iter_json_array(f: io.TextIOBase, path: str, chunk: int = 1 << 20
                     ) -> Iterator[tuple[int, Any]]:
    """Decode a top-level JSON array element by element without reading the whole file."""
    dec = json.JSONDecoder()
    buf = f.read(chunk)
    pos = 0
    line = 1
    eof = False

    def fill() -> None:
        nonlocal buf, pos, eof
        more = f.read(chunk)
        if not more:
            eof = True
        buf = buf[pos:] + more
        pos = 0

    def skip_ws() -> None:
        nonlocal pos, line
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n":
                line += buf[pos] == "\n"
                pos += 1
            if pos < len(buf) or eof:
                return
            fill()

    skip_ws()
    if pos >= len(buf) or buf[pos] != "[":
        raise DatasetFormatError(path, line, "<file>", "expected a JSON array or JSON lines")
    pos += 1
    first = True
    while True:
        skip_ws()
        if pos >= len(buf):
            raise DatasetFormatError(path, line, "<file>", "the JSON array is not closed")
        if buf[pos] == "]":
            return
        if not first:
            if buf[pos] != ",":
                raise DatasetFormatError(path, line, "<file>", "expected ',' between records")
            pos += 1
            skip_ws()
        first = False
        while True:
            try:
                obj, end = dec.raw_decode(buf, pos)
            except json.JSONDecodeError as exc:
                if eof:
                    raise DatasetFormatError(path, line, "<json>",
                                             f"invalid JSON: {exc.msg}") from None
                fill()
                continue
            if end == len(buf) and not eof:
                # A number or literal may continue in the next chunk; decode again with more text.
                fill()
                continue
            break
        start_line = line
        line += buf.count("\n", pos, end)
        pos = end
        yield start_line, obj


def iter_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, Any]]:
    """Yield ``(line, record)`` from a JSON-lines file or a file holding one JSON array.

    JSON lines are read one line at a time; an array is decoded incrementally, so neither loads
    the whole file. Blank lines are skipped. A line that is not JSON raises
    :class:`DatasetFormatError` (callers in lenient mode catch it and go on).

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.json"
        >>> _ = p.write_text('[{"x": 1},\\n {"x": 2}]')
        >>> list(iter_records(p))
        [(1, {'x': 1}), (2, {'x': 2})]
    """
    where = _where(path)
    try:
        f = open(path, encoding="utf-8")  # noqa: SIM115 - closed below, generator owns it
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {where}") from None
    with f:
        head = f.read(4096)
        stripped = head.lstrip("\ufeff \t\r\n")
        f.seek(0)
        if head.startswith("\ufeff"):
            f.read(1)
        if stripped.startswith("["):
            yield from _iter_json_array(f, where)
            return
        for lineno, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                yield lineno, json.loads(text)
            except json.JSONDecodeError as exc:
                yield lineno, _BadLine(f"invalid JSON: {exc.msg} at column {exc.colno}")


@dataclass(frozen=True)
class _BadLine:
    """A line that did not parse; turned into an error (or a skip) by the record loop."""

    reason: str


def _records(pairs: Iterable[tuple[int, Any]], where: str, report: LoadReport, lenient: bool,
             parse: Callable[[Any, str, int], Any], limit: int | None) -> Iterator[Any]:
    """Parse ``(line, record)`` pairs one by one; skip and count bad ones when lenient."""
    n = 0
    for line, rec in pairs:
        if limit is not None and n >= limit:
            return
        try:
            if isinstance(rec, _BadLine):
                raise DatasetFormatError(where, line, "<json>", rec.reason)
            out = parse(rec, where, line)
        except DatasetFormatError as err:
            if not lenient:
                raise
            report.skip(err)
            continue
        if out is None:
            continue
        n += 1
        yield out


# ------------------------------------------------------------------------------- field checks
def _get(rec: Any, key: str | tuple[str, ...], where: str, line: int, kind: type | tuple[type, ...],
         *, optional: bool = False) -> Any:
    if not isinstance(rec, dict):
        raise DatasetFormatError(where, line, "<record>",
                                 f"expected an object, got {type(rec).__name__}")
    keys = (key,) if isinstance(key, str) else key
    for k in keys:
        if k in rec:
            val = rec[k]
            if not isinstance(val, kind):
                kinds = (kind,) if isinstance(kind, type) else kind
                names = "/".join(t.__name__ for t in kinds)
                raise DatasetFormatError(where, line, k,
                                         f"expected {names}, got {type(val).__name__}")
            return val
    if optional:
        return None
    raise DatasetFormatError(where, line, keys[0], "missing")


def _str_id(rec: dict[str, Any], keys: tuple[str, ...], where: str, line: int) -> str:
    val = _get(rec, keys, where, line, (str, int))
    if isinstance(val, bool) or str(val) == "":
        raise DatasetFormatError(where, line, keys[0], "empty id")
    return str(val)


def _answers(first: Any, aliases: Any, where: str, line: int, fname: str) -> tuple[str, ...]:
    out: list[str] = []
    items = [first] if isinstance(first, str) else list(first or [])
    for i, a in enumerate([*items, *(aliases or [])]):
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            a = str(a)
        if not isinstance(a, str):
            raise DatasetFormatError(where, line, f"{fname}[{i}]", "answers must be strings")
        a = a.strip()
        if a and a not in out:
            out.append(a)
    if not out:
        raise DatasetFormatError(where, line, fname, "no answer")
    return tuple(out)


def _join_sentences(sentences: Sequence[str]) -> str:
    """Join sentences as HotpotQA (leading spaces kept) and 2Wiki (none) both need."""
    out = ""
    for s in sentences:
        if out and not out[-1].isspace() and s and not s[0].isspace():
            out += " "
        out += s
    return out.strip()


# --------------------------------------------------------------------------------- raw records
@dataclass
class _Raw:
    """A parsed record before doc ids are assigned: paragraphs by position."""

    id: str
    question: str
    answers: tuple[str, ...]
    paragraphs: list[tuple[str, str]]  # (title, text), de-duplicated within the record
    support: list[int]  # indices into paragraphs
    hops: list[tuple[str, str, int | None, str]]  # (question, answer, paragraph, query)
    kind: str
    n_hops: int
    metadata: dict[str, Any]


def _add_paragraph(paragraphs: list[tuple[str, str]], index: dict[tuple[str, str], int],
                   title: str, text: str) -> int:
    key = (title, text)
    if key not in index:
        index[key] = len(paragraphs)
        paragraphs.append(key)
    return index[key]


def _pairs_context(ctx: Any, where: str, line: int) -> list[tuple[str, list[str]]]:
    """HotpotQA/2Wiki ``context``: ``[[title, [sentences]]]`` or the hub's column dict."""
    if isinstance(ctx, dict):
        titles, sents = ctx.get("title"), ctx.get("sentences")
        if not isinstance(titles, list) or not isinstance(sents, list) or len(titles) != len(sents):
            raise DatasetFormatError(where, line, "context",
                                     "expected {'title': [...], 'sentences': [[...]]}")
        ctx = [[t, s] for t, s in zip(titles, sents, strict=False)]
    if not isinstance(ctx, list):
        raise DatasetFormatError(where, line, "context",
                                 f"expected a list, got {type(ctx).__name__}")
    out = []
    for i, item in enumerate(ctx):
        if (not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[0], str)
                or not isinstance(item[1], (list, tuple))):
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
            raise DatasetFormatError(where, line, "supporting_facts",
                                     "expected {'title': [...], 'sent_id': [...]}")
        facts = [[t, s] for t, s in zip(titles, ids, strict=False)]
    if not isinstance(facts, list):
        raise DatasetFormatError(where, line, "supporting_facts", "expected a list")
    out = []
    for i, f in enumerate(facts):
        if (not isinstance(f, (list, tuple)) or len(f) != 2 or not isinstance(f[0], str)
                or not isinstance(f[1], int) or isinstance(f[1], bool)):
            raise DatasetFormatError(where, line, f"supporting_facts[{i}]",
                                     "expected [title, sentence index]")
        out.append((f[0], f[1]))
    return out


def _title_hops(raw_titles: list[str], title_index: dict[str, int], answer: str
                ) -> list[tuple[str, str, int | None, str]]:
    """One hop per supporting paragraph, the title as the query; the last carries the answer."""
    hops = []
    for j, t in enumerate(raw_titles):
        last = j == len(raw_titles) - 1
        hops.append((f"What does the article on {t} say?", answer if last else "",
                     title_index.get(t), t))
    return hops


def _parse_hotpot_like(rec: Any, where: str, line: int, *, two_wiki: bool) -> _Raw:
    qid = _str_id(rec, ("_id", "id"), where, line)
    question = _get(rec, "question", where, line, str).strip()
    if not question:
        raise DatasetFormatError(where, line, "question", "empty question")
    answer = _get(rec, "answer", where, line, (str, int, float))
    answers = _answers(str(answer), None, where, line, "answer")
    ctx = _pairs_context(_get(rec, "context", where, line, (list, dict)), where, line)
    facts = _pairs_facts(_get(rec, "supporting_facts", where, line, (list, dict)), where, line)
    paragraphs: list[tuple[str, str]] = []
    pindex: dict[tuple[str, str], int] = {}
    title_index: dict[str, int] = {}
    for title, sents in ctx:
        i = _add_paragraph(paragraphs, pindex, title, _join_sentences(sents))
        title_index.setdefault(title, i)
    sup_titles: list[str] = []
    for t, _ in facts:
        if t not in sup_titles:
            sup_titles.append(t)
    missing = [t for t in sup_titles if t not in title_index]
    support = [title_index[t] for t in sup_titles if t in title_index]
    kind = str(rec.get("type") or "bridge")
    meta: dict[str, Any] = {"type": kind, "supporting_facts": facts,
                            "supporting_titles": sup_titles}
    if missing:
        meta["missing_support"] = missing
    if rec.get("level") is not None:
        meta["level"] = rec["level"]
    hops: list[tuple[str, str, int | None, str]] = []
    if two_wiki:
        evidences = rec.get("evidences")
        hops = _evidence_hops(evidences, sup_titles, title_index, answers[0])
        if evidences is not None:
            meta["evidences"] = evidences
        for k in ("answer_id", "entity_ids"):
            if rec.get(k) is not None:
                meta[k] = rec[k]
    if not hops:
        hops = _title_hops(sup_titles, title_index, answers[0])
    n_hops = len(hops) if hops else 2
    return _Raw(qid, question, answers, paragraphs, support, hops, kind, n_hops, meta)


def _norm_title(t: str) -> str:
    return re.sub(r"\s+", " ", t).strip().casefold()


def _evidence_hops(evidences: Any, sup_titles: list[str], title_index: dict[str, int],
                   answer: str) -> list[tuple[str, str, int | None, str]]:
    """2Wiki evidence triples ``[subject, relation, object]`` as hops.

    The subject names the paragraph that states the fact, but not always by its exact title
    ("Thomas Stanley" for "Thomas Stanley, 1st Earl of Derby"): match exactly, then
    case-insensitively, then by prefix among the supporting titles, then by position (evidences
    and supporting facts run in parallel in the dataset). Returns ``[]`` when a triple cannot
    be placed, so that the caller falls back to title hops.
    """
    if not isinstance(evidences, list) or not evidences:
        return []
    folded = {_norm_title(t): t for t in title_index}
    hops = []
    for j, ev in enumerate(evidences):
        if not (isinstance(ev, (list, tuple)) and len(ev) == 3
                and all(isinstance(x, str) for x in ev)):
            return []
        subj, rel, obj = ev
        title = subj if subj in title_index else folded.get(_norm_title(subj))
        if title is None:
            cands = [t for t in sup_titles if t in title_index
                     and _norm_title(t).startswith(_norm_title(subj))]
            if len(cands) == 1:
                title = cands[0]
        if title is None and len(evidences) == len(sup_titles) and sup_titles[j] in title_index:
            title = sup_titles[j]
        if title is None:
            return []
        hops.append((f"What is the {rel} of {subj}?", obj, title_index[title], title))
    # The last hop of a chain answers the question; comparisons end with a judgement instead.
    return hops


def _parse_hotpotqa(rec: Any, where: str, line: int) -> _Raw:
    return _parse_hotpot_like(rec, where, line, two_wiki=False)


def _parse_2wiki(rec: Any, where: str, line: int) -> _Raw:
    return _parse_hotpot_like(rec, where, line, two_wiki=True)


def _parse_musique(rec: Any, where: str, line: int, include_unanswerable: bool) -> _Raw | None:
    qid = _str_id(rec, ("id", "_id"), where, line)
    if rec.get("answerable") is False and not include_unanswerable:
        return None
    question = _get(rec, "question", where, line, str).strip()
    if not question:
        raise DatasetFormatError(where, line, "question", "empty question")
    answers = _answers(_get(rec, "answer", where, line, str),
                       _get(rec, "answer_aliases", where, line, list, optional=True),
                       where, line, "answer")
    paras = _get(rec, "paragraphs", where, line, list)
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
            raise DatasetFormatError(where, line, f"paragraphs[{i}].title",
                                     "missing or not a string")
        if not isinstance(text, str):
            raise DatasetFormatError(where, line, f"paragraphs[{i}].paragraph_text",
                                     "missing or not a string")
        j = _add_paragraph(paragraphs, pindex, title, text.strip())
        idx = p.get("idx", i)
        by_idx[idx if isinstance(idx, int) else i] = j
        if p.get("is_supporting") and j not in support:
            support.append(j)
    decomp = _get(rec, "question_decomposition", where, line, list, optional=True) or []
    hops: list[tuple[str, str, int | None, str]] = []
    answers_so_far: list[str] = []
    for i, step in enumerate(decomp):
        if not isinstance(step, dict) or not isinstance(step.get("question"), str):
            raise DatasetFormatError(where, line, f"question_decomposition[{i}].question",
                                     "missing or not a string")
        ans = step.get("answer")
        if not isinstance(ans, str):
            raise DatasetFormatError(where, line, f"question_decomposition[{i}].answer",
                                     "missing or not a string")

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
    # Gold support in hop order first, then any other paragraph marked supporting.
    hop_paras = [p for _, _, p, _ in hops if p is not None and p in support]
    support = list(dict.fromkeys([*hop_paras, *support]))
    m = re.match(r"(\d)hop", qid)
    n_hops = len(hops) or (int(m.group(1)) if m else 2)
    meta: dict[str, Any] = {"type": qid.split("__")[0] if "__" in qid else "musique",
                            "supporting_titles": [paragraphs[j][0] for j in support]}
    if rec.get("answerable") is not None:
        meta["answerable"] = rec["answerable"]
    return _Raw(qid, question, answers, paragraphs, support, hops, "compositional", n_hops, meta)


def _parse_flashrag(rec: Any, where: str, line: int, kind: str, n_hops: int) -> _Raw:
    qid = _str_id(rec, ("id", "_id", "qid"), where, line)
    question = _get(rec, ("question", "query"), where, line, str).strip()
    if not question:
        raise DatasetFormatError(where, line, "question", "empty question")
    golds = _get(rec, ("golden_answers", "answers", "answer"), where, line, (list, str, int, float))
    answers = _answers(golds if isinstance(golds, (list, str)) else str(golds), None, where, line,
                       "golden_answers")
    meta = rec.get("metadata") if isinstance(rec.get("metadata"), dict) else {}
    return _Raw(qid, question, answers, [], [], [], str(rec.get("type", kind)), n_hops, dict(meta))


# ------------------------------------------------------------------------------------- corpora
def passage_id(title: str, text: str) -> str:
    """A stable id for a paragraph known only by title and text (open mode).

    Example:
        >>> passage_id("Neil Peart", "Neil Peart was a drummer.")
        'Neil Peart#2cf8b2e7'
    """
    h = hashlib.sha1(f"{title}\n{text}".encode()).hexdigest()[:8]
    return f"{title}#{h}"


def parse_contents(contents: str) -> tuple[str, str]:
    """Split FlashRAG ``contents`` into title and text; unquote a CSV-quoted title.

    Example:
        >>> parse_contents('"Horatio Hale"\\nconsisted of an Algonkin vocabulary')
        ('Horatio Hale', 'consisted of an Algonkin vocabulary')
        >>> parse_contents('Absalon\\ndragged forth')
        ('Absalon', 'dragged forth')
    """
    title, sep, text = contents.partition("\n")
    title = title.strip()
    if len(title) >= 2 and title[0] == '"' and title[-1] == '"':
        title = title[1:-1].replace('""', '"')
    return title, text if sep else ""


def _parse_corpus_record(rec: Any, where: str, line: int) -> Passage:
    if not isinstance(rec, dict):
        raise DatasetFormatError(where, line, "<record>", "expected an object")
    doc_id = _str_id(rec, ("id", "_id", "docid", "doc_id"), where, line)
    if "contents" in rec:
        contents = rec["contents"]
        if not isinstance(contents, str):
            raise DatasetFormatError(where, line, "contents", "expected a string")
        title, text = parse_contents(contents)
    else:
        text = rec.get("text")
        if not isinstance(text, str):
            raise DatasetFormatError(where, line, "contents",
                                     "missing: expected 'contents' or 'title' and 'text'")
        title = rec.get("title", "")
        if not isinstance(title, str):
            raise DatasetFormatError(where, line, "title", "expected a string")
    return Passage(doc_id, title, text)


def iter_corpus(path: str | os.PathLike[str], *, lenient: bool = False, limit: int | None = None,
                report: LoadReport | None = None) -> Iterator[Passage]:
    """Stream passages from a FlashRAG / Search-R1 corpus jsonl.

    Accepts ``{id, contents}`` (``contents`` = title, newline, text; a quoted title is unquoted)
    and ``{id, title, text}`` (also ``_id``/``docid`` as the id field).

    Args:
        path: the jsonl file.
        lenient: skip malformed records (counted in ``report``) instead of raising.
        limit: stop after this many passages.
        report: collects skipped records.
    """
    rep = report if report is not None else LoadReport()
    yield from _records(iter_records(path), _where(path), rep, lenient, _parse_corpus_record,
                        limit)


def load_corpus(path: str | os.PathLike[str], *, lenient: bool = False, limit: int | None = None,
                report: LoadReport | None = None) -> list[Passage]:
    """All passages of a corpus jsonl (see :func:`iter_corpus`); duplicate ids are an error.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.jsonl"
        >>> _ = p.write_text('{"id": "0", "contents": "\\\\"Oslo\\\\"\\\\nOslo is a city."}\\n')
        >>> load_corpus(p)
        [Passage(doc_id='0', title='Oslo', text='Oslo is a city.')]
    """
    rep = report if report is not None else LoadReport()
    out: list[Passage] = []
    seen: set[str] = set()
    for p in iter_corpus(path, lenient=lenient, limit=limit, report=rep):
        if p.doc_id in seen:
            err = DatasetFormatError(_where(path), 0, "id", f"duplicate passage id {p.doc_id!r}")
            if not lenient:
                raise err
            rep.skip(err)
            continue
        seen.add(p.doc_id)
        out.append(p)
    if report is None:
        rep.warn(_where(path))
    return out


# --------------------------------------------------------------------------------- hub access
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_hub_name(path: str | os.PathLike[str]) -> bool:
    """True for ``owner/name`` strings that are not an existing file (read through ``datasets``).

    Example:
        >>> is_hub_name("hotpotqa/hotpot_qa"), is_hub_name("data/dev.jsonl")
        (True, False)
    """
    s = os.fspath(path)
    return (not os.path.exists(s) and bool(_HUB_NAME.match(s))
            and not s.endswith((".json", ".jsonl", ".gz")))


def _hub_records(name: str, fmt: str, config: str | None, split: str) -> Iterator[tuple[int, Any]]:
    """Rows of a hub dataset, through ``datasets``; a clear error when it cannot be reached."""
    hint = _DOWNLOAD_HINTS.get(fmt, "the dataset file")
    try:
        import datasets  # noqa: F401
    except ImportError:
        raise DatasetUnavailableError(
            f"{DependencyNotInstalled.for_extra('datasets', 'hub')} to read {name!r} from the "
            f"Hugging Face hub; or download {hint} and pass path='<file>'") from None
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - offline, unknown name, gated: all end here
        raise DatasetUnavailableError(
            f"could not load {name!r} (config={config!r}, split={split!r}) from the Hugging Face "
            f"hub: {type(exc).__name__}: {exc}. hopgym does not download data for you when "
            f"offline: download {hint} and pass path='<file>'") from exc
    yield from enumerate(ds, 1)


def _iter_source(path: str | os.PathLike[str], fmt: str, config: str | None,
                 split: str) -> Callable[[], Iterator[tuple[int, Any]]]:
    if is_hub_name(path):
        return lambda: _hub_records(os.fspath(path), fmt, config, split)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"no such file: {os.fspath(path)} (a Hugging Face hub name looks like 'owner/name')")
    return lambda: iter_records(path)


# -------------------------------------------------------------------------------- assembling
def _uniquify_titles(sample_id: str, paragraphs: list[tuple[str, str]]) -> list[str]:
    """Distractor doc ids: ``{sample}:{title}``, with ``#2``... for a title repeated with other
    text (numbered in text order, so independent of paragraph order)."""
    by_title: dict[str, list[str]] = {}
    for t, x in paragraphs:
        by_title.setdefault(t, []).append(x)
    rank = {(t, x): k for t, xs in by_title.items() for k, x in enumerate(sorted(xs))}
    return [f"{sample_id}:{t}" + (f"#{rank[(t, x)] + 1}" if rank[(t, x)] else "")
            for t, x in paragraphs]


def _sample(raw: _Raw, ids: Sequence[str | None]) -> QASample:
    support = tuple(dict.fromkeys(i for i in (ids[j] for j in raw.support) if i))
    hops = tuple(Hop(q, a, (ids[p] or "") if p is not None else "", query)
                 for q, a, p, query in raw.hops)
    return QASample(raw.id, raw.question, raw.answers, support, raw.n_hops, raw.kind, hops,
                    raw.metadata)


def _assemble(name: str, raws: Iterable[_Raw], mode: str, corpus: str | os.PathLike[str] | None,
              where: str, report: LoadReport, lenient: bool, corpus_limit: int | None) -> QADataset:
    samples: list[QASample] = []
    seen_q: set[str] = set()
    if mode == "distractor":
        passages: list[Passage] = []
        by_sample: dict[str, tuple[Passage, ...]] = {}
        for raw in raws:
            if raw.id in seen_q:
                _dup(where, raw.id, report, lenient)
                continue
            seen_q.add(raw.id)
            ids = _uniquify_titles(raw.id, raw.paragraphs)
            ps = tuple(Passage(i, t, x) for i, (t, x) in zip(ids, raw.paragraphs, strict=False))
            by_sample[raw.id] = ps
            passages.extend(ps)
            samples.append(_sample(raw, ids))
        return QADataset(name, mode, samples, passages, by_sample, where)
    if mode == "open":
        pool: dict[str, Passage] = {}
        for raw in raws:
            if raw.id in seen_q:
                _dup(where, raw.id, report, lenient)
                continue
            seen_q.add(raw.id)
            ids = [passage_id(t, x) for t, x in raw.paragraphs]
            for i, (t, x) in zip(ids, raw.paragraphs, strict=False):
                pool.setdefault(i, Passage(i, t, x))
            samples.append(_sample(raw, ids))
        return QADataset(name, mode, samples, list(pool.values()), {}, where)
    # corpus mode (or questions only, when corpus is None)
    raw_list = []
    for raw in raws:
        if raw.id in seen_q:
            _dup(where, raw.id, report, lenient)
            continue
        seen_q.add(raw.id)
        raw_list.append(raw)
    if corpus is None:
        # Questions only: no passages; gold titles stay in metadata for title-based scoring.
        samples = []
        for r in raw_list:
            hops = [(q, a, None, qu) for q, a, _, qu in r.hops]
            samples.append(_sample(_Raw(r.id, r.question, r.answers, [], [], hops, r.kind,
                                        r.n_hops, r.metadata), []))
        return QADataset(name, "none", samples, [], {}, where)
    wanted = {t for r in raw_list for t, _ in r.paragraphs}
    wanted_folded = {_norm_title(t) for t in wanted}
    passages = load_corpus(corpus, lenient=lenient, limit=corpus_limit, report=report)
    first_by_title: dict[str, str] = {}
    folded: dict[str, str] = {}
    for p in passages:
        if p.title in wanted and p.title not in first_by_title:
            first_by_title[p.title] = p.doc_id
        f = _norm_title(p.title)
        if f in wanted_folded and f not in folded:
            folded[f] = p.doc_id
    unresolved: dict[str, tuple[str, ...]] = {}
    for r in raw_list:
        ids = [first_by_title.get(t) or folded.get(_norm_title(t)) for t, _ in r.paragraphs]
        missing = tuple(r.paragraphs[j][0] for j in r.support if ids[j] is None)
        if missing:
            unresolved[r.id] = missing
        samples.append(_sample(r, ids))
    return QADataset(name, "corpus", samples, passages, {}, where, os.fspath(corpus),
                     unresolved_support=unresolved)


def _dup(where: str, qid: str, report: LoadReport, lenient: bool) -> None:
    err = DatasetFormatError(where, 0, "id", f"duplicate question id {qid!r}")
    if not lenient:
        raise err
    report.skip(err)


def _load(name: str, fmt: str, parse: Callable[[Any, str, int], _Raw | None],
          path: str | os.PathLike[str], mode: str | None, corpus: str | os.PathLike[str] | None,
          lenient: bool, limit: int | None, hub_config: str | None, split: str,
          corpus_limit: int | None = None, default_mode: str = "distractor") -> QADataset:
    if mode is None:
        mode = "corpus" if corpus is not None else default_mode
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if mode == "corpus" and corpus is None and default_mode != "corpus":
        raise ValueError("mode='corpus' needs corpus=<path to a corpus jsonl>")
    if corpus is not None and mode != "corpus":
        raise ValueError(f"corpus= is given, so the mode is 'corpus', not {mode!r}: each question "
                         "searches the external corpus (leave mode unset)")
    if limit is not None and limit <= 0:
        raise ValueError(f"limit must be positive, got {limit}")
    source = _iter_source(path, fmt, hub_config, split)
    where = _where(path)
    report = LoadReport()

    raws = _records(source(), where, report, lenient, parse, limit)
    ds = _assemble(name, raws, mode, corpus, where, report, lenient, corpus_limit)
    if not ds.samples:
        raise DatasetFormatError(where, 0, "<file>", "no questions could be read")
    ds.skipped, ds.errors = report.skipped, list(report.errors)
    report.warn(where)
    return ds


# ---------------------------------------------------------------------------------- public
def load_hotpotqa(path: str | os.PathLike[str] = "hotpotqa/hotpot_qa", *, mode: str | None = None,
                  corpus: str | os.PathLike[str] | None = None, lenient: bool = False,
                  limit: int | None = None, hub_config: str | None = "distractor",
                  split: str = "validation") -> QADataset:
    """HotpotQA: the original JSON array, JSON lines, or a hub name.

    Args:
        path: ``hotpot_dev_distractor_v1.json`` (array), a jsonl with one record a line, or a hub
            name read through ``datasets``.
        mode: ``"distractor"`` (default), ``"open"``; implied ``"corpus"`` when ``corpus`` is given.
        corpus: an external corpus jsonl (FlashRAG layout); gold mapped by title.
        lenient: skip malformed records (counted in ``QADataset.skipped``) instead of raising.
        limit: read at most this many questions.
        hub_config, split: for hub names only.

    Records with fewer than ten paragraphs are fine; a supporting title missing from the context
    is kept in ``metadata["missing_support"]``.
    """
    return _load("hotpotqa", "hotpotqa", _parse_hotpotqa, path, mode, corpus, lenient, limit,
                 hub_config, split)


def load_2wiki(path: str | os.PathLike[str], *, mode: str | None = None,
               corpus: str | os.PathLike[str] | None = None, lenient: bool = False,
               limit: int | None = None, hub_config: str | None = None,
               split: str = "validation") -> QADataset:
    """2WikiMultihopQA (``dev.json`` array or jsonl): supporting facts by title, evidence hops.

    Paragraph order is irrelevant to ids and gold (it differs between copies of the dataset);
    identical duplicated paragraphs are merged. Arguments as :func:`load_hotpotqa`.
    """
    return _load("2wiki", "2wiki", _parse_2wiki, path, mode, corpus, lenient, limit, hub_config,
                 split)


def load_musique(path: str | os.PathLike[str], *, mode: str | None = None,
                 corpus: str | os.PathLike[str] | None = None, lenient: bool = False,
                 limit: int | None = None, include_unanswerable: bool = False,
                 hub_config: str | None = None, split: str = "validation") -> QADataset:
    """MuSiQue (``musique_ans_v1.0_dev.jsonl``): ``is_supporting`` gold, decomposition, aliases.

    ``#1`` in a sub-question is replaced by the first hop's answer. Records with
    ``answerable: false`` (MuSiQue-Full) are left out unless ``include_unanswerable``.
    Other arguments as :func:`load_hotpotqa`.
    """
    def parse(rec: Any, where: str, line: int) -> _Raw | None:
        return _parse_musique(rec, where, line, include_unanswerable)

    return _load("musique", "musique", parse, path, mode, corpus, lenient, limit, hub_config, split)


def load_flashrag_qa(path: str | os.PathLike[str], *, corpus: str | os.PathLike[str] | None = None,
                     lenient: bool = False, limit: int | None = None, name: str = "flashrag",
                     kind: str = "unknown", hops: int = 1, hub_config: str | None = None,
                     split: str = "test", corpus_limit: int | None = None) -> QADataset:
    """A FlashRAG QA jsonl: ``{id, question, golden_answers}`` (questions and answers only).

    Without ``corpus`` the dataset has no passages (mode ``"none"``): search must come from a
    saved index or a retrieval server.
    """
    def parse(rec: Any, where: str, line: int) -> _Raw:
        return _parse_flashrag(rec, where, line, kind, hops)

    return _load(name, "flashrag", parse, path, None, corpus, lenient, limit, hub_config, split,
                 corpus_limit, default_mode="corpus")


def load_bamboogle(path: str | os.PathLike[str], *, corpus: str | os.PathLike[str] | None = None,
                   lenient: bool = False, limit: int | None = None,
                   corpus_limit: int | None = None) -> QADataset:
    """Bamboogle in FlashRAG layout: 2-hop compositional questions with answers, no context."""
    return load_flashrag_qa(path, corpus=corpus, lenient=lenient, limit=limit, name="bamboogle",
                            kind="compositional", hops=2, hub_config="bamboogle",
                            corpus_limit=corpus_limit)


def detect_format(path: str | os.PathLike[str]) -> str:
    """The layout of a file from its first record: a :data:`FORMATS` name or ``"corpus"``.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "q.jsonl"
        >>> _ = p.write_text('{"id": "q", "question": "Who?", "golden_answers": ["Ann"]}\\n')
        >>> detect_format(p)
        'flashrag'
    """
    for line, rec in iter_records(path):
        if not isinstance(rec, dict):
            break
        if "paragraphs" in rec and "question" in rec:
            return "musique"
        if "context" in rec and "supporting_facts" in rec:
            return "2wiki" if "evidences" in rec else "hotpotqa"
        if "question" in rec:
            return "flashrag"
        if "contents" in rec or ("text" in rec and ("id" in rec or "_id" in rec)):
            return "corpus"
        raise DatasetFormatError(os.fspath(path), line, "<record>",
                                 f"unknown layout with fields {sorted(rec)[:8]}")
    raise DatasetFormatError(os.fspath(path), 0, "<file>", "empty file or not JSON objects")


def load_qa(path: str | os.PathLike[str], *, format: str = "auto", mode: str | None = None,
            corpus: str | os.PathLike[str] | None = None, lenient: bool = False,
            limit: int | None = None) -> QADataset:
    """Any supported QA file by layout (``format="auto"`` detects it from the first record)."""
    fmt = detect_format(path) if format == "auto" else format
    if fmt == "hotpotqa":
        return load_hotpotqa(path, mode=mode, corpus=corpus, lenient=lenient, limit=limit)
    if fmt == "2wiki":
        return load_2wiki(path, mode=mode, corpus=corpus, lenient=lenient, limit=limit)
    if fmt == "musique":
        return load_musique(path, mode=mode, corpus=corpus, lenient=lenient, limit=limit)
    if fmt == "flashrag":
        if mode not in (None, "corpus"):
            raise ValueError(
                f"{os.fspath(path)} has questions only: mode {mode!r} needs paragraphs")
        return load_flashrag_qa(path, corpus=corpus, lenient=lenient, limit=limit)
    if fmt == "corpus":
        raise ValueError(f"{os.fspath(path)} is a corpus, not a QA file: pass it as corpus=")
    raise ValueError(f"format must be 'auto' or one of {FORMATS}, got {format!r}")


def load_pooled_corpus(path: str | os.PathLike[str], *, format: str = "auto",
                       lenient: bool = False, limit: int | None = None) -> list[Passage]:
    """Passages of a corpus file, or the pooled (open-mode) paragraphs of a QA file.

    This is what ``hopgym index build --corpus`` indexes: the same doc ids as
    :func:`load_qa` gives in open mode, so a saved index matches the env's corpus.
    """
    fmt = detect_format(path) if format == "auto" else format
    if fmt == "corpus":
        return load_corpus(path, lenient=lenient, limit=limit)
    if fmt == "flashrag":
        raise ValueError(f"{os.fspath(path)} has questions only; index a corpus file instead")
    return load_qa(path, format=fmt, mode="open", lenient=lenient).passages[
        : limit if limit is not None else None]


# --------------------------------------------------------------------------- per-sample search
class _BM25Build:
    """Picklable default builder: BM25 over a question's paragraphs."""

    def __init__(self, engine: str = "bm25s") -> None:
        self.engine = engine

    def __call__(self, passages: Sequence[Passage]) -> Retriever:
        return BM25Retriever(passages, engine=self.engine)


class PerSampleIndex:
    """A ``retriever_factory`` for distractor mode: one small index per question.

    Each question's index is built the first time it is asked for and kept in an LRU cache, so
    an episode's searches and later episodes of the same question reuse it.

    Args:
        by_sample: each question's passages, by question id (:attr:`QADataset.by_sample`).
        build: ``passages -> Retriever``; BM25 (bm25s) by default. Must pickle for vector envs.
        maxsize: questions kept in the cache.

    Example:
        >>> ps = (Passage("q:A", "A", "Alpha is red."), Passage("q:B", "B", "Beta is blue."))
        >>> factory = PerSampleIndex({"q": ps})
        >>> [p.doc_id for p in factory(QASample("q", "Beta?", ("blue",))).search("beta", 1)]
        ['q:B']
    """

    def __init__(self, by_sample: Mapping[str, Sequence[Passage]],
                 build: Callable[[Sequence[Passage]], Retriever] | None = None,
                 maxsize: int = 4096) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be at least 1, got {maxsize}")
        self.by_sample = by_sample
        self.build = build if build is not None else _BM25Build()
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

