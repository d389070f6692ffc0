"""Corpus files: FlashRAG / Search-R1 ``{id, contents}`` or ``{id, title, text}`` jsonl
(:func:`iter_corpus`, :func:`load_corpus`), and the ids of paragraphs known only by title and
text (:func:`passage_id`)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

from hopgym.corpora.datasets.base import get_id
from hopgym.corpora.datasets.errors import DatasetFormatError
from hopgym.corpora.datasets.records import LoadReport, iter_records, records
from hopgym.corpora.types import Passage

__all__ = ["passage_id", "parse_contents", "parse_record", "is_corpus_record", "iter_corpus", "load_corpus"]


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


def parse_record(rec: Any, where: str, line: int) -> Passage:
    """One corpus record as a :class:`Passage`."""
    if not isinstance(rec, dict):
        raise DatasetFormatError(where, line, "<record>", f"expected a JSON object, got {type(rec).__name__}")
    doc_id = get_id(rec, ("id", "_id", "docid", "doc_id"), where, line)
    if "contents" in rec:
        contents = rec["contents"]
        if not isinstance(contents, str):
            raise DatasetFormatError(where, line, "contents", "expected a string")
        title, text = parse_contents(contents)
    else:
        given_text = rec.get("text")
        if not isinstance(given_text, str):
            raise DatasetFormatError(
                where, line, "contents", "missing: expected 'contents' or 'title' and 'text'"
            )
        text = given_text
        title = rec.get("title", "")
        if not isinstance(title, str):
            raise DatasetFormatError(where, line, "title", "expected a string")
    return Passage(doc_id, title, text)


def is_corpus_record(rec: dict[str, Any]) -> bool:
    """A corpus record: ``contents``, or ``text`` with an id."""
    return "contents" in rec or ("text" in rec and ("id" in rec or "_id" in rec))


def _iter_lines(
    path: str | os.PathLike[str], lenient: bool, limit: int | None, report: LoadReport
) -> Iterator[tuple[int, Passage]]:
    yield from records(iter_records(path), os.fspath(path), report, lenient, parse_record, limit)


def iter_corpus(
    path: str | os.PathLike[str],
    *,
    lenient: bool = False,
    limit: int | None = None,
    report: LoadReport | None = None,
) -> Iterator[Passage]:
    """Stream passages from a FlashRAG / Search-R1 corpus jsonl (gzip-compressed or not).

    Accepts ``{id, contents}`` (``contents`` = title, newline, text; a quoted title is unquoted)
    and ``{id, title, text}`` (also ``_id``/``docid`` as the id field).

    Args:
        path: the jsonl file.
        lenient: skip malformed records (counted in ``report``) instead of raising.
        limit: stop after this many passages.
        report: collects skipped records.
    """
    rep = report if report is not None else LoadReport()
    for _, p in _iter_lines(path, lenient, limit, rep):
        yield p


def load_corpus(
    path: str | os.PathLike[str],
    *,
    lenient: bool = False,
    limit: int | None = None,
    report: LoadReport | None = None,
) -> list[Passage]:
    """All passages of a corpus jsonl (see :func:`iter_corpus`); duplicate ids are an error.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.jsonl"
        >>> _ = p.write_text('{"id": "0", "contents": "\\\\"Oslo\\\\"\\\\nOslo is a city."}\\n')
        >>> load_corpus(p)
        [Passage(doc_id='0', title='Oslo', text='Oslo is a city.')]
    """
    where = os.fspath(path)
    rep = report if report is not None else LoadReport()
    out: list[Passage] = []
    seen: set[str] = set()
    for line, p in _iter_lines(path, lenient, limit, rep):
        if p.doc_id in seen:
            err = DatasetFormatError(where, line, "id", f"duplicate passage id {p.doc_id!r}")
            if not lenient:
                raise err
            rep.skip(err)
            continue
        seen.add(p.doc_id)
        out.append(p)
    if report is None:
        rep.warn(where)
    return out
