"""Reading retrieved documents: the candidate spans and relation concepts of each sentence.

Functions: :func:`extract_spans`, :func:`sentence_concepts`, :func:`parse_doc`.
Classes: :class:`Doc` (a retrieved document, parsed once).

The relation lexicon is the question reader's (:data:`hopgym.corpora.questions.CONCEPTS`, its
document cues); a span is a name (``entity``), a ``year`` or a ``number``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from hopgym.corpora.questions import NAME, WORD, concepts_of, entity_key, strip_name
from hopgym.corpora.types import Passage

__all__ = ["extract_spans", "sentence_concepts", "parse_doc", "doc_words", "Doc", "Sentence"]

_YEAR = re.compile(r"\b(?:1[0-9]{3}|20[0-9]{2})\b")
_NUMBER = re.compile(r"\b\d{1,3}(?:,\d{3})+\b|\b\d+(?:\.\d+)?\b")
_SENT = re.compile(r"(?<=[.!?;])\s+")

#: A parsed sentence: its relation concepts and its spans as ``(text, kind, entity key)``.
Sentence = tuple[frozenset[str], tuple[tuple[str, str, str], ...]]


def sentence_concepts(sentence: str) -> frozenset[str]:
    """The relation concepts a document sentence expresses (cued by its lower-case words).

    Example:
        >>> sorted(sentence_concepts("Maren Oskdal (born 1931) is a chemist who studied at Lorn."))
        ['birth', 'study']
    """
    out: set[str] = set()
    for i, w in enumerate(WORD.findall(sentence)):
        # Capitalised words name things ("University of Lorn"), except the sentence's first
        # ("Directed by ...").
        if w[0].islower() or i == 0:
            out.update(concepts_of(w.lower(), 1))
    return frozenset(out)


def extract_spans(text: str) -> list[tuple[str, str, int]]:
    """Candidate answers in one document text: ``(span, kind, sentence index)``.

    Kinds: ``entity`` (capitalised span), ``year``, ``number``.

    Example:
        >>> extract_spans("Maren Oskdal (born 1931) is an engineer. She was born in Cardell.")
        [('Maren Oskdal', 'entity', 0), ('1931', 'year', 0), ('Cardell', 'entity', 1)]
    """
    out: list[tuple[str, str, int]] = []
    for si, sent in enumerate(_SENT.split(text)):
        out.extend((s, k, si) for s, k in _sentence_spans(sent))
    return out


def _sentence_spans(sent: str) -> list[tuple[str, str]]:
    found: list[tuple[int, str, str]] = []
    for m in NAME.finditer(sent):
        stripped = strip_name(m.group(0))
        if stripped:
            found.append((m.end() - len(stripped), stripped, "entity"))
    years = set()
    for m in _YEAR.finditer(sent):
        years.add(m.start())
        found.append((m.start(), m.group(0), "year"))
    for m in _NUMBER.finditer(sent):
        if m.start() not in years:
            found.append((m.start(), m.group(0), "number"))
    return [(span, kind) for _, span, kind in sorted(found, key=lambda t: t[0])]


@dataclass
class Doc:
    """A retrieved document, parsed once.

    Attributes:
        passage: the document.
        key: :func:`~hopgym.corpora.questions.entity_key` of its title (what it is about).
        search: the search (count) that returned it.
        rank: its rank in that search.
        sentences: its parsed sentences.
        depth: its place on the question's chain (0: off the chain; set by the evidence).
    """

    passage: Passage
    key: str
    search: int
    rank: int
    sentences: tuple[Sentence, ...]
    depth: int = 0


@functools.lru_cache(maxsize=32768)
def _parse_text(text: str) -> tuple[Sentence, ...]:
    # Pure and keyed by the text: documents come back in many episodes, parse each once.
    return tuple(
        (sentence_concepts(sent), tuple((s, k, entity_key(s)) for s, k in _sentence_spans(sent)))
        for sent in _SENT.split(text)
    )


@functools.lru_cache(maxsize=32768)
def doc_words(contents: str) -> tuple[str, ...]:
    """The distinct lower-case words of a document (its hashed bag of words)."""
    return tuple(set(WORD.findall(contents.lower())))


def parse_doc(passage: Passage, search: int, rank: int) -> Doc:
    """``passage``, returned at rank ``rank`` by search number ``search``, as a :class:`Doc`."""
    return Doc(passage, entity_key(passage.title), search, rank, _parse_text(passage.text))
