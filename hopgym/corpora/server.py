"""The retrieval server's old home: it now lives in :mod:`hopgym.corpora.serving`.

``RetrievalServer``, ``start_server``, ``serve_index`` and ``document_json`` keep working from
here. The server runs on uvicorn and Starlette (``pip install 'hopgym[serve]'``); the standard
library's ``ThreadingHTTPServer`` it used to run on is gone (listen backlog 5, a thread per
connection, no read timeout).
"""

from __future__ import annotations

from typing import Any

from hopgym.corpora.retrieval import Retriever
from hopgym.corpora.serving.app import RetrievalServer, serve_index
from hopgym.corpora.serving.protocol import document_json

__all__ = ["RetrievalServer", "start_server", "serve_index", "document_json"]


def start_server(retriever: Retriever, *, host: str = "127.0.0.1", port: int = 0,
                 default_topk: int = 3, max_batch: int = 64, max_wait_ms: float = 2.0,
                 **options: Any) -> RetrievalServer:
    """Start a :class:`RetrievalServer` in a background thread (``port=0``: a free port)."""
    return RetrievalServer(retriever, host=host, port=port, topk=default_topk,
                           max_batch=max_batch, max_wait_ms=max_wait_ms, **options).start()
