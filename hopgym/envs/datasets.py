"""Env factory for real benchmarks: :func:`make_dataset_env`; the task recipe :class:`TaskSpec`
and :func:`load_task`.

One entry point serves ``hopgym/HotpotQA-v1``, ``hopgym/2WikiMultiHopQA-v1``,
``hopgym/MuSiQue-v1``, ``hopgym/Bamboogle-v1`` and ``hopgym/MultiHopQA-v1``, registered with
``kwargs={"dataset": ...}`` (as Gymnasium registers ``LunarLanderContinuous-v3`` on the
``LunarLander`` entry point); what differs between the datasets is their format in the
registry of :mod:`hopgym.corpora.datasets`::

    gym.make("hopgym/HotpotQA-v1", path="hotpot_dev_distractor_v1.json")            # distractor
    gym.make("hopgym/MuSiQue-v1", path="musique_ans_v1.0_dev.jsonl", mode="open",
             retriever="hybrid", index="idx/musique")      # built on first use, then reused
    gym.make("hopgym/Bamboogle-v1", path="bamboogle.jsonl", corpus="wiki18.jsonl",
             retriever="dense")
    gym.make("hopgym/Bamboogle-v1", path="bamboogle.jsonl",
             retriever={"url": "http://127.0.0.1:8000", "timeout": 30, "retries": 5})

Keyword arguments are of three kinds, and a misspelt one is refused with the closest name:

- the task (:class:`TaskSpec`): ``path``, ``mode``, ``corpus``, ``retriever``, ``index``,
  ``rebuild``, ``start``, ``limit``, ``lenient``, ``web``, ``web_cost``;
- the env options (:class:`~hopgym.envs.options.EnvOptions`): ``protocol``, ``top_k``, ...;
- shorthands for three retriever settings: ``model``, ``index_type``, ``engine`` (the same as
  ``retriever={"model": ...}``; giving a setting both ways with different values is an error).

Search (``retriever``): anything :meth:`~hopgym.retrieval.specs.RetrieverSpec.coerce` takes:
``"bm25"`` (default), ``"dense"``, ``"hybrid"`` or another registered kind in process, the URL of a
retrieval server (``hopgym serve``, or Search-R1's), or a dict / ``RetrieverSpec`` with every
setting, e.g. a server's ``timeout``, ``retries`` and ``backoff``. ``index`` names a saved index
directory: it is loaded (its files checked against the manifest's checksums; refused if
corrupted, stale or foreign) when it exists, and built and saved there when it does not. A
directory of index files without a manifest is refused too, unless ``rebuild=True``, which also
rebuilds a corrupted or stale index. ``web`` adds a second source, ``web``, from a URL or an index directory.

Everything is checked before a file is read. Loaded tasks are cached per :class:`TaskSpec` (which
includes file size and time), so the envs of a vector env share one corpus and one index; a task
pickles as its recipe, so ``AsyncVectorEnv`` workers rebuild it (or find it in their own cache)
rather than receive it through a pipe.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import gymnasium as gym

from hopgym._kwargs import unknown_name_error
from hopgym.corpora.datasets import REGISTRY, QADataset, get_format, load_dataset, resolve_format
from hopgym.envs.options import OPTION_NAMES, EnvKwargs, EnvOptions, Unpack
from hopgym.errors import InvalidOptionError
from hopgym.retrieval.base import Retriever
from hopgym.retrieval.per_sample import PerSampleIndex
from hopgym.retrieval.specs import RetrieverBuilder, RetrieverSpec, make_retriever, retriever_kind
from hopgym.tasks.base import QATask, Source

__all__ = [
    "TaskSpec",
    "DATASETS",
    "DatasetKwargs",
    "load_task",
    "clear_task_cache",
    "make_dataset_env",
]

_CACHE: OrderedDict[TaskSpec, QATask] = OrderedDict()
_CACHE_SIZE = 8
_LOCK = threading.Lock()
_MODES = ("distractor", "open")


#: The ``dataset`` keyword of the registered ids: formats of :data:`hopgym.corpora.datasets.REGISTRY`
#: (which says where each comes from and whether it has paragraphs), and ``"auto"``, detected
#: from the file. ``make_dataset_env`` also takes any other registered format.
DATASETS: tuple[str, ...] = ("hotpotqa", "2wiki", "musique", "bamboogle", "auto")
_AUTO_HINT = "a QA file of a registered format (HotpotQA, 2Wiki, MuSiQue, FlashRAG QA jsonl)"


def _file_key(path: str | None) -> tuple[int, int]:
    if path is None or not os.path.exists(path):
        return (-1, -1)
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns)


def _is_url(s: Any) -> bool:
    return isinstance(s, str) and s.startswith(("http://", "https://"))


def _resolved(path: Any) -> str | None:
    return None if path is None else str(Path(os.fspath(path)).resolve())


def _task(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class TaskSpec:
    """Everything that determines a dataset task: the cache key and the pickled recipe.

    Paths are made absolute, and the sizes and times of ``path`` and ``corpus`` are recorded, so
    an edited file is read again.

    Raises:
        hopgym.errors.InvalidOptionError: an unknown dataset, a missing path (the message says what to
            download) or a bad value; the message names the field.

    Example:
        >>> TaskSpec(dataset="musique")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        hopgym.errors.InvalidOptionError: this env needs path=<file>: download musique_ans_v1.0_dev.jsonl ...
        >>> TaskSpec(dataset="hotpotqa", retriever="dense").retriever
        RetrieverSpec(kind='dense')
    """

    dataset: str = _task(
        "auto", f"which benchmark: a registered dataset format ({', '.join(DATASETS)}, ...) or auto"
    )
    path: str | None = _task(None, "the QA file (JSON array or jsonl), or a hub name")
    mode: str | None = _task(
        None,
        "distractor (each question searches its own paragraphs; the default without "
        "corpus) or open (all paragraphs of the file pooled)",
    )
    corpus: str | None = _task(
        None, "an external corpus jsonl (FlashRAG layout, e.g. wiki-18) to search instead"
    )
    retriever: RetrieverSpec = _task(
        RetrieverSpec(),
        "how to search: a kind (bm25, dense, hybrid), a server URL, a dict of "
        "RetrieverSpec fields or a RetrieverSpec",
    )
    index: str | None = _task(
        None, "a saved index directory: loaded (checked) if present, else built and saved there"
    )
    rebuild: bool = _task(
        False,
        "rebuild the index at index= when it cannot be used as it is (no "
        "manifest, a corrupted file, a changed corpus) instead of "
        "raising",
    )
    start: int = _task(
        0, "skip the first N questions of the file (a slice with limit: questions start .. start+limit-1)"
    )
    limit: int | None = _task(None, "use only N questions (the first N from start)")
    lenient: bool = _task(False, "skip malformed records instead of raising")
    web: str | None = _task(None, "a second source, web: a server URL or an index directory")
    web_cost: float = _task(1.0, "the web source's cost per search (read by cost rewards)")
    path_key: tuple[int, int] = field(default=(-1, -1), init=False, repr=False)
    corpus_key: tuple[int, int] = field(default=(-1, -1), init=False, repr=False)

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        if self.dataset != "auto" and (not isinstance(self.dataset, str) or self.dataset not in REGISTRY):
            raise InvalidOptionError(
                f"dataset must be one of {['auto', *REGISTRY]} (the registered "
                f"dataset formats), got {self.dataset!r}"
            )
        fmt = None if self.dataset == "auto" else get_format(self.dataset)
        path = fmt.default_hub_name if self.path is None and fmt is not None else self.path
        if path is None:
            hint = _AUTO_HINT if fmt is None else fmt.download_hint
            raise InvalidOptionError(f"this env needs path=<file>: download {hint} and pass its path")
        path = os.fspath(path)
        put("path", str(Path(path).resolve()) if os.path.exists(path) else path)
        put("corpus", _resolved(self.corpus))
        put("index", _resolved(self.index))
        put("web", None if self.web is None else os.fspath(self.web))
        put("retriever", RetrieverSpec.coerce(self.retriever))
        if self.mode is not None:
            if fmt is not None and not fmt.has_paragraphs:
                raise InvalidOptionError(
                    f"mode does not apply to {self.dataset!r} (questions only): "
                    "search needs corpus=, index= or a server URL as retriever"
                )
            if self.mode not in _MODES:
                raise InvalidOptionError(
                    f"mode must be 'distractor' or 'open' (corpus= implies the "
                    f"external corpus), got {self.mode!r}"
                )
        if self.mode == "distractor" and (self.remote or self.index is not None):
            raise InvalidOptionError(
                "mode='distractor' searches each question's own paragraphs in "
                "memory: it takes no index= or server URL (use mode='open')"
            )
        if not isinstance(self.start, int) or isinstance(self.start, bool) or self.start < 0:
            raise InvalidOptionError(f"start must be an int >= 0, got {self.start!r}")
        if self.limit is not None and (
            not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1
        ):
            raise InvalidOptionError(f"limit must be None or an int >= 1, got {self.limit!r}")
        if not isinstance(self.lenient, bool):
            raise InvalidOptionError(f"lenient must be True or False, got {self.lenient!r}")
        if not isinstance(self.rebuild, bool):
            raise InvalidOptionError(f"rebuild must be True or False, got {self.rebuild!r}")
        if self.rebuild and self.index is None:
            raise InvalidOptionError("rebuild=True rebuilds a saved index: give index=<dir> too")
        if (
            not isinstance(self.web_cost, (int, float))
            or isinstance(self.web_cost, bool)
            or not self.web_cost >= 0
        ):
            raise InvalidOptionError(f"web_cost must be a number >= 0, got {self.web_cost!r}")
        put("path_key", _file_key(self.path))
        put("corpus_key", _file_key(self.corpus))

    @property
    def remote(self) -> bool:
        """The ``local`` source is a retrieval server."""
        return self.retriever.kind is not None and retriever_kind(self.retriever.kind).remote


#: The keywords :class:`TaskSpec` takes from ``gym.make`` (``dataset`` comes from the id, ``path``
#: is :func:`make_dataset_env`'s own).
TASK_ARGS: tuple[str, ...] = tuple(
    f.name for f in fields(TaskSpec) if f.init and f.name not in ("dataset", "path")
)
#: Keyword shorthands for retriever settings, kept from the first release.
RETRIEVER_SHORTHANDS: tuple[str, ...] = ("model", "index_type", "engine")


class DatasetKwargs(EnvKwargs, total=False):
    """The keywords of the dataset envs (:class:`TaskSpec` fields, the retriever shorthands and
    the env options), for ``**kwargs: Unpack[DatasetKwargs]``; a test keeps them in step."""

    mode: str | None
    corpus: str | os.PathLike[str] | None
    retriever: Any
    index: str | os.PathLike[str] | None
    rebuild: bool
    start: int
    limit: int | None
    lenient: bool
    web: str | os.PathLike[str] | None
    web_cost: float
    model: Any
    index_type: str
    engine: str


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
    fmt = resolve_format(spec.dataset, spec.path)  # "auto": detected from the file
    if not fmt.has_paragraphs or (spec.dataset == "auto" and spec.corpus is not None):
        mode = None  # questions only, or auto with corpus=: the mode follows from corpus=
    read = None if spec.limit is None else spec.start + spec.limit
    ds = load_dataset(fmt, spec.path, mode=mode, corpus=spec.corpus, lenient=spec.lenient, limit=read)
    return _sliced(ds, spec) if spec.start else ds


def _sliced(ds: QADataset, spec: TaskSpec) -> QADataset:
    """The questions from ``spec.start`` on. In distractor mode the skipped questions' paragraphs
    go too; a pooled corpus (open mode, an external corpus) stays as read."""
    if spec.start >= len(ds.samples):
        raise InvalidOptionError(
            f"start={spec.start} skips every question: {spec.path} has "
            f"{len(ds.samples)} questions (that were read)"
        )
    samples = ds.samples[spec.start :]
    if ds.mode != "distractor":
        return replace(ds, samples=samples)
    kept = {s.id for s in samples}
    by_sample = {qid: ps for qid, ps in ds.by_sample.items() if qid in kept}
    doc_ids = {p.doc_id for ps in by_sample.values() for p in ps}
    return replace(
        ds, samples=samples, by_sample=by_sample, passages=[p for p in ds.passages if p.doc_id in doc_ids]
    )


def _source_backend(spec: TaskSpec, ds: QADataset) -> Retriever:
    """The retriever of the ``local`` source in open / corpus mode."""
    from hopgym.retrieval import index_store

    r = spec.retriever
    if spec.corpus is not None and not ds.passages:  # not "questions only": the corpus is empty
        raise InvalidOptionError(
            f"corpus={spec.corpus} holds no passages (an empty file?): give a corpus jsonl with one "
            '{"id", "contents"} record a line'
        )
    if spec.index is not None:
        if index_store.index_exists(spec.index) or index_store.holds_index_files(spec.index):
            # An unnamed kind or model means: whatever the saved index holds. A directory of
            # index files without a manifest is refused there, unless rebuild=True.
            try:
                loaded = index_store.load_index(
                    spec.index,
                    passages=ds.passages or None,
                    retriever=r.kind,
                    model=r.model,
                    device=r.device,
                    index_backend=r.index_backend,
                    nprobe=r.nprobe,
                    ef_search=r.ef_search,
                )
                if hasattr(loaded, "configure_cache"):  # the spec's cache bounds, as if built
                    loaded.configure_cache(*r.cache_bounds())
                return loaded
            except index_store.ForeignIndexError:
                raise
            except index_store.IndexStoreError as exc:
                if not spec.rebuild:
                    raise
                warnings.warn(
                    f"rebuilding the index at {spec.index} because: {exc}",
                    index_store.IndexIntegrityWarning,
                    stacklevel=2,
                )
        if not ds.passages:
            raise InvalidOptionError(
                f"{spec.path} has questions only and there is no index at "
                f"{spec.index}: pass corpus=<corpus jsonl> to build one"
            )
        built = make_retriever(r, ds.passages)
        if ds.mode == "corpus":
            index_store.save_index(
                built, spec.index, corpus_path=ds.corpus_path, corpus_format="corpus", overwrite=spec.rebuild
            )
        else:
            # The index records the QA file to re-pool it later (hopgym serve); a partial load
            # (start, limit, skipped records) cannot be re-read that way, so its passages are
            # stored.
            whole = spec.limit is None and spec.start == 0 and ds.skipped == 0
            index_store.save_index(
                built, spec.index, corpus_path=spec.path if whole else None, overwrite=spec.rebuild
            )
        return built
    if not ds.passages:
        raise InvalidOptionError(
            f"{spec.path} has questions only (no paragraphs): pass corpus=<corpus jsonl, e.g. "
            "wiki-18>, index=<saved index dir>, or retriever='http://host:port' (hopgym serve)"
        )
    return make_retriever(r, ds.passages)


def _web_source(spec: TaskSpec) -> Source:
    assert spec.web is not None
    if _is_url(spec.web):
        r: Retriever = make_retriever(spec.web)
        desc = "a remote search service; more coverage, costs more"
    else:
        from hopgym.retrieval.index_store import load_index

        r = load_index(spec.web)
        desc = "a larger corpus; more coverage, costs more"
    return Source("web", r, spec.web_cost, desc)


def _build_task(spec: TaskSpec) -> QATask:
    mode = spec.mode
    if (spec.remote or spec.index is not None) and mode is None and spec.corpus is None:
        mode = "open"  # a server or index built on this file's pooled paragraphs fits
    check = retriever_kind(spec.retriever.resolved_kind).check
    if check is not None:
        check(spec.retriever)  # a missing dependency fails now, not after the file is read
    ds = _load_dataset(spec, mode)
    if ds.mode == "distractor":
        local = Source(
            "local",
            retriever_factory=PerSampleIndex(ds.by_sample, RetrieverBuilder(spec.retriever)),
            description="the question's own paragraphs",
        )
    elif spec.remote:
        local = Source("local", make_retriever(spec.retriever), description="the retrieval server's corpus")
    else:
        local = Source(
            "local",
            _source_backend(spec, ds),
            description="Wikipedia paragraphs" if ds.mode == "corpus" else f"the {ds.name} paragraphs",
        )
    sources = {"local": local}
    if spec.web is not None:
        sources["web"] = _web_source(spec)
    docs = ds.documents if ds.passages else None
    return QATask(ds.name, ds.samples, sources, docs or None, recipe=(load_task, (spec,)))


def _split_kwargs(dataset: str, path: Any, kwargs: dict[str, Any]) -> tuple[TaskSpec, EnvOptions]:
    """The task and the env options from ``gym.make``'s keywords, all checked, nothing read."""
    task_kw: dict[str, Any] = {}
    shorthand: dict[str, Any] = {}
    option_kw: dict[str, Any] = {}
    for key, value in kwargs.items():
        if key in TASK_ARGS:
            task_kw[key] = value
        elif key in RETRIEVER_SHORTHANDS:
            shorthand[key] = value
        elif key in OPTION_NAMES:
            option_kw[key] = value
        else:
            raise unknown_name_error(
                key, ("dataset", "path", *TASK_ARGS, *RETRIEVER_SHORTHANDS, *OPTION_NAMES)
            )
    options = EnvOptions.from_kwargs(option_kw).resolved()
    task_kw["retriever"] = RetrieverSpec.coerce(task_kw.get("retriever"), **shorthand)
    return TaskSpec(dataset=dataset, path=path, **task_kw), options


def make_dataset_env(
    dataset: str = "auto", path: str | os.PathLike[str] | None = None, **kwargs: Unpack[DatasetKwargs]
) -> gym.Env:
    """A benchmark file as an env: the entry point of every dataset id.

    Args:
        dataset: a registered dataset format, or ``"auto"`` (the registered ids set it).
        path: the QA file (``hotpotqa`` defaults to its hub name, read through ``datasets``).
        **kwargs: :class:`TaskSpec` fields (``mode``, ``corpus``, ``retriever``, ``index``,
            ``rebuild``, ``start``, ``limit``, ``lenient``, ``web``, ``web_cost``), the retriever
            shorthands ``model``, ``index_type``, ``engine``, and the env options
            (:class:`~hopgym.envs.options.EnvOptions`).

    Raises:
        hopgym.errors.InvalidOptionTypeError: an unknown keyword (the closest known one is suggested).
        hopgym.errors.InvalidOptionError: a bad value, before any file is read.
    """
    from hopgym.envs.registration import make_task_env

    spec, options = _split_kwargs(dataset, path, dict(kwargs))
    return make_task_env(load_task(spec), options)
