"""A retriever backed by a retrieval server over HTTP: :class:`HTTPRetriever`.

It speaks Search-R1's ``POST /retrieve`` contract (``hopgym serve`` or Search-R1's own
``retrieval_server.py``), so an env's source (``local``, ``web``...) can live in another process
or on another machine, shared by many rollout workers.

Requests go through :class:`~hopgym.httpclient.HTTPClient`: connections are kept alive and
reused (one per thread), every attempt has a timeout, failed calls are retried with jittered
exponential back-off (the policy and the time bound are written there, once). When a call fails
for good, a :class:`~hopgym.corpora.retrieval.RetrievalError` says what went wrong; the env turns
it into an observation (``info["retrieval_error"]``), so a dead server never hangs or crashes a
rollout. Standard library only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from hopgym.corpora.retrieval import BatchScoredRetriever, RetrievalError, SearchHit
from hopgym.corpora.types import Passage
from hopgym.httpclient import HTTPClient, HTTPError

__all__ = ["HTTPRetriever", "passage_from_json"]


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
        timeout: seconds one attempt may take (connecting, sending, the whole reply).
        retries: further attempts after a failed one (connection refused or reset, timeout,
            a :data:`~hopgym.httpclient.RETRYABLE_STATUS` reply). Other 4xx answers are not
            retried.
        backoff: the nominal wait before the first retry in seconds, doubled for each further
            one (jittered; a ``Retry-After`` header lengthens it), up to ``max_backoff``.
        max_backoff: the longest wait between attempts.

    A failed search returns within ``timeout * (retries + 1) + retries * max_backoff`` seconds.

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
        self.url = url
        path = parts.path.rstrip("/")
        self.path = path if path.endswith("/retrieve") else path + "/retrieve"
        # The client checks timeout, retries and the waits.
        self.client = HTTPClient(f"{parts.scheme}://{parts.netloc}", timeout=timeout,
                                 retries=retries, backoff=backoff, max_backoff=max_backoff)

    # The connection settings live in the client; these read them.
    scheme = property(lambda self: self.client.scheme)
    host = property(lambda self: self.client.host)
    port = property(lambda self: self.client.port)
    timeout = property(lambda self: self.client.timeout)
    retries = property(lambda self: self.client.retries)
    backoff = property(lambda self: self.client.backoff)
    max_backoff = property(lambda self: self.client.max_backoff)

    @property
    def endpoint(self) -> str:
        return self.client.url(self.path)

    def close(self) -> None:
        """Close this thread's connection (a later call reconnects)."""
        self.client.close()

    def _post(self, payload: dict[str, Any]) -> Any:
        try:
            return self.client.post_json(self.path, payload)
        except HTTPError as exc:
            if exc.transient:
                raise RetrievalError(f"the retrieval server at {self.endpoint} failed after "
                                     f"{exc.attempts} attempt(s): {exc.cause}. Is `hopgym serve` "
                                     f"running there?") from exc
            if exc.status is not None and not 200 <= exc.status < 300:
                raise RetrievalError(f"the retrieval server at {self.endpoint} refused the "
                                     f"request: {exc.cause}") from exc
            raise RetrievalError(f"the retrieval server at {self.endpoint} sent invalid JSON: "
                                 f"{exc}") from None

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
        """``GET /health`` of the server, tried once (raises :class:`RetrievalError` when it is
        down)."""
        try:
            data = self.client.get_json(self.path.rsplit("/retrieve", 1)[0] + "/health",
                                        retries=0)
        except HTTPError as exc:
            raise RetrievalError(f"the retrieval server at {self.endpoint} is not answering: "
                                 f"{exc.cause or exc}") from None
        return data if isinstance(data, dict) else {}
