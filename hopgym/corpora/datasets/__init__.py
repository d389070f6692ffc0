"""Real multi-hop QA benchmarks and retrieval corpora, read from files or the Hugging Face hub.

:func:`load_dataset` reads any registered format (``hotpotqa``, ``2wiki``, ``musique``,
``flashrag``, ``bamboogle``, or ``"auto"`` to detect it) and returns a :class:`QADataset`: the
questions as :class:`~hopgym.corpora.types.QASample`, and the passages they are asked over, in
one of three modes:

- ``"distractor"``: each question keeps its own paragraphs (HotpotQA's and 2Wiki's ten, MuSiQue's
  twenty). Doc ids are ``"{question id}:{title}"`` (``#2``, ``#3``... for a repeated title with
  another text), so they do not depend on the order of the paragraphs, which differs between
  copies of 2Wiki. :class:`~hopgym.retrieval.per_sample.PerSampleIndex` gives each question a
  small index of its own.
- ``"open"``: the paragraphs of the whole file pooled into one corpus, de-duplicated by title and
  text; doc ids are :func:`passage_id` of title and text, the same in every file and run.
- ``"corpus"`` (``corpus=`` given): an external corpus such as wiki-18; gold paragraphs are mapped
  to corpus passages by title (the first passage with that title, i.e. the lead of the article).

Gold: ``supporting_ids`` from HotpotQA / 2Wiki supporting facts (by title) and MuSiQue's
``is_supporting``; ``decomposition`` from MuSiQue's ``question_decomposition``, 2Wiki's evidence
triples, or (HotpotQA) one hop per supporting paragraph with its title as the query; aliases
from MuSiQue's ``answer_aliases`` and FlashRAG's ``golden_answers``.

Files are read lazily, record by record (JSON lines, or a JSON array decoded incrementally;
gzip-compressed files too). A malformed file or record raises :class:`DatasetFormatError`
naming the file, line and field; with ``lenient=True`` a bad record is skipped, counted in
:attr:`QADataset.skipped` and reported by a warning. Hub names (``hotpotqa/hotpot_qa``) are read
through the ``datasets`` library; offline or when the hub cannot be reached, a
:class:`DatasetUnavailableError` says at once which file to download and pass as ``path``.

Modules: ``records`` (JSON reading and the record loop), ``base`` (:class:`DatasetFormat`,
:class:`RawSample`, field checks), one parser per benchmark (``hotpotqa``, ``twowiki``,
``musique``, ``flashrag``), ``corpus`` (corpus files), ``hub`` (hub access), ``assemble`` (modes
and doc ids), ``registry`` (the format table), ``load`` (:func:`load_dataset` and the
per-benchmark shortcuts).

Adding a dataset: a parser module with ``parse(record, file, line) -> RawSample`` (and
``detect(record) -> bool``), and one line, ``register_format(DatasetFormat("name", parse,
detect))``.
"""

from __future__ import annotations

from hopgym.corpora.datasets.assemble import QADataset
from hopgym.corpora.datasets.base import MODES, DatasetFormat, RawSample
from hopgym.corpora.datasets.corpus import iter_corpus, load_corpus, parse_contents, passage_id
from hopgym.corpora.datasets.errors import DatasetFormatError, DatasetUnavailableError
from hopgym.corpora.datasets.hub import is_hub_name
from hopgym.corpora.datasets.load import (
    load_2wiki,
    load_bamboogle,
    load_dataset,
    load_flashrag_qa,
    load_hotpotqa,
    load_musique,
    load_pooled_corpus,
    load_qa,
)
from hopgym.corpora.datasets.records import LoadReport, iter_records
from hopgym.corpora.datasets.registry import (
    REGISTRY,
    detect_format,
    get_format,
    register_format,
    resolve_format,
)

__all__ = [
    "load_dataset",
    "DatasetFormat",
    "RawSample",
    "REGISTRY",
    "register_format",
    "get_format",
    "resolve_format",
    "detect_format",
    "QADataset",
    "LoadReport",
    "DatasetFormatError",
    "DatasetUnavailableError",
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
    "passage_id",
    "parse_contents",
    "is_hub_name",
]
