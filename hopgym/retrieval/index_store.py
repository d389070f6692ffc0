"""Search indexes on disk: build once, reuse everywhere, never silently use a wrong one.

Functions: :func:`build_retriever`, :func:`build_index`, :func:`save_index`, :func:`load_index`,
:func:`verify_index`, :func:`read_manifest`, :func:`index_exists`, :func:`corpus_fingerprint`.
Classes: :class:`Manifest`, :class:`IndexStoreError`, :class:`StaleIndexError`,
:class:`ForeignIndexError`, :class:`CorruptIndexError`, :class:`IndexIntegrityWarning`.

An index directory holds ``manifest.json`` and the engine's files::

    manifest.json        retriever kind, model, parameters, corpus fingerprint, versions, and
                         every file's size and checksums
    bm25/                bm25s arrays (``BM25.save``), loaded memory-mapped
    dense.faiss          ``faiss.write_index`` (``write_index_binary`` for binary codes); read
                         memory-mapped (``IO_FLAG_MMAP_IFC``; ``IO_FLAG_MMAP`` for IVF and
                         IVF-PQ: the inverted lists stay on disk), so server workers on one
                         machine share one copy of its pages
    dense.vectors.npy    only for a compressed index that re-ranks (``rerank``): the float32
                         vectors, read memory-mapped
    passages.jsonl       only when the corpus came from memory rather than a file

The corpus itself is referenced by path (wiki-18 is 14 GB: no copy) and checked on load: the
fingerprint (SHA-256 over every doc id, title and text) must match, or :class:`StaleIndexError`
is raised. Asking for another retriever kind, embedding model or tokenizer than the index was
built with raises :class:`ForeignIndexError`. A dense index file whose codec (index type,
dimension, lists, PQ sub-vectors and bits, OPQ) differs from the manifest's parameters raises
:class:`CorruptIndexError` naming the parameter.

``build_index(..., overwrite=True)`` (``hopgym index build --force``) builds the new index in a
folder beside the old one and swaps it in only when it is complete: a build or save that fails
(a full disk, an unreadable corpus) leaves the old index as it was. The manifest is written
last, so a build that died half-way leaves no loadable index; a directory of index files without
a manifest (a build that died, a deleted manifest) is refused, not silently rebuilt, unless the
caller asks for ``rebuild=True``.

Integrity: the manifest records each file's size, an xxHash3-128 of the whole file (``xxh3``)
and one of a sample of it (``sample``). :func:`load_index` checks them before it loads
(``verify=``, see :data:`VERIFY_MODES`); a file that does not match raises
:class:`CorruptIndexError` naming the file and the command that rebuilds the index.

- ``"sample"`` (the default): sizes, and the xxh3 of up to :data:`SAMPLE_BLOCKS` blocks of
  :data:`SAMPLE_BLOCK` bytes spread evenly over the file (first and last included), i.e. at most
  16 MiB read per file; files up to 16 MiB are read whole. It catches a replaced, overwritten,
  truncated or padded file, and any corruption larger than the gap between two blocks; not a
  single flipped byte in a large file.
- ``"full"``: sizes and the xxh3 of every byte (``hopgym index verify DIR``).
- ``"size"``: sizes only. ``"none"``: no check.

xxHash3 hashes ~30 GB/s on one core (SHA-256 1.7 GB/s), so ``"full"`` costs what reading the
files costs. A manifest written before checksums existed is loaded with an
:class:`IndexIntegrityWarning` and no check; :func:`verify_index` refuses it (rebuild to add them).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from hopgym._atomic import OutputFileError, atomic_directory, check_writable
from hopgym._version import __version__
from hopgym.corpora.types import Passage
from hopgym.errors import HopgymError, InvalidOptionError
from hopgym.retrieval import base as _retrieval
from hopgym.retrieval.base import Retriever
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.retrieval.specs import VECTORS_PATH, RetrieverSpec, make_retriever, persistable_kinds

__all__ = [
    "Manifest",
    "IndexStoreError",
    "StaleIndexError",
    "ForeignIndexError",
    "CorruptIndexError",
    "IndexIntegrityWarning",
    "RETRIEVER_KINDS",
    "VERIFY_MODES",
    "FORMAT_VERSION",
    "corpus_fingerprint",
    "tokenizer_fingerprint",
    "build_retriever",
    "build_index",
    "save_index",
    "load_index",
    "read_manifest",
    "index_exists",
    "holds_index_files",
    "verify_index",
    "rebuild_command",
    "file_checksums",
]

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
#: Retriever kinds an index directory can hold (the registry's persistable kinds, see
#: :func:`~hopgym.retrieval.specs.persistable_kinds`).
RETRIEVER_KINDS = persistable_kinds()


class IndexStoreError(HopgymError, RuntimeError):
    """An index directory cannot be written or read (missing, corrupt, incompatible format)."""


class StaleIndexError(IndexStoreError):
    """The corpus changed since the index was built."""


class ForeignIndexError(IndexStoreError):
    """The index was built with another retriever kind, embedding model or tokenizer."""


class CorruptIndexError(IndexStoreError):
    """An index file is missing, or its size or checksum differs from the manifest's."""


class IndexIntegrityWarning(HopgymError, UserWarning):
    """An index is loaded without checking its files (its manifest records no checksums), or is
    being rebuilt (``rebuild=True``)."""


#: ``verify=`` values, from the most thorough: every byte, a sample, sizes, nothing.
VERIFY_MODES = ("full", "sample", "size", "none")
#: Bytes per block of the sampled checksum.
SAMPLE_BLOCK = 1 << 16
#: Blocks of the sampled checksum (``SAMPLE_BLOCK * SAMPLE_BLOCKS`` = 16 MiB read per file).
SAMPLE_BLOCKS = 256
_CHUNK = 1 << 20


def corpus_fingerprint(passages: Iterable[Passage]) -> str:
    """SHA-256 over doc ids, titles and texts, in order.

    Example:
        >>> a = corpus_fingerprint([Passage("1", "T", "x")])
        >>> a == corpus_fingerprint([Passage("1", "T", "y")]), a[:7]
        (False, 'sha256:')
    """
    h = hashlib.sha256()
    for p in passages:
        # surrogatepass: a lone surrogate (JSON "\ud83d", which the corpus reader accepts) is
        # hashed too; text without one encodes as plain UTF-8.
        h.update(f"{p.doc_id}\x1f{p.title}\x1f{p.text}\x1e".encode("utf-8", "surrogatepass"))
    return "sha256:" + h.hexdigest()


def tokenizer_fingerprint() -> str:
    """Identifies hopgym's BM25 tokenizer (pattern and stopwords): an index built with another
    tokenizer would silently rank differently, so it is refused."""
    src = _retrieval._WORD.pattern + "|" + " ".join(sorted(_retrieval.STOPWORDS))
    return hashlib.sha1(src.encode()).hexdigest()[:12]


def _version() -> str:
    return __version__


@dataclass
class Manifest:
    """What ``manifest.json`` records about an index directory."""

    retriever: str
    corpus_fingerprint: str
    num_passages: int
    model: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    corpus_path: str | None = None
    corpus_format: str | None = None
    hopgym_version: str = field(default_factory=_version)
    format_version: int = FORMAT_VERSION
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    #: ``{relative path: {"size", "xxh3", "sample"}}`` for every file of the index (empty in
    #: manifests written before checksums existed).
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"format": "hopgym-index", **asdict(self)}, indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str) -> Manifest:
        if d.get("format") != "hopgym-index":
            raise IndexStoreError(f"{where} is not a hopgym index manifest")
        if d.get("format_version") != FORMAT_VERSION:
            raise IndexStoreError(
                f"{where} has index format {d.get('format_version')}, this hopgym reads "
                f"{FORMAT_VERSION}: rebuild it with `hopgym index build`"
            )
        try:
            return cls(**{k: d[k] for k in d if k != "format"})
        except TypeError as exc:
            raise IndexStoreError(f"{where} is malformed: {exc}") from None


def index_exists(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` holds a complete index (its manifest exists)."""
    return (Path(path) / MANIFEST).is_file()


#: What :func:`save_index` writes into an index directory besides the manifest.
_DATA_NAMES = ("bm25", "dense.faiss", "dense.vectors.npy", "passages.jsonl")
_VECTORS = "dense.vectors.npy"
#: Where a build writes the re-ranking vectors before :func:`save_index` renames them.
_VECTORS_PART = ".dense.vectors.npy.part"


def _index_files(root: Path) -> list[str]:
    """Relative paths of the index files in ``root`` (the names :func:`save_index` writes)."""
    out: list[Path] = []
    for name in _DATA_NAMES:
        p = root / name
        if p.is_dir():
            out.extend(f for f in p.rglob("*") if f.is_file())
        elif p.is_file():
            out.append(p)
    return sorted(f.relative_to(root).as_posix() for f in out)


def holds_index_files(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` holds files of an index, with or without a manifest."""
    root = Path(path)
    return root.is_dir() and bool(_index_files(root))


def rebuild_command(path: str | os.PathLike[str], manifest: Manifest | None = None) -> str:
    """The ``hopgym index build`` command that rebuilds the index at ``path``.

    Example:
        >>> rebuild_command("idx/")
        'hopgym index build --corpus FILE --out idx/ --force'
    """
    corpus, extra = "FILE", ""
    if manifest is not None:
        if manifest.corpus_path and manifest.corpus_path != "passages.jsonl":
            corpus = manifest.corpus_path
        extra = f" --retriever {manifest.retriever}"
        if manifest.model:
            extra += f" --model {manifest.model}"
    return f"hopgym index build --corpus {corpus}{extra} --out {os.fspath(path)} --force"


def read_manifest(path: str | os.PathLike[str]) -> Manifest:
    """The manifest of an index directory.

    Raises:
        IndexStoreError: no index there, a directory of index files without a manifest (a build
            that died, a deleted manifest: refused rather than trusted), or a broken manifest.
    """
    root = Path(path)
    mf = root / MANIFEST
    if not mf.is_file():
        where = os.fspath(path)
        if root.is_dir() and _index_files(root):
            raise IndexStoreError(
                f"{where} holds index files but no {MANIFEST} (deleted, or a build that died "
                f"half-way): it cannot be checked, so it is not used. Rebuild it with "
                f"rebuild=True (CLI: --rebuild), or `{rebuild_command(path)}`"
            )
        raise IndexStoreError(
            f"no index at {where} (no {MANIFEST}): build one with "
            f"`hopgym index build --corpus FILE --out {where}`"
        )
    try:
        data = json.loads(mf.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise IndexStoreError(f"{mf} is not valid JSON: {exc}") from None
    return Manifest.from_dict(data, str(mf))


# ------------------------------------------------------------------------------- integrity
def _xxh3() -> Any:
    import xxhash

    return xxhash.xxh3_128()


def _sample_digest(path: Path, size: int) -> str:
    h = _xxh3()
    h.update(size.to_bytes(8, "little"))
    with open(path, "rb") as f:
        if size <= SAMPLE_BLOCK * SAMPLE_BLOCKS:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
        else:
            step = (size - SAMPLE_BLOCK) / (SAMPLE_BLOCKS - 1)
            for i in range(SAMPLE_BLOCKS):
                f.seek(round(i * step))
                h.update(f.read(SAMPLE_BLOCK))
    return h.hexdigest()


def _full_digest(path: Path) -> str:
    h = _xxh3()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def file_checksums(path: str | os.PathLike[str]) -> dict[str, int | str]:
    """``{"size", "xxh3", "sample"}`` of one file, as the manifest records them.

    Example:
        >>> import tempfile
        >>> f = Path(tempfile.mkdtemp()) / "x.bin"
        >>> _ = f.write_bytes(b"hopgym")
        >>> sorted(file_checksums(f)), file_checksums(f)["size"]
        (['sample', 'size', 'xxh3'], 6)
    """
    p = Path(path)
    size = p.stat().st_size
    return {"size": size, "xxh3": _full_digest(p), "sample": _sample_digest(p, size)}


def verify_index(
    path: str | os.PathLike[str],
    verify: str = "full",
    manifest: Manifest | None = None,
    *,
    corpus: bool | str | os.PathLike[str] = False,
) -> Manifest:
    """Check an index directory's files against its manifest (and, with ``corpus``, its corpus).

    Args:
        path: the index directory.
        verify: ``"full"``, ``"sample"``, ``"size"`` or ``"none"`` (see the module docstring).
        manifest: the manifest, when already read.
        corpus: also check the corpus as :func:`load_index` does (``True``: the corpus file the
            manifest records; a path: that file, when it moved): ``StaleIndexError`` when it
            changed since the build. An index that records no corpus file has none to check.

    Returns:
        The manifest.

    Raises:
        CorruptIndexError: a file is missing or differs; the message names it and the command
            that rebuilds the index.
        IndexStoreError: no (readable) manifest; or, with ``verify`` other than ``"none"``, one
            that records no checksums (written before they existed): rebuild the index; or,
            with ``corpus``, a corpus file that is not there.
        StaleIndexError: with ``corpus``, the corpus differs from the one the index was built on.
    """
    if verify not in VERIFY_MODES:
        raise InvalidOptionError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
    root = Path(path)
    manifest = read_manifest(root) if manifest is None else manifest
    if verify == "none":
        return manifest
    if not manifest.files:
        raise IndexStoreError(
            f"{os.fspath(path)} records no checksums (built by hopgym "
            f"{manifest.hopgym_version}): rebuild it to add them: "
            f"`{rebuild_command(path, manifest)}`"
        )
    for rel, want in sorted(manifest.files.items()):
        f = root / rel
        problem = None
        if not f.is_file():
            problem = "it is missing"
        else:
            size = f.stat().st_size
            if size != want.get("size"):
                problem = f"it has {size:,} bytes, the manifest says {want.get('size'):,}"
            elif verify == "sample" and _sample_digest(f, size) != want.get("sample"):
                problem = "its sampled checksum differs (same size: overwritten or corrupted)"
            elif verify == "full" and _full_digest(f) != want.get("xxh3"):
                problem = "its checksum differs (same size: overwritten or corrupted)"
        if problem is not None:
            raise CorruptIndexError(
                f"index file {f} does not match {root / MANIFEST}: {problem}. The index cannot "
                f"be trusted; rebuild it with rebuild=True (CLI: --rebuild) or "
                f"`{rebuild_command(path, manifest)}`"
            )
    if verify != "none" and "dense" in manifest.params:
        _dense_codec(root, manifest, mmap=True)
    if corpus is not False and (corpus is not True or manifest.corpus_path is not None):
        given = None if corpus is True else corpus
        _check_corpus(root, manifest, _read_corpus(root, manifest, given), _origin(manifest, given))
    return manifest


def _origin(manifest: Manifest, corpus: str | os.PathLike[str] | None) -> str:
    return f"the corpus file {os.fspath(corpus) if corpus is not None else manifest.corpus_path}"


def _check_corpus(root: Path, manifest: Manifest, passages: Sequence[Passage], origin: str) -> None:
    """The check of :func:`load_index` and :func:`verify_index`: the corpus is the one indexed."""
    where = os.fspath(root)
    if len(passages) != manifest.num_passages or corpus_fingerprint(passages) != manifest.corpus_fingerprint:
        raise StaleIndexError(
            f"{where} is stale: it was built on {manifest.num_passages} passages "
            f"({manifest.corpus_fingerprint[:19]}...), but {origin} has {len(passages)} "
            f"({corpus_fingerprint(passages)[:19]}...). Rebuild it: `hopgym index build --corpus "
            f"FILE --retriever {manifest.retriever} --out {where} --force`"
        )


def _check_on_load(root: Path, manifest: Manifest, verify: str) -> None:
    if verify != "none" and not manifest.files:
        warnings.warn(
            f"{root} records no checksums (built by hopgym {manifest.hopgym_version}): "
            f"its files are not verified. Rebuild it to add them: "
            f"`{rebuild_command(root, manifest)}`",
            IndexIntegrityWarning,
            stacklevel=3,
        )
        return
    verify_index(root, verify, manifest)


# --------------------------------------------------------------------------------- building
def _kind(retriever: Any) -> str:
    kind = "bm25" if isinstance(retriever, BM25Retriever) else getattr(retriever, "kind", None)
    if kind in persistable_kinds():
        return kind
    raise IndexStoreError(
        f"cannot save a {type(retriever).__name__}: only the kinds {persistable_kinds()} persist"
    )


def build_retriever(passages: Sequence[Passage], kind: Any = "bm25", **settings: Any) -> Retriever:
    """A retriever over ``passages``: ``make_retriever(RetrieverSpec.coerce(kind, **settings),
    passages)``.

    Args:
        passages: the corpus.
        kind: a kind (``"bm25"``, ``"dense"``, ``"hybrid"``, ...) or anything
            :meth:`~hopgym.retrieval.specs.RetrieverSpec.coerce` takes.
        **settings: :class:`~hopgym.retrieval.specs.RetrieverSpec` fields (``model``,
            ``index_type``, ``engine``, ``rrf_k``, ``batch_size``, ``show_progress``, ``threads``,
            ...); ``None`` leaves a field at the spec's value.
    """
    spec = RetrieverSpec.coerce(kind, **settings)
    if spec.kind is None:
        spec = replace(spec, kind="bm25")
    return make_retriever(spec, passages)


def _save_bm25(r: BM25Retriever, out: Path) -> dict[str, Any]:
    if r.engine != "bm25s":
        raise IndexStoreError("only the bm25s engine can be saved (rank-bm25 has no index files)")
    r.bm25s_model.save(str(out), show_progress=False)
    return {"engine": "bm25s", "k1": r.k1, "b": r.b, "tokenizer": tokenizer_fingerprint()}


def _save_dense(r: Any, out: Path) -> dict[str, Any]:
    from hopgym.retrieval.dense import import_faiss

    faiss = import_faiss()
    index = r.to_faiss()  # a CPU FAISS file, whatever the backend
    if isinstance(index, faiss.IndexBinary):
        faiss.write_index_binary(index, str(out))
    else:
        faiss.write_index(index, str(out))
    vectors = getattr(r, "rerank_vectors", None)
    if vectors is not None:
        target = out.parent / _VECTORS
        written = Path(vectors.filename) if isinstance(vectors, np.memmap) and vectors.filename else None
        if written is not None and written.parent.resolve() == target.parent.resolve():
            vectors.flush()
            os.replace(written, target)  # built in place (build_index): renamed, not copied
        else:
            copy = np.lib.format.open_memmap(target, "w+", np.float32, vectors.shape)
            for start in range(0, len(vectors), 65536):  # bounded memory, whatever its size
                copy[start : start + 65536] = vectors[start : start + 65536]
            copy.flush()
            del copy
    return dict(r.params)


def _remove_index_files(out: Path) -> None:
    for name in (*_DATA_NAMES, MANIFEST + ".tmp", _VECTORS_PART):
        p = out / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def save_index(
    retriever: Retriever,
    out: str | os.PathLike[str],
    *,
    corpus_path: str | os.PathLike[str] | None = None,
    corpus_format: str | None = None,
    overwrite: bool = False,
) -> Manifest:
    """Write ``retriever`` (BM25 via bm25s, dense, or hybrid) to the directory ``out``.

    Args:
        retriever: a :class:`BM25Retriever`, :class:`~hopgym.retrieval.dense.DenseRetriever` or
            :class:`~hopgym.retrieval.hybrid.HybridRetriever` (of a BM25 and a dense retriever).
        out: the index directory (created).
        corpus_path: the file the passages came from; recorded (absolute) so that ``hopgym serve``
            can reload it. Without one, the passages are written to ``passages.jsonl`` inside.
        corpus_format: how to read ``corpus_path`` again (``corpus``, ``hotpotqa``, ...; see
            :func:`~hopgym.corpora.datasets.load_pooled_corpus`); detected when ``None``.
        overwrite: replace an existing index instead of raising.
    """
    out = Path(out)
    kind = _kind(retriever)
    if index_exists(out):
        if not overwrite:
            raise IndexStoreError(
                f"an index already exists at {out}: pass overwrite=True (CLI: --force) to replace it"
            )
        shutil.rmtree(out)
    elif out.is_dir() and _index_files(out):
        if not overwrite:
            raise IndexStoreError(
                f"{out} holds index files but no {MANIFEST}: pass "
                "overwrite=True (CLI: --force) to replace them"
            )
        _remove_index_files(out)  # without a manifest only hopgym's own names are removed
    out.mkdir(parents=True, exist_ok=True)
    passages: list[Passage] = retriever.passages  # type: ignore[attr-defined]
    params: dict[str, Any] = {}
    model = None
    if kind == "bm25":
        params["bm25"] = _save_bm25(retriever, out / "bm25")  # type: ignore[arg-type]
    elif kind == "dense":
        params["dense"] = _save_dense(retriever, out / "dense.faiss")
        model = retriever.embedder.name  # type: ignore[attr-defined]
    else:
        parts = retriever.retrievers  # type: ignore[attr-defined]
        if (
            len(parts) != 2
            or not isinstance(parts[0], BM25Retriever)
            or getattr(parts[1], "kind", None) != "dense"
        ):
            raise IndexStoreError("only a hybrid of [BM25Retriever, DenseRetriever] can be saved")
        if [p.doc_id for p in parts[0].passages] != [p.doc_id for p in parts[1].passages]:
            raise IndexStoreError("the BM25 and dense parts of the hybrid index other corpora")
        params["bm25"] = _save_bm25(parts[0], out / "bm25")
        params["dense"] = _save_dense(parts[1], out / "dense.faiss")
        params["hybrid"] = retriever.params  # type: ignore[attr-defined]
        model = parts[1].embedder.name
    if corpus_path is None:
        with open(out / "passages.jsonl", "w", encoding="utf-8") as f:
            for p in passages:
                row = {"id": p.doc_id, "title": p.title, "text": p.text}
                line = json.dumps(row, ensure_ascii=False)
                try:
                    line.encode("utf-8")
                except UnicodeEncodeError:  # a lone surrogate: written as JSON's \\udXXX escape
                    line = json.dumps(row)
                f.write(line + "\n")
        cpath, cformat = "passages.jsonl", "corpus"
    else:
        cpath = str(Path(corpus_path).resolve())
        if corpus_format is None:
            from hopgym.corpora.datasets import detect_format

            corpus_format = detect_format(corpus_path)
        cformat = corpus_format
    files = {rel: file_checksums(out / rel) for rel in _index_files(out)}
    manifest = Manifest(
        kind, corpus_fingerprint(passages), len(passages), model, params, cpath, cformat, files=files
    )
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(manifest.to_json(), encoding="utf-8")
    os.replace(tmp, out / MANIFEST)
    return manifest


def build_index(
    corpus: str | os.PathLike[str] | Sequence[Passage],
    out: str | os.PathLike[str],
    *,
    retriever: Any = "bm25",
    corpus_format: str = "auto",
    overwrite: bool = False,
    limit: int | None = None,
    **settings: Any,
) -> Manifest:
    """Build a retriever over a corpus file (or passages) and save it to ``out``.

    A corpus file may be a FlashRAG corpus jsonl or a QA file, whose paragraphs are pooled as in
    open mode (the same doc ids the env uses), see
    :func:`~hopgym.corpora.datasets.load_pooled_corpus`.

    Args:
        corpus: a corpus file, or the passages.
        out: the index directory.
        retriever: a persistable kind (``bm25``, ``dense``, ``hybrid``), or a
            :class:`~hopgym.retrieval.specs.RetrieverSpec` (or its dict).
        corpus_format: layout of a corpus file (``auto``: detected).
        overwrite: replace an existing index.
        limit: index only the first N passages.
        **settings: spec fields beside a kind name (``model``, ``index_type``, ``rrf_k``,
            ``batch_size``, ``show_progress``, ``threads``, ...); ``None`` is ignored.

    Example:
        >>> import tempfile
        >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome is old.")]
        >>> m = build_index(docs, tempfile.mkdtemp() + "/idx")
        >>> m.retriever, m.num_passages
        ('bm25', 2)
    """
    spec = RetrieverSpec.coerce(retriever, **settings)
    if spec.kind is None:
        spec = replace(spec, kind="bm25")
    if spec.kind not in persistable_kinds():
        raise InvalidOptionError(
            f"retriever must be one of {persistable_kinds()} to be saved, got {spec.kind!r}"
        )
    if isinstance(corpus, (str, os.PathLike)):
        from hopgym.corpora.datasets import detect_format, load_pooled_corpus

        fmt = detect_format(corpus) if corpus_format == "auto" else corpus_format
        passages = load_pooled_corpus(corpus, format=fmt, limit=limit)
        path: str | os.PathLike[str] | None = corpus
    else:
        passages, path, fmt = list(corpus)[:limit], None, None
    if not overwrite and index_exists(out):
        raise IndexStoreError(
            f"an index already exists at {os.fspath(out)}: pass overwrite=True (CLI: --force) to replace it"
        )
    if path is not None and limit is not None:
        path = None  # a truncated corpus cannot be re-read from the file: store it
    target = Path(out)
    ours = {*_DATA_NAMES, MANIFEST, MANIFEST + ".tmp", _VECTORS_PART}
    if target.is_dir() and not index_exists(target) and any(p.name not in ours for p in target.iterdir()):
        # A folder holding other files and no index: the index is written into it, beside them
        # (a swap would drop them; there is no old index to keep safe).
        r = make_retriever(spec, passages, cache={VECTORS_PATH: target / _VECTORS_PART})
        return save_index(r, target, corpus_path=path, corpus_format=fmt, overwrite=overwrite)
    if not overwrite and holds_index_files(target):
        raise IndexStoreError(
            f"{target} holds index files but no {MANIFEST}: pass overwrite=True (CLI: --force) "
            "to replace them"
        )
    check_writable(target / MANIFEST)
    # Built beside the old index and swapped in only when complete (atomic_directory): a build
    # or save that fails leaves the old index usable.
    with atomic_directory(target) as stage:
        r = make_retriever(spec, passages, cache={VECTORS_PATH: stage / _VECTORS_PART})
        try:
            manifest = save_index(r, stage, corpus_path=path, corpus_format=fmt, overwrite=True)
        except OSError as exc:
            name = Path(exc.filename).name if getattr(exc, "filename", None) else "its files"
            raise OutputFileError(
                target / name,
                f"the new index could not be saved ({exc.strerror or exc}); "
                f"{'the old index is left as it was' if index_exists(target) else 'nothing was written'}",
            ) from exc
        del r  # its memory-mapped files are closed before the folder moves
    return manifest


# ---------------------------------------------------------------------------------- loading
def _load_bm25(d: Path, passages: list[Passage], params: dict[str, Any], mmap: bool) -> BM25Retriever:
    import bm25s

    if params.get("tokenizer") != tokenizer_fingerprint():
        raise ForeignIndexError(
            f"{d} was built with another BM25 tokenizer ({params.get('tokenizer')}, this hopgym "
            f"has {tokenizer_fingerprint()}): rebuild it with `hopgym index build`"
        )
    try:
        model = bm25s.BM25.load(str(d), mmap=mmap, load_vocab=True, show_progress=False)
    except (OSError, ValueError) as exc:
        raise IndexStoreError(f"cannot read the BM25 index in {d}: {exc}") from None
    if getattr(model, "scores", None) is None or model.scores.get("num_docs") != len(passages):
        raise IndexStoreError(f"the BM25 index in {d} does not hold {len(passages)} passages")
    # Wrap the loaded arrays instead of re-indexing.
    return BM25Retriever.from_bm25s(passages, model, k1=params.get("k1", 1.5), b=params.get("b", 0.75))


def _load_faiss(path: Path, index_type: str, mmap: bool) -> Any:
    from hopgym.retrieval.dense import IVF_TYPES, import_faiss

    faiss = import_faiss()
    if not path.is_file():
        raise IndexStoreError(f"missing {path}: the index directory is incomplete")
    read = faiss.read_index_binary if index_type == "binary" else faiss.read_index
    try:
        if mmap:
            flag = faiss.IO_FLAG_MMAP if index_type in IVF_TYPES else faiss.IO_FLAG_MMAP_IFC
            try:
                return read(str(path), flag)
            except RuntimeError:
                pass  # an index type this FAISS cannot map: read it into memory instead
        return read(str(path))
    except RuntimeError as exc:
        raise CorruptIndexError(
            f"{path} is not a FAISS {index_type} index as the manifest says ({exc})".split("\n")[0]
        ) from None


def _dense_codec(root: Path, manifest: Manifest, mmap: bool) -> tuple[Any, np.ndarray | None]:
    """The dense index file and its re-ranking vectors, checked against the manifest: the
    codec's parameters (:func:`~hopgym.retrieval.dense.check_codec`) and the vectors' shape."""
    from hopgym.retrieval.dense import check_codec

    dp = manifest.params.get("dense", {})
    index_type = dp.get("index_type", "flat")
    path = root / "dense.faiss"
    index = _load_faiss(path, index_type, mmap)
    try:
        check_codec(index, dp, os.fspath(path))
    except ValueError as exc:
        raise CorruptIndexError(
            f"{exc} (in {root / MANIFEST}): the file and the manifest disagree, so the index is "
            f"not used. Rebuild it: `{rebuild_command(root, manifest)}`"
        ) from None
    vectors = None
    if dp.get("rerank"):
        vpath = root / _VECTORS
        try:
            vectors = np.load(vpath, mmap_mode="r" if mmap else None)
        except (OSError, ValueError) as exc:
            raise CorruptIndexError(f"cannot read {vpath} ({exc}): rebuild the index") from None
        _advise_random(vectors)
        want = (manifest.num_passages, dp.get("dim"))
        if vectors.shape != want or vectors.dtype != np.float32:
            raise CorruptIndexError(
                f"{vpath} holds {vectors.dtype} vectors of shape {vectors.shape}, the manifest "
                f"wants float32 {want}: rebuild it: `{rebuild_command(root, manifest)}`"
            )
    return index, vectors


def _advise_random(vectors: np.ndarray) -> None:
    """Tell the kernel that a memory-mapped re-ranking file is read at random rows: no read-ahead
    around a row a short list touches, so a search brings in (and keeps resident) the pages of
    its short list only, not neighbouring megabytes of a file as large as a flat index."""
    import mmap

    region = getattr(vectors, "_mmap", None)  # numpy.memmap's mapping (np.load's mmap_mode)
    advise = getattr(region, "madvise", None)
    if advise is not None and hasattr(mmap, "MADV_RANDOM"):
        advise(mmap.MADV_RANDOM)


def _embedder_for(manifest: Manifest, model: Any, where: str, device: str) -> Any:
    from hopgym.retrieval.dense import _DEFAULT_ALIASES, DEFAULT_MODEL, make_embedder

    want = manifest.model
    if model is None:
        return make_embedder(want or "default", device=device)
    name = model if isinstance(model, str) else model.name
    if isinstance(name, str) and name in _DEFAULT_ALIASES:
        name = DEFAULT_MODEL
    if name != want:
        raise ForeignIndexError(
            f"{where} was built with embedding model {want!r}, not {name!r}: pass model={want!r} "
            "(or leave it unset), or rebuild the index with the model you want"
        )
    return make_embedder(model, device=device)


def load_index(
    path: str | os.PathLike[str],
    *,
    passages: Sequence[Passage] | None = None,
    corpus: str | os.PathLike[str] | None = None,
    retriever: str | None = None,
    model: Any = None,
    mmap: bool = True,
    threads: int | None = 1,
    blas_min_queries: int | None = 4,
    device: str = "cpu",
    index_backend: str = "auto",
    verify: str = "sample",
    rebuild: bool = False,
    nprobe: int | None = None,
    ef_search: int | None = None,
) -> Retriever:
    """Load a saved index, checking its files, and that it fits the corpus and the request.

    Args:
        path: the index directory.
        passages: the corpus the caller will search (e.g. an env's pooled paragraphs); its
            fingerprint must match the manifest's. When ``None`` the corpus is read from
            ``corpus`` or from the path the manifest records, and checked the same way.
        corpus: a corpus file to read instead of the recorded one (it moved).
        retriever: the kind the caller expects (``None``: whatever the index holds).
        model: the embedder the caller expects (``None``: the manifest's model).
        mmap: memory-map the index files where the engine allows.
        threads, blas_min_queries: FAISS settings
            (see :func:`~hopgym.retrieval.dense.configure_threads`).
        device: where the embedder and, where it can, the dense index run (``"cpu"``,
            ``"cuda"``, ``"cuda:N"``, ``"auto"``; see :func:`~hopgym.retrieval.dense.place_index`).
        index_backend: ``"auto"``, ``"faiss"`` or ``"torch"``: the file is the same FAISS file
            for all three; the torch index reads a flat one's rows without copying them on the
            CPU (memory-mapped with ``mmap``) and copies them to a GPU.
        verify: how the files are checked against the manifest first: ``"sample"`` (default),
            ``"full"``, ``"size"`` or ``"none"`` (see the module docstring).
        rebuild: when the index cannot be used as it is (no index, no manifest, a corrupted
            file, a changed corpus), build it again from ``passages``, ``corpus`` or the corpus
            file the manifest records (same kind, model and FAISS index type) instead of raising;
            an :class:`IndexIntegrityWarning` says why. A foreign index is never rebuilt.
        nprobe, ef_search: search an ``ivf``/``ivfpq`` index's ``nprobe`` lists, or an ``hnsw``
            one with ``ef_search`` candidates, instead of the manifest's setting (``None``: the
            manifest's; see :meth:`~hopgym.retrieval.dense.DenseRetriever.set_search`).

    Raises:
        IndexStoreError: no index, a directory of index files without a manifest, or an
            unreadable one.
        CorruptIndexError: a file does not match the manifest.
        StaleIndexError: the corpus differs from the one the index was built on.
        ForeignIndexError: another retriever kind, embedding model or tokenizer.
    """
    if verify not in VERIFY_MODES:
        raise InvalidOptionError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
    settings = {
        "passages": passages,
        "corpus": corpus,
        "retriever": retriever,
        "model": model,
        "mmap": mmap,
        "threads": threads,
        "blas_min_queries": blas_min_queries,
        "device": device,
        "index_backend": index_backend,
        "nprobe": nprobe,
        "ef_search": ef_search,
    }
    try:
        return _load_index(path, verify, **settings)
    except ForeignIndexError:
        raise
    except IndexStoreError as exc:
        if not rebuild:
            raise
        reason = exc
    _rebuild(path, passages, corpus, retriever, model, threads, reason)
    return _load_index(path, "none", **settings)


def _rebuild(
    path: str | os.PathLike[str],
    passages: Sequence[Passage] | None,
    corpus: str | os.PathLike[str] | None,
    retriever: str | None,
    model: Any,
    threads: int | None,
    reason: Exception,
) -> None:
    try:
        manifest: Manifest | None = read_manifest(path)
    except IndexStoreError:
        manifest = None
    source: Any = passages
    fmt = "auto"
    if source is None:
        if corpus is not None:
            source = corpus
        elif manifest is not None and manifest.corpus_path not in (None, "passages.jsonl"):
            source = manifest.corpus_path
            fmt = manifest.corpus_format or "auto"
        else:
            raise IndexStoreError(
                f"cannot rebuild {os.fspath(path)} ({reason}): it records no "
                "corpus file; pass passages= or corpus= (CLI: --corpus)"
            )
    dense = manifest.params.get("dense", {}) if manifest else {}
    codec = ("index_type", "nlist", "nprobe", "pq_m", "pq_bits", "opq", "rerank", "train_size")
    spec = RetrieverSpec(
        kind=retriever or (manifest.retriever if manifest else "bm25"),
        model=model if model is not None else (manifest.model if manifest else None),
        threads=threads,
        **{key: dense[key] for key in codec if key in dense},
    )
    warnings.warn(
        f"rebuilding the {spec.kind} index at {os.fspath(path)} from "
        f"{'the given passages' if passages is not None else source} because: {reason}",
        IndexIntegrityWarning,
        stacklevel=3,
    )
    build_index(source, path, retriever=spec, corpus_format=fmt, overwrite=True)


def _load_index(
    path: str | os.PathLike[str],
    verify: str,
    *,
    passages: Sequence[Passage] | None,
    corpus: str | os.PathLike[str] | None,
    retriever: str | None,
    model: Any,
    mmap: bool,
    threads: int | None,
    blas_min_queries: int | None,
    device: str,
    index_backend: str,
    nprobe: int | None,
    ef_search: int | None,
) -> Retriever:
    root = Path(path)
    where = os.fspath(path)
    manifest = read_manifest(root)
    _check_on_load(root, manifest, verify)
    if retriever is not None and retriever != manifest.retriever:
        raise ForeignIndexError(
            f"{where} holds a {manifest.retriever!r} index, not {retriever!r}: "
            "pass the matching retriever= or build another index"
        )
    if manifest.retriever not in persistable_kinds():
        raise IndexStoreError(f"{where}: unknown retriever kind {manifest.retriever!r}")
    embedder = None
    if manifest.retriever != "bm25":
        from hopgym.retrieval.dense import place_index

        # Before any model or corpus is read: a missing GPU or library fails at once.
        place_index(manifest.params.get("dense", {}).get("index_type", "flat"), device, index_backend)
        embedder = _embedder_for(manifest, model, where, device)
    if passages is None:
        passages = _read_corpus(root, manifest, corpus)
        origin = _origin(manifest, corpus)
    else:
        origin = "the given passages"
    passages = list(passages)
    _check_corpus(Path(path), manifest, passages, origin)
    params = manifest.params
    if manifest.retriever == "bm25":
        if nprobe is not None or ef_search is not None:
            raise InvalidOptionError(
                f"{where} holds a bm25 index: nprobe and ef_search are for dense ivf/ivfpq/hnsw ones"
            )
        return _load_bm25(root / "bm25", passages, params.get("bm25", {}), mmap)
    from hopgym.retrieval.dense import DenseRetriever

    dp = params.get("dense", {})
    assert embedder is not None  # made above for every kind but bm25, which has returned
    if embedder.dim != dp.get("dim"):
        raise ForeignIndexError(
            f"{where} holds {dp.get('dim')}-d vectors; the embedder "
            f"{embedder.name!r} makes {embedder.dim}-d ones"
        )
    index, vectors = _dense_codec(root, manifest, mmap)
    dense = DenseRetriever(
        passages,
        embedder=embedder,
        index=index,
        index_type=dp.get("index_type", "flat"),
        hnsw_m=dp.get("hnsw_m", 32),
        ef_construction=dp.get("ef_construction", 80),
        ef_search=dp.get("ef_search", 64),
        nprobe=dp.get("nprobe", 8),
        pq_m=dp.get("pq_m"),
        pq_bits=dp.get("pq_bits", 8),
        opq=dp.get("opq", False),
        rerank=dp.get("rerank", 0),
        rerank_vectors=vectors,
        seed=dp.get("seed", 0),
        threads=threads,
        blas_min_queries=blas_min_queries,
        device=device,
        index_backend=index_backend,
    )
    try:
        dense.set_search(nprobe=nprobe, ef_search=ef_search)
    except InvalidOptionError as exc:
        raise InvalidOptionError(f"{where}: {exc}") from None
    if manifest.retriever == "dense":
        return dense
    from hopgym.retrieval.hybrid import HybridRetriever

    bm25 = _load_bm25(root / "bm25", passages, params.get("bm25", {}), mmap)
    hp = params.get("hybrid", {})
    return HybridRetriever(
        [bm25, dense], weights=hp.get("weights"), rrf_k=hp.get("rrf_k", 60.0), depth=hp.get("depth", 50)
    )


def _read_corpus(root: Path, manifest: Manifest, corpus: str | os.PathLike[str] | None) -> list[Passage]:
    from hopgym.corpora.datasets import load_pooled_corpus

    if corpus is not None:
        src = Path(corpus)
    elif manifest.corpus_path is None:
        raise IndexStoreError(f"{root} records no corpus: pass passages= or corpus=")
    else:
        src = Path(manifest.corpus_path)
        if not src.is_absolute():
            src = root / src
    if not src.is_file():
        raise IndexStoreError(
            f"the corpus of {root} is not at {src}: pass corpus=<file> (CLI: --corpus) if it moved"
        )
    return load_pooled_corpus(src, format=manifest.corpus_format or "auto")
