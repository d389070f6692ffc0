"""The wire contract of the retrieval server, without any web framework: parsing and limits.

Search-R1's ``retrieval_server.py`` contract, which Search-R1, SkyRL and rLLM clients speak::

    POST /retrieve  {"queries": ["q1", "q2"], "topk": 3, "return_scores": true}
    200             {"result": [[{"document": {"id": ..., "contents": "Title\\ntext",
                                               "title": ..., "text": ...}, "score": 12.3}, ...]]}

Without ``return_scores`` each result is the list of documents alone. ``"query"`` is accepted for
``"queries"``, and a single string for a list of one. Documents carry ``id`` and ``contents``
(``title`` newline ``text``) as Search-R1's corpus rows do, plus ``title`` and ``text`` so that
titles containing a newline survive.

Errors are ``{"error": message, "limit": field}`` where ``limit`` names the
:class:`~hopgym.retrieval.serving.config.ServeConfig` field (and so the ``hopgym serve`` flag) that
refused the request, or ``null``. Each refusal also has a ``kind``, the label of the
``hopgym_retrieval_errors_total`` metric.

Classes: :class:`RequestError`, :class:`RetrieveRequest`. Functions: :func:`parse_retrieve`,
:func:`check_json_depth`, :func:`document_json`, :func:`result_json`, :func:`error_json`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from hopgym.corpora.types import Passage
from hopgym.errors import HopgymError
from hopgym.retrieval.base import SearchHit

__all__ = [
    "RequestError",
    "RetrieveRequest",
    "parse_retrieve",
    "check_json_depth",
    "document_json",
    "result_json",
    "error_json",
    "ERROR_KINDS",
]

#: Every ``kind`` of refusal or failure (the ``kind`` label of the errors metric), with its status.
ERROR_KINDS: dict[str, int] = {
    "bad_json": 400,
    "bad_request": 400,
    "json_too_deep": 400,
    "topk_out_of_range": 400,
    "not_found": 404,
    "method_not_allowed": 405,
    "read_timeout": 408,
    "body_too_large": 413,
    "too_many_queries": 413,
    "query_too_long": 413,
    "headers_too_large": 431,
    "engine_error": 500,
    "internal_error": 500,
    "overloaded": 503,
    "request_timeout": 503,
    "shutting_down": 503,
}


class RequestError(HopgymError):
    """A request the server refuses (4xx) or cannot answer (5xx).

    Attributes:
        kind: one of :data:`ERROR_KINDS` (it fixes the HTTP status).
        message: what was wrong and how to fix it.
        limit: the :class:`~hopgym.retrieval.serving.config.ServeConfig` field that refused it.
    """

    def __init__(self, kind: str, message: str, limit: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.limit = kind, message, limit

    @property
    def status(self) -> int:
        """The HTTP status."""
        return ERROR_KINDS[self.kind]


def error_json(message: str, limit: str | None = None) -> dict[str, Any]:
    """The body of an error reply.

    Example:
        >>> error_json("at most 8 queries per request, got 9", "max_queries")["limit"]
        'max_queries'
    """
    return {"error": message, "limit": limit}


def _flag(name: str) -> str:
    """The ``hopgym serve`` flag of a :class:`ServeConfig` field, as error messages name it."""
    return "--" + name.replace("_", "-")


# A JSON string (escapes included), unrolled so that a long string is one fast regex step.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def check_json_depth(raw: bytes, limit: int) -> None:
    """Refuse JSON nested deeper than ``limit``, before it is parsed, without recursion.

    Strings are cut out (a bracket inside a string does not nest), then the depth is the largest
    running sum of opening minus closing brackets. Linear in the body, in C and NumPy.

    Raises:
        RequestError: ``json_too_deep``.

    Example:
        >>> check_json_depth(b'{"queries": ["[[[[", "x"]}', 2)
        >>> check_json_depth(b"[" * 100_000 + b"]" * 100_000, 16)
        Traceback (most recent call last):
            ...
        hopgym.retrieval.serving.protocol.RequestError: the JSON body is nested 100000 deep; \
the limit is 16 (--max-json-depth)
    """
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return  # cannot be deeper than it has opening brackets: the common case, one C pass
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    arr = np.frombuffer(brackets, dtype=np.uint8)
    step = np.where((arr == ord("[")) | (arr == ord("{")), 1, -1).astype(np.int64)
    depth = int(np.cumsum(step).max(initial=0))
    if depth > limit:
        raise RequestError(
            "json_too_deep",
            f"the JSON body is nested {depth} deep; the limit is {limit} ({_flag('max_json_depth')})",
            "max_json_depth",
        )


@dataclass(frozen=True)
class RetrieveRequest:
    """A checked ``POST /retrieve`` request."""

    queries: list[str]
    topk: int
    return_scores: bool


def parse_retrieve(raw: bytes, cfg: Any) -> RetrieveRequest:
    """Parse and check a ``POST /retrieve`` body against the limits of ``cfg``.

    Args:
        raw: the body (already within ``cfg.max_body_bytes``).
        cfg: a :class:`~hopgym.retrieval.serving.config.ServeConfig`.

    Raises:
        RequestError: the first limit or rule the body breaks.

    Example:
        >>> from hopgym.retrieval.serving.config import ServeConfig
        >>> parse_retrieve(b'{"query": "Oslo", "topk": 2}', ServeConfig())
        RetrieveRequest(queries=['Oslo'], topk=2, return_scores=False)
        >>> parse_retrieve(b'{"queries": ["x"], "topk": 0}', ServeConfig()).topk
        Traceback (most recent call last):
            ...
        hopgym.retrieval.serving.protocol.RequestError: 'topk' must be an integer in 1..100 \
(--max-topk), got 0
    """
    check_json_depth(raw, cfg.max_json_depth)
    try:
        req = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError("bad_json", f"the body is not JSON: {exc}") from None
    if not isinstance(req, dict):
        raise RequestError("bad_request", "the body must be a JSON object with 'queries'")
    queries = req.get("queries", req.get("query"))
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise RequestError("bad_request", "'queries' must be a list of strings")
    if len(queries) > cfg.max_queries:
        raise RequestError(
            "too_many_queries",
            f"at most {cfg.max_queries} queries per request ({_flag('max_queries')}), got {len(queries)}",
            "max_queries",
        )
    for i, q in enumerate(queries):
        if len(q) > cfg.max_query_chars:
            raise RequestError(
                "query_too_long",
                f"query {i} has {len(q):,} characters; the limit is "
                f"{cfg.max_query_chars:,} ({_flag('max_query_chars')}); long "
                "queries are refused, not truncated",
                "max_query_chars",
            )
    topk = req.get("topk")
    if topk is None:
        topk = cfg.topk
    if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= cfg.max_topk:
        raise RequestError(
            "topk_out_of_range",
            f"'topk' must be an integer in 1..{cfg.max_topk} ({_flag('max_topk')}), got {topk!r:.40}",
            "max_topk",
        )
    rs = req.get("return_scores", False)
    if not isinstance(rs, bool):
        raise RequestError("bad_request", f"'return_scores' must be true or false, got {rs!r:.40}")
    return RetrieveRequest(queries, topk, rs)


def document_json(p: Passage) -> dict[str, str]:
    """A passage as Search-R1 returns it: ``id`` and ``contents``, plus ``title`` and ``text``.

    Example:
        >>> document_json(Passage("7", "Oslo", "Oslo is a city."))["contents"]
        'Oslo\\nOslo is a city.'
    """
    return {"id": p.doc_id, "contents": p.contents, "title": p.title, "text": p.text}


def result_json(hits: list[list[SearchHit]], return_scores: bool) -> dict[str, Any]:
    """The body of a ``POST /retrieve`` answer."""
    if return_scores:
        result: list[Any] = [
            [{"document": document_json(h.passage), "score": h.score} for h in per_query]
            for per_query in hits
        ]
    else:
        result = [[document_json(h.passage) for h in per_query] for per_query in hits]
    return {"result": result}
