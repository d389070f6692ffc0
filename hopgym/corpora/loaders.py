"""Compatibility module: the dataset loaders now live in :mod:`hopgym.corpora.datasets`.

Every name this module had is re-exported unchanged (``load_hotpotqa``, ``load_qa``,
``PerSampleIndex``, ``DatasetFormatError``, ...); new code imports from
:mod:`hopgym.corpora.datasets`, whose :func:`~hopgym.corpora.datasets.load_dataset` reads any
registered format.
"""

from __future__ import annotations

from hopgym.corpora.datasets import (
    MODES,
    DatasetFormatError,
    DatasetUnavailableError,
    LoadReport,
    PerSampleIndex,
    QADataset,
    detect_format,
    is_hub_name,
    iter_corpus,
    iter_records,
    load_2wiki,
    load_bamboogle,
    load_corpus,
    load_flashrag_qa,
    load_hotpotqa,
    load_musique,
    load_pooled_corpus,
    load_qa,
    parse_contents,
    passage_id,
)
from hopgym.corpora.datasets.records import _iter_json_array

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
    "_iter_json_array",
]

#: The QA layouts :func:`load_qa` understood in hopgym 0.1 (the registry may hold more:
#: ``hopgym.corpora.datasets.REGISTRY``).
FORMATS = ("hotpotqa", "2wiki", "musique", "flashrag")
