"""``hopgym serve``'s entry: :func:`serve_index` starts uvicorn (:mod:`.app`) or Ray Serve
(:mod:`.ray_serve`); it sits above both so that neither imports the other back."""

from __future__ import annotations

import os
import sys
from typing import Any

from hopgym._uvicorn import raise_open_files_limit
from hopgym.errors import InvalidOptionError
from hopgym.retrieval.serving.app import (
    RetrievalServer,
    load_served_index,
    require_serve_extra,
)
from hopgym.retrieval.serving.config import ServeConfig
from hopgym.retrieval.serving.ray_serve import serve_ray

__all__ = ["serve_index"]


def serve_index(
    index: str | os.PathLike[str] | None = None, *, config: ServeConfig | None = None, **options: Any
) -> None:
    """Load a saved index (verified and checked against its corpus) and serve it until SIGINT or
    SIGTERM (``hopgym serve``): on uvicorn, or on Ray Serve with ``ray=True``.

    Args:
        index: the index directory (or ``config.index``).
        config: the options; ``**options`` replace some of them.
        **options: :class:`ServeConfig` fields that replace ``config``'s.
    """
    cfg = config or ServeConfig()
    if index is not None:
        options["index"] = os.fspath(index)
    cfg = cfg.updated(**options) if options else cfg
    if cfg.index is None:
        raise InvalidOptionError(
            "serve needs an index directory (--index DIR; `hopgym index build` makes one)"
        )
    if cfg.ray:
        serve_ray(cfg)
        return
    require_serve_extra()
    retriever, manifest = load_served_index(cfg)
    raise_open_files_limit()
    if cfg.verbose:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    srv = RetrievalServer(retriever, cfg)
    print(
        f"hopgym: serving a {manifest.retriever} index of {manifest.num_passages:,} passages "
        f"from {cfg.index} at {srv.url}/retrieve (Ctrl-C or SIGTERM to stop)",
        flush=True,
    )
    srv.serve_forever()
    print("hopgym: stopped", file=sys.stderr, flush=True)
