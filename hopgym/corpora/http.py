"""A retriever backed by a retrieval server over HTTP: :class:`HTTPRetriever`.

It speaks Search-R1's ``POST /retrieve`` contract (``hopgym serve`` or Search-R1's own
``retrieval_server.py``), so an env's source (``local``, ``web``...) can live in another process
or on another machine, shared by many rollout workers.

Connections are kept alive and reused (one per thread: ``http.client`` connections are not
thread-safe); every call has a timeout; failed calls are retried with exponential backoff; after
the last attempt a :class:`~hopgym.corpora.retrieval.RetrievalError` says what went wrong. The
env turns that error into an observation (``info["retrieval_error"]``), so a dead server never
hangs or crashes a rollout. Standard library only.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from hopgym.corpora.retrieval import BatchScoredRetriever, RetrievalError, SearchHit
from hopgym.corpora.types import Passage

__all__ = ["HTTPRetriever", "passage_from_json"]

_RETRYABLE_STATUS = {429, 500, 502, 503, 504}


def passage_from_json(doc: Any) -> Passage:
    """A Search-R1 document (``{id, contents}``, optionally ``title``/``text``) as a Passage.

    Example:
        >>> passage_from_json({"id": "3", "contents": '"Oslo"\\nOslo is a city.'})
        Passage(doc_id='3', title='Oslo', text='Oslo is a city.')
    """
    from hopgym.corpora.loaders import parse_contents, passage_id

    if not isinstance(doc, dict):
        raise RetrievalError(f"the server returned a document that is not an object: {doc!r:.80}")
    title, text = doc.get("title"), doc.get("text")
    if not (isinstance(title, str) and isinstance(text, str)):
        contents = doc.get("contents")
        if not isinstance(contents, str):
            raise RetrievalError("the server returned a document without 'contents'")
        title, text = parse_contents(contents)
    doc_id = doc.get("id", doc.get("doc_id", doc.get("_id")))
    return Passage(str(doc_id) if doc_id is not None else passage_id(title, text), title, text)


class HTTPRetriever(BatchScoredRetriever):
    """Search a remote index through ``POST /retrieve``.

    Args:
        url: the server, ``http://host:port`` (``/retrieve`` is added) or the full endpoint URL.
        timeout: seconds for connecting and for each read.
        retries: further attempts after a failed one (connection refused or reset, timeout,
            HTTP 429/5xx). A 4xx answer is not retried.
        backoff: seconds before the first retry, doubled each time up to ``max_backoff``.
        max_backoff: the longest wait between attempts.

    Example:
        >>> r = HTTPRetriever("http://127.0.0.1:8000", timeout=5.0)
        >>> r.endpoint
        'http://127.0.0.1:8000/retrieve'
    """

    kind = "http"

    def __init__(self, url: str, *, timeout: float = 10.0, retries: int = 2, backoff: float = 0.1,
                 max_backoff: float = 2.0) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"url must look like http://host:port, got {url!r}")
        if timeout <= 0 or retries < 0 or backoff < 0:
            raise ValueError("timeout must be positive, retries and backoff non-negative")
        self.url = url
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        path = parts.path.rstrip("/")
        self.path = path if path.endswith("/retrieve") else path + "/retrieve"
        self.timeout, self.retries = timeout, retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self._local = threading.local()

    @property
    def endpoint(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.path}"

    # Connections are per thread and are not pickled (vector-env workers open their own).
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._local = threading.local()

    def _connection(self) -> tuple[http.client.HTTPConnection, bool]:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn, True
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        conn.connect()
        # Small requests must not wait for delayed ACKs (Nagle): send each one at once.
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._local.conn = conn
        return conn, False

    def close(self) -> None:
        """Close this thread's connection (a later call reconnects)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _once(self, body: bytes) -> Any:
        """One attempt; returns the decoded JSON or raises (_Retryable for transient failures)."""
        reused = False
        try:
            conn, reused = self._connection()
            conn.request("POST", self.path, body, {"Content-Type": "application/json",
                                                   "Connection": "keep-alive"})
            resp = conn.getresponse()
            data = resp.read()
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as exc:
            self.close()
            if reused:  # the server closed an idle keep-alive connection: reconnect at once
                raise _Stale(exc) from exc
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            self.close()
            raise _Retryable(f"no answer within {self.timeout} s") from exc
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        if resp.status != 200:
            try:
                msg = json.loads(data).get("error", "")
            except (ValueError, AttributeError):
                msg = data[:200].decode("utf-8", "replace")
            text = f"HTTP {resp.status}: {msg}"
            if resp.status in _RETRYABLE_STATUS:
                raise _Retryable(text)
            raise RetrievalError(f"the retrieval server at {self.endpoint} refused the request: "
                                 f"{text}")
        try:
            return json.loads(data)
        except ValueError as exc:
            raise RetrievalError(f"the retrieval server at {self.endpoint} sent invalid JSON: "
                                 f"{exc}") from None

    def _post(self, payload: dict[str, Any]) -> Any:
        body = json.dumps(payload).encode("utf-8")
        last = ""
        attempt = 0
        stale_retries = 0
        while True:
            try:
                return self._once(body)
            except _Stale:
                stale_retries += 1
                if stale_retries <= 1:
                    continue  # does not count as an attempt
                last = "connection closed by the server"
            except _Retryable as exc:
                last = str(exc)
            if attempt >= self.retries:
                raise RetrievalError(
                    f"the retrieval server at {self.endpoint} failed after {attempt + 1} "
                    f"attempt(s): {last}. Is `hopgym serve` running there?")
            time.sleep(min(self.max_backoff, self.backoff * (2 ** attempt)))
            attempt += 1

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        """Top ``k`` hits with the server's scores for each query, in one request."""
        queries = list(queries)
        if not queries:
            return []
        if k <= 0:
            return [[] for _ in queries]
        data = self._post({"queries": queries, "topk": int(k), "return_scores": True})
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(f"the retrieval server at {self.endpoint} sent no 'result' list "
                                 f"of {len(queries)} entries")
        out: list[list[SearchHit]] = []
        for items in result:
            if not isinstance(items, list):
                raise RetrievalError("the retrieval server sent a result that is not a list")
            hits = []
            for rank, item in enumerate(items[:k]):
                if isinstance(item, dict) and "document" in item:
                    score = item.get("score")
                    hits.append(SearchHit(passage_from_json(item["document"]),
                                          float(score) if score is not None else 1.0 / (rank + 1)))
                else:  # a server that ignores return_scores
                    hits.append(SearchHit(passage_from_json(item), 1.0 / (rank + 1)))
            out.append(hits)
        return out


    def health(self) -> dict[str, Any]:
        """``GET /health`` of the server (raises :class:`RetrievalError` when it is down)."""
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("GET", self.path.rsplit("/retrieve", 1)[0] + "/health")
            resp = conn.getresponse()
            data = json.loads(resp.read())
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise RetrievalError(f"the retrieval server at {self.endpoint} is not answering: "
                                 f"{type(exc).__name__}: {exc}") from None
        finally:
            conn.close()
        return data if isinstance(data, dict) else {}


class _Retryable(Exception):
    """A transient failure: try again after a backoff."""


class _Stale(Exception):
    """A reused keep-alive connection had been closed by the server: reconnect and retry now."""
