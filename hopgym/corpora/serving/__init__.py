"""The retrieval server (``hopgym serve``): uvicorn locally, Ray Serve replicas beyond one machine.

Modules: :mod:`.config` (:class:`ServeConfig`, every option once), :mod:`.protocol` (the
Search-R1 wire contract and its limits, no framework), :mod:`.batching` (the queue and the one
engine thread), :mod:`.metrics` (Prometheus), :mod:`.app` (the Starlette app, uvicorn,
:class:`RetrievalServer`, :func:`serve_index`), :mod:`.ray_serve` (the same app as a Ray Serve
deployment). The web stack is imported only when a server is built: ``pip install
'hopgym[serve]'`` (uvicorn, Starlette, prometheus-client) and ``'hopgym[ray]'`` for Ray Serve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hopgym.corpora.serving.config import ServeConfig

__all__ = ["ServeConfig", "RetrievalServer", "serve_index", "build_app"]

_LAZY = {"RetrievalServer": "hopgym.corpora.serving.app", "serve_index": "hopgym.corpora.serving.app",
         "build_app": "hopgym.corpora.serving.app"}

if TYPE_CHECKING:
    from hopgym.corpora.serving.app import RetrievalServer, build_app, serve_index


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
