"""A retriever backed by one or more retrieval servers over HTTP: :class:`HTTPRetriever`.

It speaks Search-R1's ``POST /retrieve`` contract (``hopgym serve`` or Search-R1's own
``retrieval_server.py``), so an env's source (``local``, ``web``...) can live in another process
or on other machines, shared by many rollout workers.

Requests go through :class:`~hopgym.httpclient.HTTPClient` (one per server): connections are
kept alive and reused (one per thread and server), every attempt has a timeout, and the jittered
back-off and ``Retry-After`` are the client's policy, written there once. Standard library only.

**Fail-over** (the one statement of it; each attempt sends the request to one server):

- Calls are spread over the servers in turn, and a server that failed is tried last for
  ``cooldown`` seconds.
- A *failed* server — connection refused or reset, no reply within ``timeout``, or a status in
  :data:`~hopgym.httpclient.RETRYABLE_STATUS` (408, 429, 5xx: busy or restarting) — sends the
  call on to the next server at once; once every server has failed in this call, the call goes
  round again after a back-off, while ``retries`` last.
- A server that is *not (or no longer) a retrieval server* — it answers 404 or 405, a body that
  is not JSON, or JSON without a ``result`` list (a proxy whose app is gone, a wrong port) — sends
  the call on to the next server at once too, and is not asked again in this call: with one
  server, or when every server answered so, the call fails at once (a wrong URL stays wrong).
- Any other answer that is not 2xx (400, 413, 422...) fails the call at once: the request itself
  is refused, and every replica would refuse it.

When a call fails for good, a :class:`~hopgym.errors.RetrievalError` says what went wrong on each
server; the env turns it into an observation (``info["retrieval_error"]``), so a dead, frozen or
vanished server never hangs or crashes a rollout.
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


#: Statuses that say the URL is not (or no longer) a retrieval server: nothing at this path, or
#: not for POST (see the fail-over rule above).
NOT_A_RETRIEVAL_SERVER_STATUS = frozenset({404, 405})


def _not_a_retrieval_server(status: int | None) -> bool:
    """Whether a non-transient failure with this status says "not a retrieval server": 404/405,
    or a 2xx reply whose body is not JSON (the client's error for it keeps the 2xx status)."""
    return status is not None and (status in NOT_A_RETRIEVAL_SERVER_STATUS or 200 <= status < 300)


class HTTPRetriever(BatchScoredRetriever):
    """Search a remote index through ``POST /retrieve``, on one server or spread over several.

    Args:
        url: the server, ``http://host:port`` (``/retrieve`` is added) or the full endpoint URL;
            or a list of them (replicas of one index), over which calls are spread in turn.
        timeout: seconds one attempt may take (connecting, sending, the whole reply).
        retries: further attempts after a failed one, each on the next server (which
            failures move on, and which fail at once: the module docstring's fail-over rule).
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

    def _post(self, payload: dict[str, Any], n_results: int) -> list[Any]:
        """The ``result`` list of ``POST /retrieve``, by the module docstring's fail-over rule."""
        order = self._order()
        failures: dict[int, str] = {}
        gone: set[int] = set()  # servers that are not retrieval servers: not asked again
        retry_after = None
        for attempt in range(self.retries + 1):
            live = [i for i in order if i not in gone]
            if not live:
                break
            i = live[attempt % len(live)]
            if i in failures:  # every server failed once in this call: back off, then go round
                time.sleep(self.clients[i].backoff_delay(attempt // len(live), retry_after))
            try:
                data = self.clients[i].post_json(self.paths[i], payload, retries=0)
            except HTTPError as exc:
                if not (exc.transient or _not_a_retrieval_server(exc.status)):
                    raise RetrievalError(
                        f"the retrieval server at {self.endpoints[i]} refused the request: {exc.cause}"
                    ) from exc
                failures[i] = exc.cause
                if not exc.transient:
                    gone.add(i)
                    if exc.status is not None and 200 <= exc.status < 300:
                        failures[i] = f"not a retrieval server: {exc}"
                retry_after = exc.retry_after
                with self._lock:
                    self._down_until[i] = time.monotonic() + self.cooldown
                continue
            result = data.get("result") if isinstance(data, dict) else None
            if not isinstance(result, list) or len(result) != n_results:
                failures[i] = (
                    f"not a retrieval server: no 'result' list of {n_results} entries in {data!r:.100}"
                )
                gone.add(i)
                with self._lock:
                    self._down_until[i] = time.monotonic() + self.cooldown
                continue
            if self._down_until[i]:
                with self._lock:
                    self._down_until[i] = 0.0
            return result
        where = "; ".join(f"{self.endpoints[i]}: {cause}" for i, cause in failures.items())
        if live:
            raise RetrievalError(
                f"the retrieval server failed after {attempt + 1} attempt(s) ({where}). "
                "Is `hopgym serve` running there?"
            )
        raise RetrievalError(f"no retrieval server answered ({where}): is the URL that of `hopgym serve`?")

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        """Top ``k`` hits with the server's scores for each query, in one request."""
        queries = list(queries)
        if not queries:
            return []
        if k <= 0:
            return [[] for _ in queries]
        result = self._post({"queries": queries, "topk": int(k), "return_scores": True}, len(queries))
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
