"""What a dataset parser module works with: :class:`DatasetFormat`, :class:`RawSample` and the
field checks that turn a bad record into a :class:`DatasetFormatError` naming its field.

A parser is ``parse(record, file, line, **options) -> RawSample | None`` (``None`` leaves the
record out); the loader assigns doc ids to the paragraphs according to the mode and builds the
:class:`~hopgym.corpora.types.QASample`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hopgym.corpora.datasets.errors import DatasetFormatError

__all__ = [
    "MODES",
    "DatasetFormat",
    "RawSample",
    "RawHop",
    "get_field",
    "get_id",
    "get_answers",
    "join_sentences",
    "norm_title",
    "add_paragraph",
]

#: Modes of a QA dataset (``corpus`` is implied by passing ``corpus=``).
MODES = ("distractor", "open", "corpus")

#: A hop before doc ids exist: (sub-question, its answer, index into the paragraphs or None,
#: the search query that finds the paragraph).
RawHop = tuple[str, str, int | None, str]


@dataclass
class RawSample:
    """A parsed record before doc ids are assigned: paragraphs by position.

    Attributes:
        id, question, answers: the question (answers: canonical first, then aliases).
        paragraphs: ``(title, text)`` pairs, de-duplicated within the record (empty for a
            questions-only format).
        support: indices into ``paragraphs`` of the gold supporting paragraphs.
        hops: the gold decomposition (:data:`RawHop` tuples).
        kind, n_hops: question type and hop count.
        metadata: anything else worth keeping (``QASample.metadata``).
    """

    id: str
    question: str
    answers: tuple[str, ...]
    paragraphs: list[tuple[str, str]]
    support: list[int]
    hops: list[RawHop]
    kind: str
    n_hops: int
    metadata: dict[str, Any]


@dataclass(frozen=True)
class DatasetFormat:
    """A dataset layout: how to parse one record, how to recognise it, where to get it.

    Register one with :func:`~hopgym.corpora.datasets.register_format`; then
    :func:`~hopgym.corpora.datasets.load_dataset` reads it by name, and ``format="auto"``
    detects it.

    Attributes:
        name: the registry key and :attr:`QADataset.name`.
        parse: ``(record, file, line, **options) -> RawSample | None``.
        detect: ``record -> bool``, True when a file's first record has this layout; ``None``:
            never detected (the format must be named).
        has_paragraphs: records carry their paragraphs (modes ``distractor``, ``open`` and
            ``corpus``); ``False``: questions only, searched in ``corpus=``, an index or a server.
        default_hub_name: the Hugging Face hub dataset read when no path is given; ``None``: a
            path is required.
        hub_config, hub_split: the hub config and split read for a hub name.
        download_hint: what to download and pass as ``path=`` (shown when there is no path or
            the hub cannot be reached).
        options: the keyword options ``parse`` takes (``load_dataset(..., **options)``).
    """

    name: str
    parse: Callable[..., RawSample | None]
    detect: Callable[[dict[str, Any]], bool] | None = None
    has_paragraphs: bool = True
    default_hub_name: str | None = None
    hub_config: str | None = None
    hub_split: str = "validation"
    download_hint: str = "the dataset file"
    options: tuple[str, ...] = ()

    @property
    def modes(self) -> tuple[str, ...]:
        """The modes this format can be loaded in."""
        return MODES if self.has_paragraphs else ("corpus",)

    @property
    def default_mode(self) -> str:
        """The mode without ``corpus=``: ``distractor``, or ``corpus`` for questions only."""
        return "distractor" if self.has_paragraphs else "corpus"


# ------------------------------------------------------------------------------- field checks
def get_field(
    rec: Any,
    key: str | tuple[str, ...],
    where: str,
    line: int,
    kind: type | tuple[type, ...],
    *,
    optional: bool = False,
) -> Any:
    """``rec[key]`` checked to be a ``kind`` (the first of several alternative keys present).

    Example:
        >>> get_field({"q": 3}, "q", "f.jsonl", 2, str)
        Traceback (most recent call last):
        ...
        hopgym.corpora.datasets.errors.DatasetFormatError: f.jsonl, line 2, field 'q': expected str, got int
    """
    if not isinstance(rec, dict):
        raise DatasetFormatError(where, line, "<record>", f"expected a JSON object, got {type(rec).__name__}")
    keys = (key,) if isinstance(key, str) else key
    for k in keys:
        if k in rec:
            val = rec[k]
            if not isinstance(val, kind):
                kinds = (kind,) if isinstance(kind, type) else kind
                names = "/".join(t.__name__ for t in kinds)
                raise DatasetFormatError(where, line, k, f"expected {names}, got {type(val).__name__}")
            return val
    if optional:
        return None
    raise DatasetFormatError(where, line, keys[0], "missing")


def get_id(rec: dict[str, Any], keys: tuple[str, ...], where: str, line: int) -> str:
    """A record id (a non-empty string or an int) from the first of ``keys`` present."""
    val = get_field(rec, keys, where, line, (str, int))
    if isinstance(val, bool) or str(val) == "":
        raise DatasetFormatError(where, line, keys[0], "empty id")
    return str(val)


def get_answers(first: Any, aliases: Any, where: str, line: int, fname: str) -> tuple[str, ...]:
    """Answers (a string or a list, then aliases) stripped and de-duplicated; at least one."""
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


def join_sentences(sentences: Sequence[str]) -> str:
    """Join sentences as HotpotQA (leading spaces kept) and 2Wiki (none) both need.

    Example:
        >>> join_sentences(["A b.", " C d.", "E f."])
        'A b. C d. E f.'
    """
    out = ""
    for s in sentences:
        if out and not out[-1].isspace() and s and not s[0].isspace():
            out += " "
        out += s
    return out.strip()


def norm_title(t: str) -> str:
    """A title folded for loose matching (case and runs of whitespace)."""
    return re.sub(r"\s+", " ", t).strip().casefold()


def add_paragraph(
    paragraphs: list[tuple[str, str]], index: dict[tuple[str, str], int], title: str, text: str
) -> int:
    """Append ``(title, text)`` unless already there; its index in ``paragraphs``."""
    key = (title, text)
    if key not in index:
        index[key] = len(paragraphs)
        paragraphs.append(key)
    return index[key]
