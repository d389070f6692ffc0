"""Corpora, datasets and search.

- Types: :class:`Passage`, :class:`QASample`, :class:`Hop`.
- Search: the :class:`Retriever` protocol, :class:`BM25Retriever` (bm25s or rank-bm25); dense
  FAISS, hybrid and HTTP retrievers live in :mod:`hopgym.corpora.dense`, :mod:`.hybrid` and
  :mod:`.http` (extras). Every retriever built from a setting goes through
  :func:`make_retriever` and a :class:`RetrieverSpec`, over a registry of kinds
  (:func:`register_retriever`, :mod:`hopgym.corpora.retrievers`).
- Tasks: :class:`Source` (a named search backend with a cost) and :class:`QATask` (questions plus
  sources).
- Datasets: the synthetic world (:mod:`hopgym.corpora.synthetic`), the tiny hand-written corpus
  (:mod:`hopgym.corpora.tiny`) and real benchmarks and corpora (:mod:`hopgym.corpora.datasets`:
  a registry of formats and one :func:`~hopgym.corpora.datasets.load_dataset`;
  :mod:`hopgym.corpora.loaders` keeps the older names).
"""

from __future__ import annotations

from hopgym.corpora.retrieval import (
    BM25Retriever,
    DependencyNotInstalled,
    RetrievalError,
    Retriever,
    SearchHit,
)
from hopgym.corpora.retrievers import RetrieverSpec, make_retriever, register_retriever
from hopgym.corpora.sources import QATask, Source
from hopgym.corpora.synthetic import KINDS, SyntheticWorld, WorldConfig, build_task, generate_world
from hopgym.corpora.types import Hop, Passage, QASample

__all__ = ["Passage", "QASample", "Hop", "Retriever", "SearchHit", "BM25Retriever",
           "RetrievalError", "DependencyNotInstalled", "Source", "QATask", "WorldConfig", "SyntheticWorld",
           "KINDS", "build_task", "generate_world", "RetrieverSpec", "make_retriever",
           "register_retriever"]
