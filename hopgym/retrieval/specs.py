"""Building retrievers: one spec, one function, a registry of kinds.

Classes: :class:`RetrieverSpec` (what to build, one default per setting), :class:`RetrieverKind`
(a registry entry), :class:`RetrieverBuilder` (a picklable ``passages -> Retriever``).
Functions: :func:`make_retriever`, :func:`register_retriever`, :func:`unregister_retriever`,
:func:`retriever_kind`, :func:`retriever_kinds`, :func:`persistable_kinds`.

Every retriever hopgym builds from a setting (an env's ``retriever=``, ``hopgym index build``,
:func:`~hopgym.retrieval.index_store.build_retriever`, distractor mode's per-question indexes) goes
through :func:`make_retriever`, which looks the spec's ``kind`` up in the registry:

==========  ==========================================================================  ========
kind        what it builds                                                              persists
==========  ==========================================================================  ========
``bm25``    :class:`~hopgym.retrieval.sparse.BM25Retriever` (``engine``, ``backend``)  yes
``dense``   :class:`~hopgym.retrieval.dense.DenseRetriever` (``model``, ``index_type``,   yes
            ``device``, ``index_backend``)
``hybrid``  :class:`~hopgym.retrieval.hybrid.HybridRetriever` of the two (``rrf_k``)      yes
``http``    :class:`~hopgym.retrieval.http.HTTPRetriever` on ``urls`` (spread, with       no
            failover; ``timeout``, ``retries``, ``backoff``); it searches the servers'
            corpus, so it takes no passages
==========  ==========================================================================  ========

"Persists" kinds are the ones :mod:`hopgym.retrieval.index_store` saves to an index directory.

Adding a kind is one module plus one registration line::

    def build_tfidf(spec, passages, cache):      # cache: a dict for reusable parts (a model)
        return TfidfRetriever(passages)

    register_retriever("tfidf", build_tfidf)
    gym.make("hopgym/MuSiQue-v1", path=..., mode="open", retriever="tfidf")

Users pass a spec wherever a retriever is chosen, in any form :meth:`RetrieverSpec.coerce` takes:
a kind name (``"dense"``), a server URL (``"http://127.0.0.1:8000"``), a list of URLs, a dict of
fields (``{"kind": "dense", "model": "hashing-256"}``, ``{"url": "http://…", "timeout": 30,
"retries": 5}``) or a :class:`RetrieverSpec`.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from hopgym._kwargs import unknown_name_error
from hopgym.corpora.types import Passage
from hopgym.errors import InvalidOptionError, InvalidOptionTypeError
from hopgym.retrieval.base import Retriever
from hopgym.retrieval.dense import INDEX_TYPES, POOLINGS
from hopgym.retrieval.devices import check_device, check_index_backend
from hopgym.retrieval.query_cache import DEFAULT_CACHE_BYTES, DEFAULT_CACHE_ENTRIES, check_cache_bounds
from hopgym.retrieval.sparse import BM25_BACKENDS, BM25_ENGINES

__all__ = [
    "RetrieverSpec",
    "RetrieverKind",
    "RetrieverBuilder",
    "make_retriever",
    "register_retriever",
    "unregister_retriever",
    "retriever_kind",
    "retriever_kinds",
    "persistable_kinds",
    "DEFAULT_KIND",
]

#: The kind built when a spec names none (a saved index is loaded as whatever kind it holds).
DEFAULT_KIND = "bm25"

#: A ``cache`` key of :func:`make_retriever`: the ``.npy`` file a dense build writes the float
#: vectors a compressed index re-ranks with (``hopgym index build``: inside the index being
#: built), instead of holding them in memory.
VECTORS_PATH = "vectors_path"

#: ``build(spec, passages, cache) -> Retriever``; ``passages`` is ``None`` for remote kinds.
Build = Callable[["RetrieverSpec", "Sequence[Passage] | None", "MutableMapping[Any, Any]"], Retriever]


@dataclass(frozen=True)
class RetrieverKind:
    """A registry entry: how to build one kind of retriever.

    Attributes:
        name: the kind, as users write it (``retriever="dense"``).
        build: ``build(spec, passages, cache) -> Retriever``. ``cache`` is a dict the builder may
            keep expensive, reusable parts in (an embedding model), so that a
            :class:`RetrieverBuilder` making one small index per question loads its model once.
        remote: searches a server at ``spec.urls`` and takes no passages.
        persists: :mod:`hopgym.retrieval.index_store` can save and load it.
        check: ``check(spec)`` raises early when the kind cannot work (a missing dependency), so
            an env fails when it is made rather than at its first search.
    """

    name: str
    build: Build
    remote: bool = False
    persists: bool = False
    check: Callable[[RetrieverSpec], None] | None = None


_KINDS: dict[str, RetrieverKind] = {}


def register_retriever(
    kind: str,
    build: Build,
    *,
    remote: bool = False,
    persists: bool = False,
    check: Callable[[RetrieverSpec], None] | None = None,
    override: bool = False,
) -> RetrieverKind:
    """Register a retriever kind (see :class:`RetrieverKind` for the arguments).

    Raises:
        hopgym.errors.InvalidOptionError: an empty or non-identifier name, or a name already registered
            (unless ``override``).
    """
    if not isinstance(kind, str) or not kind.replace("_", "").replace("-", "").isalnum():
        raise InvalidOptionError(f"a retriever kind must be a non-empty identifier, got {kind!r}")
    if kind in _KINDS and not override:
        raise InvalidOptionError(
            f"retriever kind {kind!r} is already registered (pass override=True to replace it)"
        )
    if not callable(build):
        raise InvalidOptionError(f"the builder of retriever kind {kind!r} must be callable, got {build!r}")
    entry = RetrieverKind(kind, build, remote=remote, persists=persists, check=check)
    _KINDS[kind] = entry
    return entry


def unregister_retriever(kind: str) -> None:
    """Remove a registered kind (``KeyError`` naming it when there is none)."""
    try:
        del _KINDS[kind]
    except KeyError:
        raise KeyError(f"no retriever kind {kind!r} is registered") from None


def retriever_kinds() -> tuple[str, ...]:
    """The registered kinds, in registration order.

    Example:
        >>> retriever_kinds()[:4]
        ('bm25', 'dense', 'hybrid', 'http')
    """
    return tuple(_KINDS)


def persistable_kinds() -> tuple[str, ...]:
    """The kinds an index directory can hold.

    Example:
        >>> persistable_kinds()
        ('bm25', 'dense', 'hybrid')
    """
    return tuple(k for k, e in _KINDS.items() if e.persists)


def retriever_kind(kind: str) -> RetrieverKind:
    """The registry entry of ``kind``; ``ValueError`` listing the kinds when it is unknown."""
    entry = _KINDS.get(kind) if isinstance(kind, str) else None
    if entry is None:
        close = difflib.get_close_matches(str(kind), list(_KINDS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise InvalidOptionError(
            f"retriever must be one of {list(_KINDS)} or an http:// URL, got {kind!r}{hint}"
        )
    return entry


def _is_url(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(("http://", "https://"))


def _setting(default: Any, help: str, cli: str | None = None) -> Any:
    # ``cli``: the help of the command-line option where ``help`` names Python-only values.
    return field(default=default, metadata={"help": help, **({"cli_help": cli} if cli else {})})


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class RetrieverSpec:
    """What retriever to build, with one default per setting.

    Settings a kind does not use are ignored by it (``model`` means nothing to BM25), except
    ``urls``, which only remote kinds take. Remote settings left at ``None`` use the HTTP client's
    own defaults.

    Raises:
        hopgym.errors.InvalidOptionError: an unknown kind or a bad value; the message names the field.

    Example:
        >>> RetrieverSpec.coerce("http://127.0.0.1:8000")
        RetrieverSpec(kind='http', urls=('http://127.0.0.1:8000',))
        >>> RetrieverSpec(kind="dense", index_type="lsh")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
            ...
        hopgym.errors.InvalidOptionError: index_type must be one of ('flat', 'hnsw', 'ivf', ...), got 'lsh'
    """

    kind: str | None = _setting(
        None,
        "retriever kind: bm25, dense, hybrid, http or a registered one (None: bm25, or the "
        "kind a saved index holds)",
        cli="retriever kind: bm25, dense, hybrid, http or a registered one (left out: bm25, or "
        "the kind a saved index holds)",
    )
    engine: str = _setting("bm25s", "BM25 engine: bm25s or rank_bm25 (pure Python; cannot be saved)")
    backend: str = _setting(
        "sparse",
        "bm25s top-k backend: sparse (reads only the query terms' postings), numpy "
        "(scores every passage; the same results, slower) or numba (bm25s' compiled "
        "top-k: ~15 s to compile in each process, ties on rounded scores; needs "
        "hopgym[fast])",
    )
    model: Any = _setting(
        None,
        "embedder for dense/hybrid: 'default' (the packaged all-MiniLM-L6-v2), "
        "'hashing-<dim>', a sentence-transformers name or path, or an Embedder (None: "
        "'default', or the model a saved index was built with)",
        cli="embedder for dense/hybrid: 'default' (the packaged all-MiniLM-L6-v2), "
        "'hashing-<dim>', or a sentence-transformers name or path (left out: 'default', or "
        "the model a saved index was built with)",
    )
    query_prefix: str | None = _setting(
        None,
        "dense/hybrid: text put before each query ('query: ' for E5; None: from the model "
        "name, E5 'query: ', BGE its instruction, else none)",
        cli="dense/hybrid: text put before each query ('query: ' for E5; left out: from the "
        "model name, E5 'query: ', BGE its instruction, else nothing)",
    )
    passage_prefix: str | None = _setting(
        None,
        "dense/hybrid: text put before each passage ('passage: ' for E5; None: from the model name)",
        cli="dense/hybrid: text put before each passage ('passage: ' for E5; left out: from the model name)",
    )
    pooling: str | None = _setting(
        None,
        "dense/hybrid: token vectors to one vector: mean (E5's model card), cls or max (None: "
        "the model's own)",
        cli="dense/hybrid: token vectors to one vector: mean (E5's model card), cls or max "
        "(left out: the model's own)",
    )
    index_type: str = _setting(
        "flat",
        "FAISS index for dense/hybrid: flat (exact), hnsw, ivf, or compressed: ivfpq (product "
        "quantization), sq8 / sq4 (8 / 4 bits a dimension), binary (1 bit a dimension, re-ranked)",
    )
    nlist: int | None = _setting(
        None,
        "ivf/ivfpq: inverted lists (None: 4*sqrt(passages), at most passages/39)",
        cli="ivf/ivfpq: inverted lists (left out: 4*sqrt(passages), at most passages/39)",
    )
    nprobe: int | None = _setting(
        None,
        "ivf/ivfpq: lists searched per query (None: 8 for a new index, a saved index's own)",
        cli="ivf/ivfpq: lists searched per query (left out: 8 for a new index, a saved index's own)",
    )
    ef_search: int | None = _setting(
        None,
        "hnsw: candidates a search keeps (None: 64 for a new index, a saved index's own)",
        cli="hnsw: candidates a search keeps (left out: 64 for a new index, a saved index's own)",
    )
    pq_m: int | None = _setting(
        None,
        "ivfpq: sub-vectors, each coded in pq_bits (None: dim/4); must divide the dimension",
        cli="ivfpq: sub-vectors, each coded in pq_bits (left out: dim/4); must divide the dimension",
    )
    pq_bits: int = _setting(8, "ivfpq: bits per sub-vector code")
    opq: bool = _setting(False, "ivfpq: learn an OPQ rotation before quantizing")
    rerank: int | None = _setting(
        None,
        "compressed indexes: re-rank a short list of this many passages per query with the float "
        "vectors, kept on disk (0: off; None: 100 for binary, else off)",
        cli="compressed indexes: re-rank a short list of this many passages per query with the "
        "float vectors, kept on disk (0: off; left out: 100 for binary, else off)",
    )
    train_size: int | None = _setting(
        None,
        "compressed indexes: passages the quantizer is trained on (None: max(65536, 64*nlist), "
        "at most the corpus)",
        cli="compressed indexes: passages the quantizer is trained on (left out: "
        "max(65536, 64*nlist), at most the corpus)",
    )
    index_backend: str = _setting(
        "auto",
        "what holds the dense index: faiss, torch (an exact flat index as a torch tensor, "
        "one matrix product per batch; flat only) or auto (FAISS on the CPU; on CUDA a "
        "FAISS GPU index when FAISS has GPU support, else torch for flat; hnsw, and ivf "
        "without FAISS GPU support, stay on the CPU)",
    )
    rrf_k: float = _setting(60.0, "hybrid reciprocal-rank fusion constant")
    batch_size: int = _setting(64, "passages per encoder batch")
    threads: int | None = _setting(
        1,
        "FAISS and torch threads for dense/hybrid (None: leave the process's setting)",
        cli="FAISS and torch threads for dense/hybrid (none: leave the process's setting)",
    )
    device: str = _setting(
        "cpu",
        "where dense/hybrid retrieval runs: cpu, cuda, cuda:N or auto (cuda when torch "
        "sees a GPU, else cpu): the encoder (float16 on CUDA) and, where it can, the index "
        "(see index_backend)",
    )
    show_progress: bool = _setting(False, "show a progress bar while encoding passages")
    urls: tuple[str, ...] = _setting(
        (),
        "retrieval server(s) for http: http://host:port (a Search-R1-compatible POST "
        "/retrieve); with several, searches are spread over them and fail over",
    )
    timeout: float | None = _setting(
        None, "http: seconds for connecting and for each read (None: the client's default)"
    )
    retries: int | None = _setting(
        None, "http: further attempts after a failed one (None: the client's default)"
    )
    backoff: float | None = _setting(
        None, "http: seconds before the first retry, doubled each time (None: the client's default)"
    )
    cache_entries: int | None = _setting(
        None,
        f"query cache entries, repeated queries answered without searching (0: off; "
        f"None: {DEFAULT_CACHE_ENTRIES} for in-process kinds, off for http, whose remote "
        f"index may change)",
        cli=f"query cache entries, repeated queries answered without searching (0: off; "
        f"left out or none: {DEFAULT_CACHE_ENTRIES} for in-process kinds, off for http, whose "
        f"remote index may change)",
    )
    cache_bytes: int | None = _setting(
        None,
        f"query cache bytes, estimated (0: off; None: {DEFAULT_CACHE_BYTES >> 20} MiB for "
        f"in-process kinds, off for http)",
        cli=f"query cache bytes, estimated (0: off; left out or none: {DEFAULT_CACHE_BYTES >> 20} "
        f"MiB for in-process kinds, off for http)",
    )

    def __post_init__(self) -> None:
        urls = self.urls
        if isinstance(urls, str):
            urls = (urls,)
        if not isinstance(urls, (tuple, list)):
            raise InvalidOptionError(f"urls must be a URL or a list of URLs, got {urls!r}")
        object.__setattr__(self, "urls", tuple(urls))
        for url in self.urls:
            if not _is_url(url):
                raise InvalidOptionError(f"urls must be http:// or https:// URLs, got {url!r}")
        if self.kind is None and self.urls:
            object.__setattr__(self, "kind", "http")
        if self.kind is not None:
            entry = retriever_kind(self.kind)
            if entry.remote and not self.urls:
                raise InvalidOptionError(f"retriever kind {self.kind!r} needs urls=('http://host:port',)")
            if not entry.remote and self.urls:
                raise InvalidOptionError(
                    f"urls are for a retrieval server (kind 'http'), not for kind {self.kind!r}"
                )
        if self.engine not in BM25_ENGINES:
            raise InvalidOptionError(f"engine must be one of {BM25_ENGINES}, got {self.engine!r}")
        if self.backend not in BM25_BACKENDS:
            raise InvalidOptionError(f"backend must be one of {BM25_BACKENDS}, got {self.backend!r}")
        if self.engine == "rank_bm25" and self.backend != BM25_BACKENDS[0]:  # not the default
            raise InvalidOptionError(
                f"backend={self.backend!r} is a bm25s backend; engine='rank_bm25' has none"
            )
        check_cache_bounds(
            0 if self.cache_entries is None else self.cache_entries,
            0 if self.cache_bytes is None else self.cache_bytes,
        )
        model = self.model
        if not (
            model is None
            or (model if isinstance(model, str) else hasattr(model, "encode") and hasattr(model, "dim"))
        ):
            raise InvalidOptionError(
                f"model must be a model name or path, 'hashing-<dim>', an Embedder "
                f"or None, got {self.model!r}"
            )
        if self.index_type not in INDEX_TYPES:
            raise InvalidOptionError(f"index_type must be one of {INDEX_TYPES}, got {self.index_type!r}")
        if self.pooling is not None and self.pooling not in POOLINGS:
            raise InvalidOptionError(f"pooling must be one of {POOLINGS} or None, got {self.pooling!r}")
        for name in ("query_prefix", "passage_prefix"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), str):
                raise InvalidOptionTypeError(f"{name} must be a string or None, got {getattr(self, name)!r}")
        check_index_backend(self.index_backend, self.index_type)
        if not _number(self.rrf_k) or self.rrf_k < 0:
            raise InvalidOptionError(f"rrf_k must be a number >= 0, got {self.rrf_k!r}")
        for name, low, optional in (
            ("batch_size", 1, False),
            ("threads", 1, True),
            ("retries", 0, True),
            ("nlist", 1, True),
            ("nprobe", 1, True),
            ("ef_search", 1, True),
            ("pq_m", 1, True),
            ("pq_bits", 1, False),
            ("rerank", 0, True),
            ("train_size", 1, True),
        ):
            value = getattr(self, name)
            if (value is None and optional) or (
                isinstance(value, int) and not isinstance(value, bool) and value >= low
            ):
                continue
            want = f"None or an int >= {low}" if optional else f"an int >= {low}"
            raise InvalidOptionError(f"{name} must be {want}, got {value!r}")
        if self.timeout is not None and not (_number(self.timeout) and self.timeout > 0):
            raise InvalidOptionError(f"timeout must be None or a number of seconds > 0, got {self.timeout!r}")
        if self.backoff is not None and not (_number(self.backoff) and self.backoff >= 0):
            raise InvalidOptionError(
                f"backoff must be None or a number of seconds >= 0, got {self.backoff!r}"
            )
        check_device(self.device)
        if not isinstance(self.opq, bool):
            raise InvalidOptionError(f"opq must be True or False, got {self.opq!r}")
        if self.pq_bits > 16:
            raise InvalidOptionError(f"pq_bits must be between 1 and 16, got {self.pq_bits!r}")
        if not isinstance(self.show_progress, bool):
            raise InvalidOptionError(f"show_progress must be True or False, got {self.show_progress!r}")

    def __repr__(self) -> str:
        # Only what differs from the defaults: specs show up in env specs and error messages.
        shown = [
            f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if getattr(self, f.name) != f.default
        ]
        return f"RetrieverSpec({', '.join(shown)})"

    @property
    def resolved_kind(self) -> str:
        """The kind to build (:data:`DEFAULT_KIND` when none was named)."""
        return DEFAULT_KIND if self.kind is None else self.kind

    def cache_bounds(self, remote: bool = False) -> tuple[int, int]:
        """``(entries, bytes)`` of the query cache to build: the settings, or where they are
        ``None`` the default (:data:`~hopgym.retrieval.query_cache.DEFAULT_CACHE_ENTRIES` and
        ``DEFAULT_CACHE_BYTES``; for a ``remote`` kind 0, unless the other bound is given);
        either 0 means off.

        Example:
            >>> RetrieverSpec(cache_entries=0).cache_bounds()[0], RetrieverSpec().cache_bounds(True)
            (0, (0, 0))
        """
        # A remote kind has no cache unless a bound is given; the other bound then defaults.
        on = not remote or self.cache_entries is not None or self.cache_bytes is not None
        entries = (
            self.cache_entries if self.cache_entries is not None else (DEFAULT_CACHE_ENTRIES if on else 0)
        )
        size = self.cache_bytes if self.cache_bytes is not None else (DEFAULT_CACHE_BYTES if on else 0)
        return entries, size

    @property
    def url(self) -> str | None:
        """The first server URL, or ``None``."""
        return self.urls[0] if self.urls else None

    @classmethod
    def coerce(cls, value: Any, **shorthands: Any) -> RetrieverSpec:
        """A spec from what users pass as ``retriever=``, with keyword shorthands on top.

        ``None`` (the defaults), a kind name, an ``http(s)://`` URL (kind ``http``), a list of
        URLs, a dict of fields (``"url"`` is read as ``urls``), or a spec (returned as is).
        ``shorthands`` (an env's ``engine=``, ``model=``, … given beside ``retriever=``) are
        applied by :meth:`updated`: ``None`` leaves a setting as it is.

        Raises:
            hopgym.errors.InvalidOptionTypeError: a dict key that is no field (the closest field is
                suggested), or a value of another type.
            hopgym.errors.InvalidOptionError: an unknown kind or a bad setting.

        Example:
            >>> RetrieverSpec.coerce({"kind": "dense", "model": "hashing-64"}).model
            'hashing-64'
            >>> RetrieverSpec.coerce(["http://a:1", "http://b:2"]).urls
            ('http://a:1', 'http://b:2')
            >>> RetrieverSpec.coerce({"kind": "dense", "modle": "x"})
            Traceback (most recent call last):
                ...
            hopgym.errors.InvalidOptionTypeError: unknown retriever setting 'modle' (did you mean 'model'?)
            >>> RetrieverSpec.coerce("bm25", engine="rank_bm25").engine
            'rank_bm25'
        """
        spec = cls._of(value)
        return spec.updated(**shorthands) if shorthands else spec

    @classmethod
    def _of(cls, value: Any) -> RetrieverSpec:
        if value is None:
            return cls()
        if isinstance(value, RetrieverSpec):
            return value
        if isinstance(value, str):
            if _is_url(value):
                return cls(kind="http", urls=(value,))
            return cls(kind=value)
        if isinstance(value, (list, tuple)):
            return cls(urls=tuple(value))
        if isinstance(value, Mapping):
            settings = dict(value)
            if "url" in settings:
                if "urls" in settings:
                    raise InvalidOptionError("give url or urls, not both")
                settings["urls"] = (settings.pop("url"),)
            names = [f.name for f in fields(cls)]
            for key in settings:
                if key not in names:
                    raise unknown_name_error(key, [*names, "url"], "retriever setting")
            return cls(**settings)
        raise InvalidOptionTypeError(
            f"retriever must be a kind name, a URL, a list of URLs, a dict or a "
            f"RetrieverSpec, got {type(value).__name__} {value!r:.60}"
        )

    def updated(self, **settings: Any) -> RetrieverSpec:
        """This spec with the settings that are not ``None`` replaced.

        For keyword shorthands given beside a spec (an env's ``model=`` beside ``retriever=``): a
        setting the spec already holds with another value is an error, not a silent choice.

        Example:
            >>> RetrieverSpec.coerce("dense").updated(model="hashing-64", engine=None).model
            'hashing-64'
        """
        given = {k: v for k, v in settings.items() if v is not None}
        defaults = {f.name: f.default for f in fields(self)}
        for key, value in given.items():
            if key not in defaults:
                raise unknown_name_error(key, defaults, "retriever setting")
            current = getattr(self, key)
            if current != defaults[key] and current != value:
                raise InvalidOptionError(
                    f"{key} is given twice, as {current!r} in the retriever spec and "
                    f"as {key}={value!r}: give it once"
                )
        return replace(self, **given) if given else self


def make_retriever(
    spec: Any, passages: Sequence[Passage] | None = None, *, cache: MutableMapping[Any, Any] | None = None
) -> Retriever:
    """Build the retriever a spec describes.

    Args:
        spec: anything :meth:`RetrieverSpec.coerce` takes.
        passages: the corpus for in-process kinds; ``None`` for remote ones.
        cache: reusable parts (an embedding model) kept between calls; see :class:`RetrieverKind`.

    Raises:
        hopgym.errors.InvalidOptionError: a bad spec, passages missing for an in-process kind or given to a
            remote one.

    Example:
        >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome is old.")]
        >>> [p.doc_id for p in make_retriever("bm25", docs).search("Rome", k=1)]
        ['b']
    """
    spec = RetrieverSpec.coerce(spec)
    kind = retriever_kind(spec.resolved_kind)
    if kind.remote and passages is not None:
        raise InvalidOptionError(
            f"a {kind.name!r} retriever searches its server's corpus; it takes no passages"
        )
    if not kind.remote and passages is None:
        raise InvalidOptionError(
            f"a {kind.name!r} retriever searches passages in this process: pass passages="
        )
    return kind.build(spec, passages, {} if cache is None else cache)


class RetrieverBuilder:
    """A picklable ``passages -> Retriever`` for one spec (distractor mode's per-question indexes).

    Expensive parts (an embedding model) are built once and kept; they are not pickled, so a
    vector env's worker loads its own. The kind's ``check`` runs on construction, so a missing
    dependency is reported when the env is made.

    Example:
        >>> import pickle
        >>> build = pickle.loads(pickle.dumps(RetrieverBuilder("bm25")))
        >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome is old.")]
        >>> [p.doc_id for p in build(docs).search("Oslo", k=1)]
        ['a']
    """

    def __init__(self, spec: Any = None) -> None:
        self.spec = RetrieverSpec.coerce(spec)
        kind = retriever_kind(self.spec.resolved_kind)
        if kind.remote:
            raise InvalidOptionError(f"a {kind.name!r} retriever cannot index passages")
        if kind.check is not None:
            kind.check(self.spec)
        self._cache: dict[Any, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"RetrieverBuilder({self.spec!r})"

    def __call__(self, passages: Sequence[Passage]) -> Retriever:
        return make_retriever(self.spec, passages, cache=self._cache)


# ----------------------------------------------------------------------------- built-in kinds
def _build_bm25(spec: RetrieverSpec, passages: Any, cache: MutableMapping[Any, Any]) -> Retriever:
    from hopgym.retrieval.sparse import BM25Retriever

    entries, size = spec.cache_bounds()
    return BM25Retriever(
        passages, engine=spec.engine, backend=spec.backend, cache_entries=entries, cache_bytes=size
    )


def _embedder(spec: RetrieverSpec, cache: MutableMapping[Any, Any]) -> Any:
    from hopgym.retrieval.dense import make_embedder

    model = "default" if spec.model is None else spec.model
    key = (
        "embedder",
        model if isinstance(model, str) else id(model),
        spec.device,
        spec.batch_size,
        spec.threads,
        spec.query_prefix,
        spec.passage_prefix,
        spec.pooling,
    )
    if key not in cache:
        cache[key] = make_embedder(
            model,
            device=spec.device,
            batch_size=spec.batch_size,
            threads=spec.threads,
            query_prefix=spec.query_prefix,
            passage_prefix=spec.passage_prefix,
            pooling=spec.pooling,
        )
    return cache[key]


def _build_dense(spec: RetrieverSpec, passages: Any, cache: MutableMapping[Any, Any]) -> Any:
    from hopgym.retrieval.dense import DenseRetriever

    entries, size = spec.cache_bounds()
    return DenseRetriever(
        passages,
        embedder=_embedder(spec, cache),
        index_type=spec.index_type,
        nlist=spec.nlist,
        **{k: getattr(spec, k) for k in ("nprobe", "ef_search") if getattr(spec, k) is not None},
        pq_m=spec.pq_m,
        pq_bits=spec.pq_bits,
        opq=spec.opq,
        rerank=spec.rerank,
        train_size=spec.train_size,
        vectors_path=cache.get(VECTORS_PATH),
        batch_size=spec.batch_size,
        show_progress=spec.show_progress,
        threads=spec.threads,
        device=spec.device,
        index_backend=spec.index_backend,
        cache_entries=entries,
        cache_bytes=size,
    )


def _build_hybrid(spec: RetrieverSpec, passages: Any, cache: MutableMapping[Any, Any]) -> Retriever:
    from hopgym.retrieval.hybrid import HybridRetriever

    # The parts are searched through their uncached primitive: only the fused result is cached.
    parts = replace(spec, cache_entries=0)
    dense = _build_dense(parts, passages, cache)
    entries, size = spec.cache_bounds()
    return HybridRetriever(
        [_build_bm25(parts, dense.passages, cache), dense],
        rrf_k=spec.rrf_k,
        cache_entries=entries,
        cache_bytes=size,
    )


def _build_http(spec: RetrieverSpec, passages: Any, cache: MutableMapping[Any, Any]) -> Retriever:
    from hopgym.retrieval.http import HTTPRetriever

    policy = {k: getattr(spec, k) for k in ("timeout", "retries", "backoff") if getattr(spec, k) is not None}
    retriever = HTTPRetriever(spec.urls, **policy)
    entries, size = spec.cache_bounds(remote=True)
    if entries and size:  # off by default: the server's index may change under the cache
        retriever.configure_cache(entries, size)
    return retriever


def _check_dense(spec: RetrieverSpec) -> None:
    """The device is there and the index backend's libraries are installed."""
    from hopgym.retrieval.dense import place_index

    place_index(spec.index_type, spec.device, spec.index_backend)


register_retriever("bm25", _build_bm25, persists=True)
register_retriever("dense", _build_dense, persists=True, check=_check_dense)
register_retriever("hybrid", _build_hybrid, persists=True, check=_check_dense)
register_retriever("http", _build_http, remote=True)
