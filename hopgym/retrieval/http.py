"""A retriever backed by one or more retrieval servers over HTTP: :class:`HTTPRetriever`.

It speaks Search-R1's ``POST /retrieve`` contract (``hopgym serve`` or Search-R1's own
``retrieval_server.py``), so an env's source (``local``, ``web``...) can live in another process
or on other machines, shared by many rollout workers.

Requests go through :class:`~hopgym.httpclient.HTTPClient` (one per server): connections are
kept alive and reused (one per thread and server), every attempt has a timeout, and what is
retried, the jittered back-off and ``Retry-After`` are the client's policy, written there once.
With several servers, calls are spread over them in turn, a failed attempt moves on to the next
server at once, and a server that failed is tried last for ``cooldown`` seconds. When a call
fails for good, a :class:`~hopgym.errors.RetrievalError` says what went wrong on each
server; the env turns it into an observation (``info["retrieval_error"]``), so a dead or frozen
server never hangs or crashes a rollout. Standard library only.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from hopgym.corpora.types import Passage
from hopgym.errors import InvalidOptionError, RetrievalError
from hopgym.httpclient import HTTPClient, HTTPError
from hopgym.retrieval.base import BatchScoredRetriever, SearchHit

__all__ = ["HTTPRetriever", "passage_from_json"]


def passage_from_json(doc: Any) -> Passage:
    """A Search-R1 document (``{id, contents}``, optionally ``title``/``text``) as a Passage.

    Example:
        >>> passage_from_json({"id": "3", "contents": '"Oslo"\\nOslo is a city.'})
        Passage(doc_id='3', title='Oslo', text='Oslo is a city.')
    """
    from hopgym.corpora.datasets import parse_contents, passage_id

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
    """Search a remote index through ``POST /retrieve``, on one server or spread over several.

    Args:
        url: the server, ``http://host:port`` (``/retrieve`` is added) or the full endpoint URL;
            or a list of them (replicas of one index), over which calls are spread in turn.
        timeout: seconds one attempt may take (connecting, sending, the whole reply).
        retries: further attempts after a failed one (connection refused or reset, timeout,
            a :data:`~hopgym.httpclient.RETRYABLE_STATUS` reply), each on the next server.
            Other 4xx answers are not retried.
        backoff: the nominal wait before a retry on a server that already failed in this call,
            doubled for each further round (jittered; a ``Retry-After`` header lengthens it), up
            to ``max_backoff``. Moving on to a server not yet tried does not wait.
        max_backoff: the longest wait between attempts.
        cooldown: seconds a server that failed is tried after the others.

    A failed search returns within ``timeout * (retries + 1) + retries * max_backoff`` seconds,
    however many servers there are (defaults: 10 × 3 + 2 × 2 = 34 s; set ``timeout``,
    ``retries`` and ``backoff`` from ``gym.make`` with ``retriever={"urls": [...], "timeout":
    2, "retries": 1}``).

    Example:
        >>> r = HTTPRetriever("http://127.0.0.1:8000", timeout=5.0)
        >>> r.endpoint
        'http://127.0.0.1:8000/retrieve'
        >>> HTTPRetriever(["http://a:8000", "http://b:8000/v1"]).endpoints
        ('http://a:8000/retrieve', 'http://b:8000/v1/retrieve')
    """

    kind = "http"

    def __init__(
        self,
        url: str | Sequence[str],
        *,
        timeout: float = 10.0,
        retries: int = 2,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        cooldown: float = 5.0,
    ) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise InvalidOptionError("url must be a server URL or a non-empty list of them")
        self.urls = tuple(urls)
        self.url = self.urls[0]
        self.clients: list[HTTPClient] = []
        self.paths: list[str] = []
        for u in self.urls:
            parts = urlsplit(u) if isinstance(u, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                raise InvalidOptionError(f"url must look like http://host:port, got {u!r}")
            path = parts.path.rstrip("/")
            self.paths.append(path if path.endswith("/retrieve") else path + "/retrieve")
            # The client checks timeout, retries and the waits.
            self.clients.append(
                HTTPClient(
                    f"{parts.scheme}://{parts.netloc}",
                    timeout=timeout,
                    retries=retries,
                    backoff=backoff,
                    max_backoff=max_backoff,
                )
            )
        if not (isinstance(cooldown, (int, float)) and cooldown >= 0):
            raise InvalidOptionError(f"cooldown must be a number of seconds >= 0, got {cooldown!r}")
        self.cooldown = float(cooldown)
        self._setup()

    def _setup(self) -> None:
        self._turn = itertools.count()
        self._down_until = [0.0] * len(self.clients)
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_turn", "_down_until", "_lock"):
            del state[key]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    # The connection settings live in the (first) client; these read them.
    client = property(lambda self: self.clients[0])
    scheme = property(lambda self: self.client.scheme)
    host = property(lambda self: self.client.host)
    port = property(lambda self: self.client.port)
    timeout = property(lambda self: self.client.timeout)
    retries = property(lambda self: self.client.retries)
    backoff = property(lambda self: self.client.backoff)
    max_backoff = property(lambda self: self.client.max_backoff)

    @property
    def endpoint(self) -> str:
        """The (first) server's ``/retrieve`` URL."""
        return self.endpoints[0]

    @property
    def endpoints(self) -> tuple[str, ...]:
        """Every server's ``/retrieve`` URL."""
        return tuple(c.url(p) for c, p in zip(self.clients, self.paths, strict=True))

    def max_total_seconds(self) -> float:
        """The longest a failing search can take (see the class docstring)."""
        return self.client.max_total_seconds()

    def close(self) -> None:
        """Close this thread's connections (a later call reconnects)."""
        for c in self.clients:
            c.close()

    def _order(self) -> list[int]:
        """Servers for this call: the next in turn first, those in cool-down last."""
        n = len(self.clients)
        first = next(self._turn) % n
        now = time.monotonic()
        turn = [(first + i) % n for i in range(n)]
        return sorted(turn, key=lambda i: max(0.0, self._down_until[i] - now))

    def _post(self, payload: dict[str, Any]) -> Any:
        order = self._order()
        failures: dict[int, str] = {}
        retry_after = None
        for attempt in range(self.retries + 1):
            i = order[attempt % len(order)]
            if i in failures:  # every server failed once in this call: back off, then go round
                time.sleep(self.clients[i].backoff_delay(attempt // len(order), retry_after))
            try:
                data = self.clients[i].post_json(self.paths[i], payload, retries=0)
            except HTTPError as exc:
                if not exc.transient:
                    endpoint = self.endpoints[i]
                    if exc.status is not None and not 200 <= exc.status < 300:
                        raise RetrievalError(
                            f"the retrieval server at {endpoint} refused the request: {exc.cause}"
                        ) from exc
                    raise RetrievalError(
                        f"the retrieval server at {endpoint} sent invalid JSON: {exc}"
                    ) from None
                failures[i] = exc.cause
                retry_after = exc.retry_after
                with self._lock:
                    self._down_until[i] = time.monotonic() + self.cooldown
                continue
            if self._down_until[i]:
                with self._lock:
                    self._down_until[i] = 0.0
            return data
        where = "; ".join(f"{self.endpoints[i]}: {cause}" for i, cause in failures.items())
        raise RetrievalError(
            f"the retrieval server failed after {self.retries + 1} attempt(s) "
            f"({where}). Is `hopgym serve` running there?"
        )

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
            raise RetrievalError(
                f"the retrieval server at {self.endpoint} sent no 'result' list of {len(queries)} entries"
            )
        out: list[list[SearchHit]] = []
        for items in result:
            if not isinstance(items, list):
                raise RetrievalError("the retrieval server sent a result that is not a list")
            hits = []
            for rank, item in enumerate(items[:k]):
                if isinstance(item, dict) and "document" in item:
                    score = item.get("score")
                    hits.append(
                        SearchHit(
                            passage_from_json(item["document"]),
                            float(score) if score is not None else 1.0 / (rank + 1),
                        )
                    )
                else:  # a server that ignores return_scores
                    hits.append(SearchHit(passage_from_json(item), 1.0 / (rank + 1)))
            out.append(hits)
        return out

    def health(self) -> dict[str, Any]:
        """``GET /health`` of the first server that answers, each tried once (raises
        :class:`RetrievalError` when none does)."""
        causes = []
        for client, path, endpoint in zip(self.clients, self.paths, self.endpoints, strict=True):
            try:
                data = client.get_json(path.rsplit("/retrieve", 1)[0] + "/health", retries=0)
            except HTTPError as exc:
                causes.append(f"{endpoint}: {exc.cause or exc}")
                continue
            return data if isinstance(data, dict) else {}
        raise RetrievalError(f"the retrieval server at {'; '.join(causes)} is not answering")
