"""Loading: :func:`load_dataset`, the one entry point over the registry, and the per-benchmark
shortcuts that call it (:func:`load_hotpotqa`, :func:`load_2wiki`, :func:`load_musique`,
:func:`load_flashrag_qa`, :func:`load_bamboogle`, :func:`load_qa`, :func:`load_pooled_corpus`)."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

from hopgym.corpora.datasets.assemble import QADataset, assemble
from hopgym.corpora.datasets.base import MODES, DatasetFormat
from hopgym.corpora.datasets.corpus import load_corpus
from hopgym.corpora.datasets.errors import DatasetFormatError
from hopgym.corpora.datasets.hub import record_source
from hopgym.corpora.datasets.records import LoadReport, records
from hopgym.corpora.datasets.registry import REGISTRY, detect_format, get_format, resolve_format
from hopgym.corpora.types import Passage
from hopgym.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = [
    "load_dataset",
    "load_qa",
    "load_pooled_corpus",
    "load_hotpotqa",
    "load_2wiki",
    "load_musique",
    "load_flashrag_qa",
    "load_bamboogle",
]

PathLike = str | os.PathLike[str]


def _check_mode(fmt: DatasetFormat, path: PathLike, mode: str | None, corpus: PathLike | None) -> str:
    """The mode to load in (``corpus=`` implies ``corpus``), or a ValueError saying what fits."""
    if mode is None:
        return "corpus" if corpus is not None else fmt.default_mode
    if mode not in MODES:
        raise InvalidOptionError(f"mode must be one of {MODES}, got {mode!r}")
    if mode not in fmt.modes:
        raise InvalidOptionError(
            f"{os.fspath(path)} has questions only ({fmt.name}): mode {mode!r} "
            "needs paragraphs (pass corpus= to search an external corpus)"
        )
    if mode == "corpus" and corpus is None and fmt.has_paragraphs:
        raise InvalidOptionError("mode='corpus' needs corpus=<path to a corpus jsonl>")
    if corpus is not None and mode != "corpus":
        raise InvalidOptionError(
            f"corpus= is given, so the mode is 'corpus', not {mode!r}: each question "
            "searches the external corpus (leave mode unset)"
        )
    return mode


def load_dataset(
    format: str | DatasetFormat,
    path: PathLike | None = None,
    *,
    mode: str | None = None,
    corpus: PathLike | None = None,
    limit: int | None = None,
    lenient: bool = False,
    corpus_limit: int | None = None,
    hub_config: str | None = None,
    split: str | None = None,
    **options: Any,
) -> QADataset:
    """Read a QA dataset of a registered format from a file or the Hugging Face hub.

    Args:
        format: a registered format's name (``hotpotqa``, ``2wiki``, ``musique``, ``flashrag``,
            ``bamboogle``, ...), a :class:`DatasetFormat`, or ``"auto"`` (detected from the
            file's first record).
        path: a JSON-lines or JSON-array file (gzip-compressed or not), or a hub name
            (``owner/name``, read through ``datasets``). ``None``: the format's default hub name.
        mode: ``"distractor"`` (each question searches its own paragraphs; the default for
            formats with paragraphs) or ``"open"`` (all paragraphs pooled); ``"corpus"`` is
            implied by ``corpus``. Questions-only formats load in ``corpus`` mode (mode ``none``
            without a corpus).
        corpus: an external corpus jsonl (FlashRAG layout); gold paragraphs mapped by title.
        limit: read at most this many questions.
        lenient: skip malformed records (counted in :attr:`QADataset.skipped`, one warning)
            instead of raising.
        corpus_limit: read at most this many passages of ``corpus``.
        hub_config, split: for hub names (default: the format's).
        options: the format's parser options (``include_unanswerable`` for MuSiQue, ``kind`` and
            ``hops`` for FlashRAG).

    Raises:
        DatasetFormatError: a malformed file or record (names the file, line and field).
        DatasetUnavailableError: a hub name that cannot be read (offline, unknown, no
            ``datasets``); says which file to download instead.
        FileNotFoundError, ValueError: a missing file, or arguments that do not fit.
    """
    fmt = resolve_format(format, path)
    if path is None:
        if fmt.default_hub_name is None:
            raise InvalidOptionError(
                f"{fmt.name} needs path=<file>: download {fmt.download_hint} and pass its path"
            )
        path = fmt.default_hub_name
    unknown = sorted(set(options) - set(fmt.options))
    if unknown:
        raise InvalidOptionTypeError(
            f"the {fmt.name} format takes no option(s) {unknown}; its options: {list(fmt.options) or 'none'}"
        )
    mode = _check_mode(fmt, path, mode, corpus)
    if limit is not None and limit <= 0:
        raise InvalidOptionError(f"limit must be positive, got {limit}")
    parse = functools.partial(fmt.parse, **options) if options else fmt.parse
    source = record_source(
        path,
        fmt,
        hub_config if hub_config is not None else fmt.hub_config,
        split if split is not None else fmt.hub_split,
    )
    where = os.fspath(path)
    report = LoadReport()
    raws = records(source(), where, report, lenient, parse, limit)
    ds = assemble(fmt.name, raws, mode, corpus, where, report, lenient, corpus_limit)
    if not ds.samples:
        raise DatasetFormatError(where, 0, "<file>", "no questions could be read")
    ds.skipped, ds.errors = report.skipped, list(report.errors)
    report.warn(where)
    return ds


def load_hotpotqa(
    path: PathLike = "hotpotqa/hotpot_qa",
    *,
    mode: str | None = None,
    corpus: PathLike | None = None,
    lenient: bool = False,
    limit: int | None = None,
    hub_config: str | None = "distractor",
    split: str = "validation",
) -> QADataset:
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
    return load_dataset(
        "hotpotqa",
        path,
        mode=mode,
        corpus=corpus,
        lenient=lenient,
        limit=limit,
        hub_config=hub_config,
        split=split,
    )


def load_2wiki(
    path: PathLike,
    *,
    mode: str | None = None,
    corpus: PathLike | None = None,
    lenient: bool = False,
    limit: int | None = None,
    hub_config: str | None = None,
    split: str = "validation",
) -> QADataset:
    """2WikiMultihopQA (``dev.json`` array or jsonl): supporting facts by title, evidence hops.

    Paragraph order is irrelevant to ids and gold (it differs between copies of the dataset);
    identical duplicated paragraphs are merged. Arguments as :func:`load_hotpotqa`.
    """
    return load_dataset(
        "2wiki",
        path,
        mode=mode,
        corpus=corpus,
        lenient=lenient,
        limit=limit,
        hub_config=hub_config,
        split=split,
    )


def load_musique(
    path: PathLike,
    *,
    mode: str | None = None,
    corpus: PathLike | None = None,
    lenient: bool = False,
    limit: int | None = None,
    include_unanswerable: bool = False,
    hub_config: str | None = None,
    split: str = "validation",
) -> QADataset:
    """MuSiQue (``musique_ans_v1.0_dev.jsonl``): ``is_supporting`` gold, decomposition, aliases.

    ``#1`` in a sub-question is replaced by the first hop's answer. Records with
    ``answerable: false`` (MuSiQue-Full) are left out unless ``include_unanswerable``.
    Other arguments as :func:`load_hotpotqa`.
    """
    return load_dataset(
        "musique",
        path,
        mode=mode,
        corpus=corpus,
        lenient=lenient,
        limit=limit,
        hub_config=hub_config,
        split=split,
        include_unanswerable=include_unanswerable,
    )


def load_flashrag_qa(
    path: PathLike,
    *,
    corpus: PathLike | None = None,
    lenient: bool = False,
    limit: int | None = None,
    name: str = "flashrag",
    kind: str = "unknown",
    hops: int = 1,
    hub_config: str | None = None,
    split: str = "test",
    corpus_limit: int | None = None,
) -> QADataset:
    """A FlashRAG QA jsonl: ``{id, question, golden_answers}`` (questions and answers only).

    Without ``corpus`` the dataset has no passages (mode ``"none"``): search must come from a
    saved index or a retrieval server. ``name`` labels the dataset; ``kind`` and ``hops`` are
    given to records that do not say.
    """
    fmt = get_format("flashrag")
    if name != fmt.name:
        fmt = dataclasses.replace(fmt, name=name)
    return load_dataset(
        fmt,
        path,
        corpus=corpus,
        lenient=lenient,
        limit=limit,
        hub_config=hub_config,
        split=split,
        corpus_limit=corpus_limit,
        kind=kind,
        hops=hops,
    )


def load_bamboogle(
    path: PathLike,
    *,
    corpus: PathLike | None = None,
    lenient: bool = False,
    limit: int | None = None,
    corpus_limit: int | None = None,
) -> QADataset:
    """Bamboogle in FlashRAG layout: 2-hop compositional questions with answers, no context."""
    return load_dataset(
        "bamboogle", path, corpus=corpus, lenient=lenient, limit=limit, corpus_limit=corpus_limit
    )


def load_qa(
    path: PathLike,
    *,
    format: str = "auto",
    mode: str | None = None,
    corpus: PathLike | None = None,
    lenient: bool = False,
    limit: int | None = None,
) -> QADataset:
    """Any supported QA file by layout (``format="auto"`` detects it from the first record)."""
    if format != "auto" and format not in REGISTRY:
        raise InvalidOptionError(f"format must be 'auto' or one of {tuple(REGISTRY)}, got {format!r}")
    return load_dataset(format, path, mode=mode, corpus=corpus, lenient=lenient, limit=limit)


def load_pooled_corpus(
    path: PathLike, *, format: str = "auto", lenient: bool = False, limit: int | None = None
) -> list[Passage]:
    """Passages of a corpus file, or the pooled (open-mode) paragraphs of a QA file.

    This is what ``hopgym index build --corpus`` indexes: the same doc ids as
    :func:`load_qa` gives in open mode, so a saved index matches the env's corpus.
    """
    name = detect_format(path) if format == "auto" else format
    if name == "corpus":
        return load_corpus(path, lenient=lenient, limit=limit)
    fmt = get_format(name)
    if not fmt.has_paragraphs:
        raise InvalidOptionError(f"{os.fspath(path)} has questions only; index a corpus file instead")
    return load_dataset(fmt, path, mode="open", lenient=lenient).passages[
        : limit if limit is not None else None
    ]
