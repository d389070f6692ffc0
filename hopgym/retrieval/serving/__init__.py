"""The retrieval server (``hopgym serve``): uvicorn locally, Ray Serve replicas beyond one machine.

Modules: :mod:`.config` (:class:`ServeConfig`, every option once), :mod:`.protocol` (the
Search-R1 wire contract and its limits, no framework), :mod:`.batching` (the queue and the one
engine thread), :mod:`.metrics` (Prometheus), :mod:`.app` (the Starlette app, uvicorn,
:class:`RetrievalServer`), :mod:`.ray_serve` (the same app as a Ray Serve deployment),
:mod:`.launch` (:func:`serve_index`, which starts one or the other). The web stack is imported
only when a server is built: ``pip install 'hopgym[serve]'`` (uvicorn, Starlette,
prometheus-client) and ``'hopgym[ray]'`` for Ray Serve.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hopgym.retrieval.serving.config import ServeConfig

__all__ = ["ServeConfig", "RetrievalServer", "serve_index", "build_app"]

_LAZY = {
    "RetrievalServer": "hopgym.retrieval.serving.app",
    "serve_index": "hopgym.retrieval.serving.launch",
    "build_app": "hopgym.retrieval.serving.app",
}

if TYPE_CHECKING:
    from hopgym.retrieval.serving.app import RetrievalServer, build_app
    from hopgym.retrieval.serving.launch import serve_index


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
