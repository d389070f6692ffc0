"""``hopgym serve``: serve a saved index over HTTP (Search-R1's ``POST /retrieve``).

Options: :class:`ServeConfig` (defaults from :func:`hopgym.corpora.server.serve_index`).
"""

from __future__ import annotations

import argparse
import inspect
from dataclasses import dataclass, field
from typing import Any

from hopgym.cli._common import CommandError, command_parser
from hopgym.cli._dataclass_args import add_config_arguments, config_from_args
from hopgym.corpora.server import serve_index

__all__ = ["ServeConfig", "add_parser", "run"]

_SERVE = inspect.signature(serve_index).parameters


@dataclass
class ServeConfig:
    """What ``hopgym serve`` serves, where, and how it batches."""

    index: str = field(metadata={"help": "Index directory (hopgym index build).",
                                 "metavar": "DIR"})
    host: str = field(default=_SERVE["host"].default, metadata={
        "help": "Address to listen on (0.0.0.0: all interfaces)."})
    port: int = field(default=_SERVE["port"].default, metadata={"help": "Port to listen on."})
    corpus: str | None = field(default=_SERVE["corpus"].default, metadata={
        "help": "The corpus file, if it moved since the build.", "metavar": "FILE"})
    model: str | None = field(default=_SERVE["model"].default, metadata={
        "help": "Embedder (default: the index's own)."})
    topk: int = field(default=_SERVE["default_topk"].default, metadata={
        "help": "Documents per query when a request gives no topk."})
    max_batch: int = field(default=_SERVE["max_batch"].default, metadata={
        "help": "Most queries per engine call."})
    max_wait_ms: float = field(default=_SERVE["max_wait_ms"].default, metadata={
        "help": "How long to wait for concurrent requests to join a batch."})
    threads: int | None = field(default=_SERVE["threads"].default, metadata={
        "help": "FAISS threads (none: leave them)."})
    verbose: bool = field(default=_SERVE["verbose"].default, metadata={
        "help": "Log every request."})


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to the ``hopgym`` command."""
    p = command_parser(subparsers, "serve",
                       "serve a saved index over HTTP (Search-R1's POST /retrieve)",
                       "Serve a saved index over HTTP with Search-R1's contract (POST /retrieve, "
                       "GET /health); concurrent requests are answered in batched engine calls.",
                       run=run)
    add_config_arguments(p, ServeConfig)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym serve`` until interrupted."""
    cfg = config_from_args(args, ServeConfig)
    try:
        serve_index(cfg.index, host=cfg.host, port=cfg.port, corpus=cfg.corpus, model=cfg.model,
                    default_topk=cfg.topk, max_batch=cfg.max_batch, max_wait_ms=cfg.max_wait_ms,
                    threads=cfg.threads, verbose=cfg.verbose)
    except (OSError, ValueError) as exc:  # hopgym's own errors pass through
        raise CommandError(str(exc)) from None
    return 0
