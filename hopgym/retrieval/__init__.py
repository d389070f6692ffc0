"""Search: retrievers, their specs and registry, index storage and the retrieval service.

- The :class:`Retriever` protocol and :class:`SearchHit` (:mod:`.base`); in-process BM25
  (:class:`BM25Retriever`, :mod:`.sparse`); dense FAISS (:mod:`.dense`), hybrid (:mod:`.hybrid`)
  and HTTP (:mod:`.http`, the client side of ``hopgym serve``) retrievers (extras).
- Every retriever built from a setting goes through :func:`make_retriever` and a
  :class:`RetrieverSpec`, over a registry of kinds (:func:`register_retriever`, :mod:`.specs`).
- :mod:`.index_store` saves and loads indexes with checksums; :mod:`.query_cache` is the LRU
  query cache; :mod:`.devices` picks CPU or GPU for dense search; :mod:`.per_sample` builds one
  small index per question (distractor mode); :mod:`.serving` is ``hopgym serve``.
"""

from __future__ import annotations

from hopgym.retrieval.base import BatchScoredRetriever, Retriever, SearchHit, tokenize
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.retrieval.specs import RetrieverSpec, make_retriever, register_retriever

__all__ = [
    "Retriever",
    "SearchHit",
    "BatchScoredRetriever",
    "BM25Retriever",
    "tokenize",
    "RetrieverSpec",
    "make_retriever",
    "register_retriever",
]
