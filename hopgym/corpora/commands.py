"""The ``hopgym index`` and ``hopgym serve`` commands (added to the CLI by :func:`add_commands`).

::

    hopgym index build --corpus wiki18.jsonl --retriever dense --out idx/ [--model M]
                       [--index-type flat|hnsw|ivf] [--force]
    hopgym index info idx/
    hopgym serve --index idx/ [--host 127.0.0.1] [--port 8000]

``--corpus`` takes a FlashRAG corpus jsonl, or a HotpotQA / 2Wiki / MuSiQue file whose paragraphs
are pooled as in the env's open mode (same doc ids), so ``index=idx/`` fits that env.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["add_commands", "cmd_index_build", "cmd_index_info", "cmd_serve"]


def add_commands(subparsers: Any) -> None:
    """Add ``index`` (``build``, ``info``) and ``serve`` to an argparse subparsers object."""
    p = subparsers.add_parser("index", help="build or inspect a saved search index")
    isub = p.add_subparsers(dest="index_command", metavar="{build,info}")
    isub.required = True

    b = isub.add_parser("build", help="index a corpus (BM25, dense or hybrid) into a directory")
    b.add_argument("--corpus", required=True,
                   help="corpus jsonl ({id, contents} or {id, title, text}) or a QA file to pool")
    b.add_argument("--retriever", choices=("bm25", "dense", "hybrid"), default="bm25")
    b.add_argument("--out", required=True, help="index directory to write")
    b.add_argument("--model", default="default",
                   help="embedder for dense/hybrid: 'default' (packaged all-MiniLM-L6-v2), "
                        "a sentence-transformers name or path, or 'hashing-256'")
    b.add_argument("--index-type", choices=("flat", "hnsw", "ivf"), default="flat")
    b.add_argument("--format", default="auto",
                   choices=("auto", "corpus", "hotpotqa", "2wiki", "musique"),
                   help="layout of --corpus (default: detected)")
    b.add_argument("--batch-size", type=int, default=64, help="passages per encoder batch")
    b.add_argument("--threads", type=int, default=1, help="FAISS threads (and torch's)")
    b.add_argument("--limit", type=int, default=None, help="index only the first N passages")
    b.add_argument("--force", action="store_true", help="replace an existing index")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(func=cmd_index_build)

    i = isub.add_parser("info", help="print an index's manifest")
    i.add_argument("index", help="index directory")
    i.set_defaults(func=cmd_index_info)

    s = subparsers.add_parser(
        "serve", help="serve a saved index over HTTP (Search-R1's POST /retrieve)")
    s.add_argument("--index", required=True, help="index directory (hopgym index build)")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: all)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--corpus", default=None, help="the corpus file, if it moved since the build")
    s.add_argument("--model", default=None, help="embedder (default: the index's own)")
    s.add_argument("--topk", type=int, default=3, help="topk when a request gives none")
    s.add_argument("--max-batch", type=int, default=64, help="most queries per engine call")
    s.add_argument("--max-wait-ms", type=float, default=2.0,
                   help="how long to wait for concurrent requests to join a batch")
    s.add_argument("--threads", type=int, default=1, help="FAISS threads")
    s.add_argument("--verbose", action="store_true", help="log every request")
    s.set_defaults(func=cmd_serve)


def _fail(msg: str) -> int:
    print(f"hopgym: error: {msg}", file=sys.stderr)
    return 2


def cmd_index_build(args: argparse.Namespace) -> int:
    """``hopgym index build``: returns the exit status."""
    from hopgym.corpora.index_store import IndexStoreError, build_index
    from hopgym.corpora.loaders import DatasetFormatError
    from hopgym.corpora.retrieval import DependencyNotInstalled

    t0 = time.perf_counter()
    try:
        m = build_index(args.corpus, args.out, retriever=args.retriever, model=args.model,
                        index_type=args.index_type, corpus_format=args.format,
                        batch_size=args.batch_size, show_progress=not args.no_progress,
                        threads=args.threads, overwrite=args.force, limit=args.limit)
    except (IndexStoreError, DatasetFormatError, DependencyNotInstalled, FileNotFoundError,
            ValueError, OSError) as exc:
        return _fail(str(exc))
    print(f"hopgym: indexed {m.num_passages:,} passages ({m.retriever}"
          f"{', ' + m.model if m.model else ''}) into {args.out} in "
          f"{time.perf_counter() - t0:.1f} s")
    return 0


def cmd_index_info(args: argparse.Namespace) -> int:
    """``hopgym index info``: print the manifest as JSON."""
    from hopgym.corpora.index_store import IndexStoreError, read_manifest

    try:
        m = read_manifest(args.index)
    except IndexStoreError as exc:
        return _fail(str(exc))
    print(json.dumps(json.loads(m.to_json()), indent=2))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    """``hopgym serve``: serve until interrupted."""
    from hopgym.corpora.index_store import IndexStoreError
    from hopgym.corpora.retrieval import DependencyNotInstalled
    from hopgym.corpora.server import serve_index

    try:
        serve_index(args.index, host=args.host, port=args.port, corpus=args.corpus,
                    model=args.model, default_topk=args.topk, max_batch=args.max_batch,
                    max_wait_ms=args.max_wait_ms, threads=args.threads, verbose=args.verbose)
    except (IndexStoreError, DependencyNotInstalled, OSError, ValueError) as exc:
        return _fail(str(exc))
    return 0
