"""``hopgym serve``: serve a saved index over HTTP (Search-R1's ``POST /retrieve``), on uvicorn or
on Ray Serve replicas (``--ray --replicas N``).

Options: :class:`~hopgym.retrieval.serving.ServeConfig`, every field a flag (the limits, timeouts and
batching of the server are documented there, once).
"""

from __future__ import annotations

import argparse
from typing import Any

from hopgym.cli._common import CommandError, command_parser
from hopgym.cli._dataclass_args import ConfigSpec, add_config_arguments, config_from_args
from hopgym.retrieval.serving import ServeConfig

__all__ = ["SERVE", "ServeConfig", "add_parser", "run"]

#: ``hopgym serve``'s options: :class:`ServeConfig`, with ``--index`` required.
SERVE = ConfigSpec(ServeConfig, metadata={"index": {"required": True}})


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``serve`` to the ``hopgym`` command."""
    p = command_parser(
        subparsers,
        "serve",
        "serve a saved index over HTTP (Search-R1's POST /retrieve)",
        "Serve a saved index over HTTP with Search-R1's contract (POST /retrieve, GET /health, "
        "GET /metrics) on uvicorn, or on Ray Serve replicas with --ray; concurrent requests are "
        "answered in batched engine calls, and every limit below answers with a 4xx JSON error "
        "naming it. SIGINT or SIGTERM answers the requests in flight, then exits.",
        run=run,
    )
    add_config_arguments(p, SERVE)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym serve`` until SIGINT or SIGTERM."""
    from hopgym.retrieval.serving import serve_index

    cfg = config_from_args(args, SERVE)
    try:
        serve_index(config=cfg)
    except (OSError, ValueError) as exc:  # hopgym's own errors pass through
        raise CommandError(str(exc)) from None
    return 0
