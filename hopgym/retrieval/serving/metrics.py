"""The retrieval server's metrics, in Prometheus text format (``GET /metrics``).

Class: :class:`ServerMetrics`. Written with ``prometheus_client`` (in the ``serve`` extra): it
writes the exposition format exactly (histogram buckets, ``+Inf``, ``_sum``/``_count``, label
escaping), its parser reads it back in the tests, and each server gets its own registry, so
several servers in one process (tests, Ray replicas on one worker) do not mix their counts.

==========================================  =========  ===================================
metric                                      type       labels
==========================================  =========  ===================================
``hopgym_retrieval_requests_total``         counter    ``status`` (HTTP status of the reply)
``hopgym_retrieval_queries_total``          counter
``hopgym_retrieval_errors_total``           counter    ``kind`` (see ``protocol.ERROR_KINDS``)
``hopgym_retrieval_batch_queries``          histogram  queries per engine call
``hopgym_retrieval_batch_requests``         histogram  requests per engine call
``hopgym_retrieval_queue_wait_seconds``     histogram  from queued to the engine call
``hopgym_retrieval_engine_seconds``         histogram  one batched engine call
``hopgym_retrieval_request_seconds``        histogram  from the body read to the answer
``hopgym_retrieval_pending_queries``        gauge      queries waiting for the engine
``hopgym_retrieval_passages``               gauge      passages in the index
==========================================  =========  ===================================
"""

from __future__ import annotations

import threading
from typing import Any

from hopgym.retrieval.serving.protocol import ERROR_KINDS

__all__ = ["ServerMetrics", "CONTENT_TYPE"]

#: The ``Content-Type`` of ``GET /metrics`` (Prometheus text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServerMetrics:
    """Counters and histograms of one server (or one Ray Serve replica).

    Args:
        passages: the number of passages served.

    Attributes:
        stats: plain running totals for ``GET /health`` (``requests``, ``queries``,
            ``batches``, ``errors``, ``max_batch_queries``, ``max_batch_requests``).
    """

    def __init__(self, passages: int = 0) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        reg: dict[str, Any] = {"registry": self.registry}
        self.requests = Counter(
            "hopgym_retrieval_requests", "POST /retrieve replies, by HTTP status", ["status"], **reg
        )
        self.queries = Counter("hopgym_retrieval_queries", "Queries answered", **reg)
        self.errors = Counter(
            "hopgym_retrieval_errors", "Requests refused or failed, by kind", ["kind"], **reg
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind=kind)
        self.batch_queries = Histogram(
            "hopgym_retrieval_batch_queries", "Queries per engine call", buckets=_SIZES, **reg
        )
        self.batch_requests = Histogram(
            "hopgym_retrieval_batch_requests", "Requests per engine call", buckets=_SIZES, **reg
        )
        self.queue_wait = Histogram(
            "hopgym_retrieval_queue_wait_seconds",
            "Time from queued to the engine call",
            buckets=_SECONDS,
            **reg,
        )
        self.engine = Histogram(
            "hopgym_retrieval_engine_seconds", "Time of one batched engine call", buckets=_SECONDS, **reg
        )
        self.latency = Histogram(
            "hopgym_retrieval_request_seconds",
            "Time from a request's body read to its answer",
            buckets=_SECONDS,
            **reg,
        )
        self.pending = Gauge("hopgym_retrieval_pending_queries", "Queries waiting for the engine", **reg)
        self.passages = Gauge("hopgym_retrieval_passages", "Passages in the index", **reg)
        self.passages.set(passages)
        self._by_status: dict[int, Any] = {}
        self._lock = threading.Lock()
        self.stats: dict[str, int] = {
            "requests": 0,
            "queries": 0,
            "batches": 0,
            "errors": 0,
            "max_batch_queries": 0,
            "max_batch_requests": 0,
        }

    def reply(self, status: int, kind: str | None = None) -> None:
        """Count a ``POST /retrieve`` reply (and its error ``kind``, if it is one)."""
        child = self._by_status.get(status)
        if child is None:
            child = self._by_status[status] = self.requests.labels(status=str(status))
        child.inc()
        with self._lock:
            self.stats["requests"] += 1
        if kind is not None:
            self.error(kind)

    def error(self, kind: str) -> None:
        """Count a refusal or failure of ``kind`` (any path, any phase)."""
        self.errors.labels(kind=kind).inc()
        with self._lock:
            self.stats["errors"] += 1

    def batch(self, queries: int, requests: int, waits: list[float], engine_s: float) -> None:
        """Record one engine call."""
        self.queries.inc(queries)
        self.batch_queries.observe(queries)
        self.batch_requests.observe(requests)
        for w in waits:
            self.queue_wait.observe(w)
        self.engine.observe(engine_s)
        with self._lock:
            s = self.stats
            s["batches"] += 1
            s["queries"] += queries
            s["max_batch_queries"] = max(s["max_batch_queries"], queries)
            s["max_batch_requests"] = max(s["max_batch_requests"], requests)

    def snapshot(self) -> dict[str, Any]:
        """A copy of :attr:`stats`."""
        with self._lock:
            return dict(self.stats)

    def render(self) -> bytes:
        """Every metric in Prometheus text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
