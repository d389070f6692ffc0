"""Env factories for real benchmarks: :func:`make_hotpotqa`, :func:`make_2wiki`,
:func:`make_musique`, :func:`make_bamboogle`, :func:`make_multihopqa`; and :func:`load_task`.

They sit behind ``hopgym/HotpotQA-v0``, ``hopgym/2WikiMultiHopQA-v0``, ``hopgym/MuSiQue-v0``,
``hopgym/Bamboogle-v0`` and ``hopgym/MultiHopQA-v0``::

    gym.make("hopgym/HotpotQA-v0", path="hotpot_dev_distractor_v1.json")            # distractor
    gym.make("hopgym/MuSiQue-v0", path="musique_ans_v1.0_dev.jsonl", mode="open",
             retriever="hybrid", index="idx/musique")      # built on first use, then reused
    gym.make("hopgym/Bamboogle-v0", path="bamboogle.jsonl", corpus="wiki18.jsonl",
             retriever="dense")
    gym.make("hopgym/Bamboogle-v0", path="bamboogle.jsonl", retriever="http://127.0.0.1:8000")

Search (``retriever``): ``"bm25"`` (default), ``"dense"``, ``"hybrid"`` in process, or the URL of a
retrieval server (``hopgym serve``, or Search-R1's). ``index`` names a saved index directory: it
is loaded (and refused if stale or foreign) when it exists, and built and saved there when it
does not. ``web`` adds a second source, ``web``, from a URL or an index directory.

Loaded tasks are cached per arguments (and file size and time), so the envs of a vector env
share one corpus and one index; a task pickles as its recipe, so ``AsyncVectorEnv`` workers
rebuild it (or find it in their own cache) rather than receive it through a pipe.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from hopgym.corpora.loaders import (
    PerSampleIndex,
    QADataset,
    is_hub_name,
    load_2wiki,
    load_bamboogle,
    load_flashrag_qa,
    load_hotpotqa,
    load_musique,
    load_qa,
)
from hopgym.corpora.retrieval import BM25Retriever, Retriever
from hopgym.corpora.sources import QATask, Source
from hopgym.corpora.types import Passage

__all__ = [
    "TaskSpec",
    "load_task",
    "clear_task_cache",
    "make_hotpotqa",
    "make_2wiki",
    "make_musique",
    "make_bamboogle",
    "make_multihopqa",
]

_CACHE: OrderedDict[TaskSpec, QATask] = OrderedDict()
_CACHE_SIZE = 8
_LOCK = threading.Lock()

_NEEDS_PATH = {
    "2wiki": "dev.json of 2WikiMultihopQA (https://github.com/Alab-NII/2wikimultihop)",
    "musique": "musique_ans_v1.0_dev.jsonl (https://github.com/StonyBrookNLP/musique)",
    "bamboogle": "bamboogle's test.jsonl from FlashRAG_datasets",
    "flashrag": "a FlashRAG-format QA jsonl ({id, question, golden_answers})",
}


def _is_url(s: str | None) -> bool:
    return isinstance(s, str) and s.startswith(("http://", "https://"))


def _file_key(path: str | None) -> tuple[int, int]:
    if path is None or not os.path.exists(path):
        return (-1, -1)
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class TaskSpec:
    """Everything that determines a dataset task (the cache key and the pickled recipe)."""

    dataset: str
    path: str
    mode: str | None = None
    corpus: str | None = None
    retriever: str | None = None
    index: str | None = None
    model: str | None = None
    index_type: str = "flat"
    engine: str = "bm25s"
    limit: int | None = None
    lenient: bool = False
    web: str | None = None
    web_cost: float = 1.0
    path_key: tuple[int, int] = (-1, -1)
    corpus_key: tuple[int, int] = (-1, -1)


def clear_task_cache() -> None:
    """Forget every cached task (e.g. after editing a dataset file in place)."""
    with _LOCK:
        _CACHE.clear()


def load_task(spec: TaskSpec) -> QATask:
    """The :class:`QATask` for ``spec``, from the cache or freshly built."""
    with _LOCK:
        task = _CACHE.get(spec)
        if task is not None:
            _CACHE.move_to_end(spec)
            return task
    task = _build_task(spec)
    with _LOCK:
        _CACHE[spec] = task
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return task


def _load_dataset(spec: TaskSpec, mode: str | None) -> QADataset:
    kw: dict[str, Any] = {"corpus": spec.corpus, "lenient": spec.lenient, "limit": spec.limit}
    if spec.dataset == "hotpotqa":
        return load_hotpotqa(spec.path, mode=mode, **kw)
    if spec.dataset == "2wiki":
        return load_2wiki(spec.path, mode=mode, **kw)
    if spec.dataset == "musique":
        return load_musique(spec.path, mode=mode, **kw)
    if spec.dataset == "bamboogle":
        return load_bamboogle(spec.path, **kw)
    if spec.dataset == "flashrag":
        from hopgym.corpora.loaders import detect_format

        fmt = "flashrag" if is_hub_name(spec.path) else detect_format(spec.path)
        if fmt == "flashrag":
            return load_flashrag_qa(spec.path, **kw)
        return load_qa(spec.path, format=fmt, mode=None if spec.corpus else mode, **kw)
    raise ValueError(f"unknown dataset {spec.dataset!r}")


class _Build:
    """Picklable ``passages -> Retriever`` for distractor mode's per-question indexes."""

    def __init__(self, kind: str, model: str | None, engine: str) -> None:
        self.kind, self.model, self.engine = kind, model, engine
        self._embedder: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {"kind": self.kind, "model": self.model, "engine": self.engine}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["kind"], state["model"], state["engine"])  # type: ignore[misc]

    def __call__(self, passages: list[Passage]) -> Retriever:
        if self.kind == "bm25":
            return BM25Retriever(passages, engine=self.engine)
        from hopgym.corpora.dense import DenseRetriever, make_embedder
        from hopgym.corpora.hybrid import HybridRetriever

        if self._embedder is None:  # one model for all questions
            self._embedder = make_embedder(self.model or "default")
        dense = DenseRetriever(passages, embedder=self._embedder)
        if self.kind == "dense":
            return dense
        return HybridRetriever([BM25Retriever(passages, engine=self.engine), dense])


def _source_backend(spec: TaskSpec, ds: QADataset, kind: str | None) -> Retriever:
    """The retriever of the ``local`` source in open / corpus mode."""
    from hopgym.corpora import index_store

    if spec.index is not None:
        if index_store.index_exists(spec.index):
            if ds.passages:
                return index_store.load_index(spec.index, passages=ds.passages, retriever=kind,
                                              model=spec.model)
            return index_store.load_index(spec.index, retriever=kind, model=spec.model)
        if not ds.passages:
            raise ValueError(f"{spec.path} has questions only and there is no index at "
                             f"{spec.index}: pass corpus=<corpus jsonl> to build one")
        r = index_store.build_retriever(ds.passages, kind or "bm25", model=spec.model or "default",
                                        index_type=spec.index_type, engine=spec.engine)
        if ds.mode == "corpus":
            index_store.save_index(r, spec.index, corpus_path=ds.corpus_path,
                                   corpus_format="corpus")
        else:
            # The index records the QA file to re-pool it later (hopgym serve); a partial load
            # (limit, skipped records) cannot be re-read that way, so its passages are stored.
            whole = spec.limit is None and ds.skipped == 0
            index_store.save_index(r, spec.index, corpus_path=spec.path if whole else None)
        return r
    if not ds.passages:
        raise ValueError(
            f"{spec.path} has questions only (no paragraphs): pass corpus=<corpus jsonl, e.g. "
            "wiki-18>, index=<saved index dir>, or retriever='http://host:port' (hopgym serve)")
    return index_store.build_retriever(ds.passages, kind or "bm25", model=spec.model or "default",
                                       index_type=spec.index_type, engine=spec.engine)


def _web_source(spec: TaskSpec) -> Source:
    assert spec.web is not None
    if _is_url(spec.web):
        from hopgym.corpora.http import HTTPRetriever

        r: Retriever = HTTPRetriever(spec.web)
        desc = "a remote search service; more coverage, costs more"
    else:
        from hopgym.corpora.index_store import load_index

        r = load_index(spec.web)
        desc = "a larger corpus; more coverage, costs more"
    return Source("web", r, spec.web_cost, desc)


def _build_task(spec: TaskSpec) -> QATask:
    url = spec.retriever if _is_url(spec.retriever) else None
    kind = None if url else spec.retriever
    if kind not in (None, "bm25", "dense", "hybrid"):
        raise ValueError(f"retriever must be 'bm25', 'dense', 'hybrid' or an http:// URL, "
                         f"got {spec.retriever!r}")
    mode = spec.mode
    if url is not None or spec.index is not None:
        if mode == "distractor":
            raise ValueError("mode='distractor' searches each question's own paragraphs in "
                             "memory: it takes no index= or server URL (use mode='open')")
        if mode is None and spec.corpus is None:
            mode = "open"  # a server or index built on this file's pooled paragraphs fits
    ds = _load_dataset(spec, mode)
    name = ds.name
    if ds.mode == "distractor":
        if kind in ("dense", "hybrid"):
            from hopgym.corpora.dense import import_faiss

            import_faiss()  # fail now, not at the first search
        local = Source("local", retriever_factory=PerSampleIndex(
            ds.by_sample, _Build(kind or "bm25", spec.model, spec.engine)),
            description="the question's own paragraphs")
    elif url is not None:
        from hopgym.corpora.http import HTTPRetriever

        local = Source("local", HTTPRetriever(url), description="the retrieval server's corpus")
    else:
        local = Source("local", _source_backend(spec, ds, kind),
                       description="Wikipedia paragraphs" if ds.mode == "corpus"
                       else f"the {name} paragraphs")
    sources = {"local": local}
    if spec.web is not None:
        sources["web"] = _web_source(spec)
    docs = ds.documents if ds.passages else None
    return QATask(name, ds.samples, sources, docs or None, recipe=(load_task, (spec,)))


def _spec(dataset: str, path: str | os.PathLike[str] | None, mode: str | None,
          corpus: str | os.PathLike[str] | None, retriever: str | None,
          index: str | os.PathLike[str] | None, model: str | None, index_type: str, engine: str,
          limit: int | None, lenient: bool, web: str | os.PathLike[str] | None,
          web_cost: float) -> TaskSpec:
    if path is None:
        raise ValueError(f"this env needs path=<file>: download {_NEEDS_PATH[dataset]} and pass "
                         "its path")
    p = os.fspath(path)
    if os.path.exists(p):
        p = str(Path(p).resolve())
    c = str(Path(corpus).resolve()) if corpus is not None else None
    if index_type not in ("flat", "hnsw", "ivf"):
        raise ValueError(f"index_type must be 'flat', 'hnsw' or 'ivf', got {index_type!r}")
    if mode is not None and mode not in ("distractor", "open"):
        raise ValueError(f"mode must be 'distractor' or 'open' (corpus= implies the external "
                         f"corpus), got {mode!r}")
    return TaskSpec(dataset, p, mode, c, retriever,
                    str(Path(index).resolve()) if index is not None else None, model, index_type,
                    engine, limit, lenient,
                    os.fspath(web) if web is not None else None, web_cost,
                    _file_key(p), _file_key(c))


def _env(spec: TaskSpec, reward: str | None, max_turns: int, protocol: Any, top_k: int,
         dedup: bool, max_docs: int | None, doc_chars: int | None, background_k: int,
         max_action_chars: int, render_mode: str | None) -> gym.Env:
    from hopgym.envs.registration import make_task_env

    return make_task_env(load_task(spec), reward=reward, max_turns=max_turns, protocol=protocol,
                         top_k=top_k, dedup=dedup, max_docs=max_docs, doc_chars=doc_chars,
                         background_k=background_k, max_action_chars=max_action_chars,
                         render_mode=render_mode)


def make_hotpotqa(
    path: str | os.PathLike[str] = "hotpotqa/hotpot_qa",
    *,
    mode: str | None = None,
    corpus: str | os.PathLike[str] | None = None,
    retriever: str | None = None,
    index: str | os.PathLike[str] | None = None,
    model: str | None = None,
    index_type: str = "flat",
    engine: str = "bm25s",
    limit: int | None = None,
    lenient: bool = False,
    web: str | os.PathLike[str] | None = None,
    web_cost: float = 1.0,
    reward: str | None = "default",
    max_turns: int = 8,
    protocol: str = "tags",
    top_k: int = 3,
    dedup: bool = True,
    max_docs: int | None = None,
    doc_chars: int | None = None,
    background_k: int = 0,
    max_action_chars: int = 8192,
    render_mode: str | None = None,
) -> gym.Env:
    """HotpotQA as an env (``hopgym/HotpotQA-v0``).

    Args:
        path: the dev/train file (JSON array or jsonl), or a hub name (needs ``datasets``, online).
        mode: ``"distractor"`` (default without ``corpus``: each question searches its own ten
            paragraphs) or ``"open"`` (all paragraphs of the file pooled).
        corpus: an external corpus jsonl (FlashRAG layout, e.g. wiki-18) to search instead.
        retriever: ``"bm25"`` (default), ``"dense"``, ``"hybrid"``, or a server URL.
        index: a saved index directory: loaded (checked) if present, else built and saved there.
        model: embedder for dense/hybrid (``None``: the packaged all-MiniLM-L6-v2, or the index's).
        index_type: FAISS index for dense/hybrid: ``flat``, ``hnsw`` or ``ivf``.
        engine: BM25 engine, ``bm25s`` or ``rank_bm25``.
        limit: use only the first N questions.
        lenient: skip malformed records instead of raising.
        web: a second source ``web``: a server URL or an index directory.
        web_cost: the ``web`` source's cost per search (read by cost rewards).
        reward, max_turns, protocol, top_k, dedup, max_docs, doc_chars, background_k,
            max_action_chars, render_mode: see :func:`hopgym.envs.registration.make_task_env`.
    """
    spec = _spec("hotpotqa", path, mode, corpus, retriever, index, model, index_type, engine,
                 limit, lenient, web, web_cost)
    return _env(spec, reward, max_turns, protocol, top_k, dedup, max_docs, doc_chars,
                background_k, max_action_chars, render_mode)


def make_2wiki(
    path: str | os.PathLike[str] | None = None,
    *,
    mode: str | None = None,
    corpus: str | os.PathLike[str] | None = None,
    retriever: str | None = None,
    index: str | os.PathLike[str] | None = None,
    model: str | None = None,
    index_type: str = "flat",
    engine: str = "bm25s",
    limit: int | None = None,
    lenient: bool = False,
    web: str | os.PathLike[str] | None = None,
    web_cost: float = 1.0,
    reward: str | None = "default",
    max_turns: int = 8,
    protocol: str = "tags",
    top_k: int = 3,
    dedup: bool = True,
    max_docs: int | None = None,
    doc_chars: int | None = None,
    background_k: int = 0,
    max_action_chars: int = 8192,
    render_mode: str | None = None,
) -> gym.Env:
    """2WikiMultihopQA as an env (``hopgym/2WikiMultiHopQA-v0``); arguments as
    :func:`make_hotpotqa` (``path`` is required)."""
    spec = _spec("2wiki", path, mode, corpus, retriever, index, model, index_type, engine,
                 limit, lenient, web, web_cost)
    return _env(spec, reward, max_turns, protocol, top_k, dedup, max_docs, doc_chars,
                background_k, max_action_chars, render_mode)


def make_musique(
    path: str | os.PathLike[str] | None = None,
    *,
    mode: str | None = None,
    corpus: str | os.PathLike[str] | None = None,
    retriever: str | None = None,
    index: str | os.PathLike[str] | None = None,
    model: str | None = None,
    index_type: str = "flat",
    engine: str = "bm25s",
    limit: int | None = None,
    lenient: bool = False,
    web: str | os.PathLike[str] | None = None,
    web_cost: float = 1.0,
    reward: str | None = "default",
    max_turns: int = 8,
    protocol: str = "tags",
    top_k: int = 3,
    dedup: bool = True,
    max_docs: int | None = None,
    doc_chars: int | None = None,
    background_k: int = 0,
    max_action_chars: int = 8192,
    render_mode: str | None = None,
) -> gym.Env:
    """MuSiQue (answerable) as an env (``hopgym/MuSiQue-v0``); arguments as
    :func:`make_hotpotqa` (``path`` is required; distractor mode has twenty paragraphs)."""
    spec = _spec("musique", path, mode, corpus, retriever, index, model, index_type, engine,
                 limit, lenient, web, web_cost)
    return _env(spec, reward, max_turns, protocol, top_k, dedup, max_docs, doc_chars,
                background_k, max_action_chars, render_mode)


def make_bamboogle(
    path: str | os.PathLike[str] | None = None,
    *,
    corpus: str | os.PathLike[str] | None = None,
    retriever: str | None = None,
    index: str | os.PathLike[str] | None = None,
    model: str | None = None,
    index_type: str = "flat",
    engine: str = "bm25s",
    limit: int | None = None,
    lenient: bool = False,
    web: str | os.PathLike[str] | None = None,
    web_cost: float = 1.0,
    reward: str | None = "default",
    max_turns: int = 8,
    protocol: str = "tags",
    top_k: int = 3,
    dedup: bool = True,
    max_docs: int | None = None,
    doc_chars: int | None = None,
    background_k: int = 0,
    max_action_chars: int = 8192,
    render_mode: str | None = None,
) -> gym.Env:
    """Bamboogle (FlashRAG layout) as an env (``hopgym/Bamboogle-v0``).

    Bamboogle has questions and answers only, so search needs ``corpus=`` (e.g. wiki-18),
    ``index=`` (a saved index; its corpus is read from its manifest) or a server URL as
    ``retriever``. Other arguments as :func:`make_hotpotqa`.
    """
    spec = _spec("bamboogle", path, None, corpus, retriever, index, model, index_type, engine,
                 limit, lenient, web, web_cost)
    return _env(spec, reward, max_turns, protocol, top_k, dedup, max_docs, doc_chars,
                background_k, max_action_chars, render_mode)


def make_multihopqa(
    path: str | os.PathLike[str] | None = None,
    *,
    mode: str | None = None,
    corpus: str | os.PathLike[str] | None = None,
    retriever: str | None = None,
    index: str | os.PathLike[str] | None = None,
    model: str | None = None,
    index_type: str = "flat",
    engine: str = "bm25s",
    limit: int | None = None,
    lenient: bool = False,
    web: str | os.PathLike[str] | None = None,
    web_cost: float = 1.0,
    reward: str | None = "default",
    max_turns: int = 8,
    protocol: str = "tags",
    top_k: int = 3,
    dedup: bool = True,
    max_docs: int | None = None,
    doc_chars: int | None = None,
    background_k: int = 0,
    max_action_chars: int = 8192,
    render_mode: str | None = None,
) -> gym.Env:
    """Any supported QA file as an env (``hopgym/MultiHopQA-v0``).

    The layout is detected from the first record: a FlashRAG QA jsonl (``{id, question,
    golden_answers}``, needs ``corpus``/``index``/a server like Bamboogle), or a HotpotQA, 2Wiki
    or MuSiQue file (modes as :func:`make_hotpotqa`).
    """
    spec = _spec("flashrag", path, mode, corpus, retriever, index, model, index_type, engine,
                 limit, lenient, web, web_cost)
    return _env(spec, reward, max_turns, protocol, top_k, dedup, max_docs, doc_chars,
                background_k, max_action_chars, render_mode)
