"""``hopgym index build`` and ``hopgym index info``: save a search index, print its manifest.

``--corpus`` takes a FlashRAG corpus jsonl, or a HotpotQA / 2Wiki / MuSiQue file whose paragraphs
are pooled as in the env's open mode (same doc ids), so ``index=DIR`` fits that env.
Options: :class:`IndexBuildConfig` (defaults from
:func:`hopgym.corpora.index_store.build_index`), :class:`IndexInfoConfig`.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from dataclasses import dataclass, field
from typing import Any

from hopgym.cli._common import CommandError, command_parser
from hopgym.cli._dataclass_args import add_config_arguments, config_from_args
from hopgym.corpora.dense import INDEX_TYPES
from hopgym.corpora.index_store import RETRIEVER_KINDS, build_index

__all__ = ["CORPUS_FORMATS", "IndexBuildConfig", "IndexInfoConfig", "add_parser", "run_build",
           "run_info"]

_BUILD = inspect.signature(build_index).parameters
#: Layouts ``--format`` accepts: a corpus file, or a QA file whose paragraphs are pooled.
CORPUS_FORMATS = ("auto", "corpus", "hotpotqa", "2wiki", "musique")


@dataclass
class IndexBuildConfig:
    """What ``hopgym index build`` indexes, how, and where it writes."""

    corpus: str = field(metadata={
        "help": "Corpus jsonl ({id, contents} or {id, title, text}) or a QA file to pool.",
        "metavar": "FILE"})
    out: str = field(metadata={"help": "Index directory to write.", "metavar": "DIR"})
    retriever: str = field(default=_BUILD["retriever"].default, metadata={
        "help": "Index kind (hybrid: reciprocal-rank fusion of BM25 and dense).",
        "choices": RETRIEVER_KINDS})
    model: str = field(default=_BUILD["model"].default, metadata={
        "help": "Embedder for dense/hybrid: default (the packaged all-MiniLM-L6-v2), a "
                "sentence-transformers name or path, or hashing-256."})
    index_type: str = field(default=_BUILD["index_type"].default, metadata={
        "help": "FAISS index for dense/hybrid.", "choices": INDEX_TYPES})
    format: str = field(default=_BUILD["corpus_format"].default, metadata={
        "help": "Layout of --corpus (auto: detected).", "choices": CORPUS_FORMATS})
    rrf_k: float = field(default=_BUILD["rrf_k"].default, metadata={
        "help": "Reciprocal-rank fusion constant (hybrid)."})
    batch_size: int = field(default=_BUILD["batch_size"].default, metadata={
        "help": "Passages per encoder batch."})
    threads: int | None = field(default=_BUILD["threads"].default, metadata={
        "help": "FAISS and torch threads (none: leave them)."})
    limit: int | None = field(default=_BUILD["limit"].default, metadata={
        "help": "Index only the first N passages."})
    force: bool = field(default=_BUILD["overwrite"].default, metadata={
        "help": "Replace an existing index."})
    progress: bool = field(default=True, metadata={"help": "Show a progress bar."})


@dataclass
class IndexInfoConfig:
    """Which index ``hopgym index info`` describes."""

    index: str = field(metadata={"help": "Index directory.", "positional": True,
                                 "metavar": "INDEX"})


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``index`` (``build``, ``info``) to the ``hopgym`` command."""
    p = command_parser(subparsers, "index", "build or inspect a saved search index")
    sub = p.add_subparsers(dest="index_command", metavar="{build,info}", required=True)
    b = command_parser(sub, "build", "index a corpus (BM25, dense or hybrid) into a directory",
                       "Index a corpus file into a directory (BM25, dense FAISS or hybrid); the "
                       "manifest records the corpus fingerprint, so a stale index is refused.",
                       run=run_build)
    add_config_arguments(b, IndexBuildConfig)
    i = command_parser(sub, "info", "print an index's manifest as JSON", run=run_info)
    add_config_arguments(i, IndexInfoConfig)
    return p


def run_build(args: argparse.Namespace) -> int:
    """Run ``hopgym index build``."""
    from hopgym.corpora.index_store import IndexStoreError
    from hopgym.corpora.loaders import DatasetFormatError

    cfg = config_from_args(args, IndexBuildConfig)
    t0 = time.perf_counter()
    try:
        m = build_index(cfg.corpus, cfg.out, retriever=cfg.retriever, model=cfg.model,
                        index_type=cfg.index_type, corpus_format=cfg.format, rrf_k=cfg.rrf_k,
                        batch_size=cfg.batch_size, show_progress=cfg.progress,
                        threads=cfg.threads, overwrite=cfg.force, limit=cfg.limit)
    except (IndexStoreError, DatasetFormatError, FileNotFoundError, ValueError, OSError) as exc:
        raise CommandError(str(exc)) from None
    print(f"hopgym: indexed {m.num_passages:,} passages ({m.retriever}"
          f"{', ' + m.model if m.model else ''}) into {cfg.out} in "
          f"{time.perf_counter() - t0:.1f} s")
    return 0


def run_info(args: argparse.Namespace) -> int:
    """Run ``hopgym index info``: print the manifest as JSON."""
    from hopgym.corpora.index_store import IndexStoreError, read_manifest

    cfg = config_from_args(args, IndexInfoConfig)
    try:
        m = read_manifest(cfg.index)
    except IndexStoreError as exc:
        raise CommandError(str(exc)) from None
    print(json.dumps(json.loads(m.to_json()), indent=2))
    return 0
