"""The table of dataset formats: :data:`REGISTRY`, :func:`register_format`, :func:`get_format`,
:func:`detect_format` and :func:`resolve_format`.

Adding a dataset is one parser module (``parse`` and, optionally, ``detect``, as
:mod:`hopgym.corpora.datasets.musique`) and one registration line: ``register_format(
DatasetFormat("mydata", parse, detect, download_hint=...))``, here for a built-in or anywhere for
your own. :func:`~hopgym.corpora.datasets.load_dataset` then reads it by name, and ``"auto"``
detects it from a file's first record.
"""

from __future__ import annotations

import os

from hopgym.corpora.datasets import flashrag, hotpotqa, musique, twowiki
from hopgym.corpora.datasets.base import DatasetFormat
from hopgym.corpora.datasets.corpus import is_corpus_record
from hopgym.corpora.datasets.errors import DatasetFormatError
from hopgym.corpora.datasets.hub import is_hub_name
from hopgym.corpora.datasets.records import BadLine, iter_records
from hopgym.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = ["REGISTRY", "register_format", "get_format", "detect_format", "resolve_format"]

#: Every dataset format, by name, in registration order.
REGISTRY: dict[str, DatasetFormat] = {}


def register_format(fmt: DatasetFormat, *, replace: bool = False) -> DatasetFormat:
    """Add ``fmt`` to :data:`REGISTRY` (a second format of the same name needs ``replace``).

    Detection (:func:`detect_format`) tries the most recently registered format first, so a
    format registered later may refine a more general one (every built-in QA layout is tried
    before FlashRAG's "any record with a question").
    """
    if not isinstance(fmt, DatasetFormat):
        raise InvalidOptionTypeError(f"expected a DatasetFormat, got {type(fmt).__name__}")
    if fmt.name in ("auto", "corpus"):
        raise InvalidOptionError(f"{fmt.name!r} is reserved (format detection and corpus files)")
    if fmt.name in REGISTRY and not replace:
        raise InvalidOptionError(
            f"a dataset format named {fmt.name!r} is already registered (pass replace=True to replace it)"
        )
    REGISTRY.pop(fmt.name, None)
    REGISTRY[fmt.name] = fmt
    return fmt


def get_format(name: str | DatasetFormat) -> DatasetFormat:
    """The registered format ``name`` (a :class:`DatasetFormat` is returned as is)."""
    if isinstance(name, DatasetFormat):
        return name
    try:
        return REGISTRY[name]
    except (KeyError, TypeError):
        raise InvalidOptionError(
            f"unknown dataset format {name!r}; registered: {', '.join(REGISTRY)} "
            "(or 'auto' to detect it from the file)"
        ) from None


def detect_format(path: str | os.PathLike[str]) -> str:
    """The layout of a file from its first record: a registered format's name or ``"corpus"``.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "q.jsonl"
        >>> _ = p.write_text('{"id": "q", "question": "Who?", "golden_answers": ["Ann"]}\\n')
        >>> detect_format(p)
        'flashrag'
    """
    where = os.fspath(path)
    for line, rec in iter_records(path):
        if isinstance(rec, BadLine):
            raise DatasetFormatError(where, line, "<json>", rec.reason)
        if not isinstance(rec, dict):
            raise DatasetFormatError(
                where, line, "<record>", f"expected a JSON object, got {type(rec).__name__}"
            )
        for fmt in reversed(REGISTRY.values()):
            if fmt.detect is not None and fmt.detect(rec):
                return fmt.name
        if is_corpus_record(rec):
            return "corpus"
        raise DatasetFormatError(
            where,
            line,
            "<record>",
            f"unknown layout with fields {sorted(rec)[:8]}; formats: "
            f"{', '.join(REGISTRY)} or a corpus ({{id, contents}})",
        )
    raise DatasetFormatError(where, 0, "<file>", "empty file: no JSON record")


def resolve_format(name: str | DatasetFormat, path: str | os.PathLike[str] | None) -> DatasetFormat:
    """``name``'s format; ``"auto"`` detects it from ``path``.

    A hub name with ``"auto"`` is the format whose ``default_hub_name`` it is, else
    ``flashrag`` (the layout of the FlashRAG_datasets repository). A corpus file is an error
    that says to pass it as ``corpus=``.
    """
    if name != "auto":
        return get_format(name)
    if path is None:
        raise InvalidOptionError("format='auto' needs path=<file> to detect the layout from")
    if is_hub_name(path):
        hub = os.fspath(path)
        return next((f for f in REGISTRY.values() if f.default_hub_name == hub), REGISTRY["flashrag"])
    found = detect_format(path)
    if found == "corpus":
        raise InvalidOptionError(f"{os.fspath(path)} is a corpus, not a QA file: pass it as corpus=")
    return REGISTRY[found]


# The built-in formats, general before specific (detection tries the last registered first).
register_format(flashrag.FORMAT)
register_format(flashrag.BAMBOOGLE)
register_format(hotpotqa.FORMAT)
register_format(twowiki.FORMAT)
register_format(musique.FORMAT)
