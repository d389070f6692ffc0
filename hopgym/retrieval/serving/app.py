"""The retrieval server: a Starlette app on uvicorn, one engine thread behind a batching queue.

Functions: :func:`build_app` (the ASGI app, shared with the Ray Serve deployment),
:func:`serve_index` (``hopgym serve``). Class: :class:`RetrievalServer` (in-process, for tests,
notebooks and scripts).

Routes: ``POST /retrieve`` (Search-R1's contract, see :mod:`~hopgym.retrieval.serving.protocol`),
``GET /health`` (``{"status": "ok", "passages": N, "retriever": kind, "stats": {...},
"limits": {...}}``), ``GET /metrics`` (Prometheus text, see
:mod:`~hopgym.retrieval.serving.metrics`). Every other path is a JSON 404.

What the server enforces (each a :class:`~hopgym.retrieval.serving.config.ServeConfig` field):

- a request's line and headers must arrive within ``read_timeout`` seconds of the connection
  opening (or of the first byte after a kept-alive pause), else ``408`` and the connection is
  closed; so must its body, once the headers are in. Uvicorn itself only times out connections
  idle *between* requests (``keep_alive``): a client that opens a socket and sends nothing, or a
  byte a minute (slow-loris), would hold it for ever; :func:`_guarded_protocol` adds the timer.
- headers beyond ``max_header_bytes`` get ``431``; bodies beyond ``max_body_bytes`` ``413``
  (from ``Content-Length`` before reading, or while reading a chunked body); JSON deeper than
  ``max_json_depth`` ``400`` before it is parsed; then the request limits of
  :func:`~hopgym.retrieval.serving.protocol.parse_retrieve`.
- more than ``max_pending`` queries waiting: ``503`` with ``Retry-After: 1``; no answer within
  ``request_timeout``: ``503``.
- the socket listens with a backlog of ``backlog`` connections (2048, capped by the kernel's
  ``net.core.somaxconn``; the standard library's ``http.server`` listens with 5).
- SIGINT / SIGTERM (``hopgym serve``): the listening socket closes (new connections are refused),
  idle connections close, in-flight requests are answered (the engine keeps running until they
  are), and the process exits 0; requests still open after ``shutdown_timeout`` are cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from hopgym._uvicorn import UvicornServer
from hopgym.errors import DependencyNotInstalled, InvalidOptionError
from hopgym.retrieval.base import Retriever
from hopgym.retrieval.serving.batching import Batcher, cache_stats
from hopgym.retrieval.serving.config import ServeConfig
from hopgym.retrieval.serving.metrics import CONTENT_TYPE, ServerMetrics
from hopgym.retrieval.serving.protocol import (
    RequestError,
    check_reply_size,
    document_bytes,
    encode_chunk,
    error_json,
    parse_retrieve,
    result_chunks,
    result_json,
)

#: Replies of more documents than this are encoded in worker threads, a piece at a time, and
#: streamed: the event loop stays free for other clients and no whole reply is held at once.
_INLINE_DOCS = 256
#: About how many documents one streamed piece holds (a few hundred kB of JSON).
_CHUNK_DOCS = 256
#: The reply-size bound's guess of a document's bytes when the engine's passages are not known.
UNKNOWN_DOC_BYTES = 4096

__all__ = ["RetrievalServer", "build_app", "load_served_index", "require_serve_extra", "LIMIT_FIELDS"]

#: The :class:`ServeConfig` fields ``GET /health`` reports as the server's limits.
LIMIT_FIELDS = (
    "topk",
    "max_topk",
    "max_queries",
    "max_query_chars",
    "max_body_bytes",
    "max_reply_bytes",
    "max_header_bytes",
    "max_json_depth",
    "max_batch",
    "max_pending",
    "read_timeout",
    "request_timeout",
)


def require_serve_extra() -> None:
    """Raise :class:`DependencyNotInstalled` naming the ``serve`` extra when it is missing."""
    for module in ("uvicorn", "starlette", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            raise DependencyNotInstalled(
                f"{module} is not installed: `hopgym serve` runs on uvicorn and Starlette; run "
                "`pip install 'hopgym[serve]'`"
            ) from None


def _json_response(status: int, payload: Any, headers: dict[str, str] | None = None) -> Any:
    from starlette.responses import Response

    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    return Response(body, status_code=status, media_type="application/json", headers=headers)


async def _read_body(scope: Any, receive: Any, cfg: ServeConfig) -> bytes:
    """The body of an ASGI request, within ``max_body_bytes`` and ``read_timeout``."""
    length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
    if length is not None:
        try:
            n = int(length)
        except ValueError:
            raise RequestError("bad_request", f"Content-Length is not a number: {length!r:.40}") from None
        if n > cfg.max_body_bytes:
            raise RequestError(
                "body_too_large",
                f"the body has {n:,} bytes; the limit is {cfg.max_body_bytes:,} (--max-body-bytes)",
                "max_body_bytes",
            )

    async def read() -> bytes:
        parts, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise RequestError("bad_request", "the client closed the connection mid-body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > cfg.max_body_bytes:
                raise RequestError(
                    "body_too_large",
                    f"the body has more than {cfg.max_body_bytes:,} bytes (--max-body-bytes)",
                    "max_body_bytes",
                )
            parts.append(chunk)
            if not message.get("more_body", False):
                return parts[0] if len(parts) == 1 else b"".join(parts)

    try:
        timeout = getattr(asyncio, "timeout", None)  # Python 3.11+: no task per request
        if timeout is None:
            return await asyncio.wait_for(read(), cfg.read_timeout)
        async with timeout(cfg.read_timeout):
            return await read()
    except asyncio.TimeoutError:
        raise RequestError(
            "read_timeout",
            f"the body did not arrive within {cfg.read_timeout} s (--read-timeout)",
            "read_timeout",
        ) from None


async def _send_streamed(send: Any, hits: Any, return_scores: bool) -> None:
    """A large ``POST /retrieve`` reply: encoded in worker threads a piece at a time and sent as
    each piece is ready (chunked transfer), so that the loop answers other clients meanwhile and
    memory holds one piece, not the whole reply."""
    loop = asyncio.get_running_loop()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": b'{"result": [', "more_body": True})
    sep = b""
    for run in result_chunks(hits, return_scores, _CHUNK_DOCS):
        piece = await loop.run_in_executor(None, encode_chunk, run, return_scores)
        if piece:
            await send({"type": "http.response.body", "body": sep + piece, "more_body": True})
            sep = b","
    await send({"type": "http.response.body", "body": b"]}"})


async def _send_json(send: Any, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def _error_headers(err: RequestError) -> dict[str, str]:
    headers: dict[str, str] = {}
    if err.kind in ("body_too_large", "read_timeout"):
        headers["Connection"] = "close"  # the body was not read to its end
    if err.status == 503:
        headers["Retry-After"] = "1"
    return headers


def build_app(
    engine: Any,
    cfg: ServeConfig,
    metrics: ServerMetrics,
    info: Callable[[], dict[str, Any]],
    lifespan: Callable[[Any], Any] | None = None,
    doc_bytes: int = UNKNOWN_DOC_BYTES,
) -> Any:
    """The Starlette app of the retrieval server.

    Args:
        engine: answers ``await engine.search(queries, topk) -> list[list[SearchHit]]`` and
            counts requests being received in ``engine.receiving`` (a :class:`Batcher`, or the
            Ray Serve replica's ``@serve.batch`` front).
        cfg: the limits.
        metrics: counts what the app does and renders ``/metrics``.
        info: ``GET /health``'s fields besides ``status``, ``stats`` and ``limits``.
        lifespan: Starlette's lifespan context (starts and stops a :class:`Batcher`).
        doc_bytes: the most bytes one document takes in a reply
            (:func:`~hopgym.retrieval.serving.protocol.document_bytes` of the passages), for the
            ``max_reply_bytes`` bound.
    """
    require_serve_extra()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    limits = {name: getattr(cfg, name) for name in LIMIT_FIELDS}

    async def retrieve(scope: Any, receive: Any, send: Any) -> None:
        # A plain ASGI endpoint: the hot path skips Starlette's Request and Response objects.
        started = time.perf_counter()
        engine.receiving += 1
        try:
            raw = await _read_body(scope, receive, cfg)
            req = parse_retrieve(raw, cfg)
            check_reply_size(req, doc_bytes, cfg)  # before any search: 413 naming max_reply_bytes
        except RequestError as err:
            metrics.reply(err.status, err.kind)
            await _send_json(send, err.status, error_json(err.message, err.limit), _error_headers(err))
            return
        finally:
            engine.receiving -= 1
        try:
            hits = await engine.search(req.queries, req.topk)
        except RequestError as err:
            metrics.reply(err.status, err.kind)
            await _send_json(send, err.status, error_json(err.message, err.limit), _error_headers(err))
            return
        if sum(map(len, hits)) <= _INLINE_DOCS:
            await _send_json(send, 200, result_json(hits, req.return_scores))
        else:
            await _send_streamed(send, hits, req.return_scores)
        metrics.latency.observe(time.perf_counter() - started)
        metrics.reply(200)

    async def health(request: Request) -> Response:
        return _json_response(200, {"status": "ok", **info(), "stats": metrics.snapshot(), "limits": limits})

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(status, "bad_request")
        metrics.error(kind)
        routes = "POST /retrieve, GET /health, GET /metrics"
        what = "unknown path" if status == 404 else f"{request.method} is not allowed on"
        return _json_response(status, error_json(f"{what} {request.url.path!r}: {routes}"))

    async def crash(request: Request, exc: Exception) -> Response:
        metrics.error("internal_error")
        return _json_response(500, error_json(f"{type(exc).__name__}: {exc}"))

    routes = [
        Route("/retrieve", _ASGI(retrieve), methods=["POST"]),
        Route("/health", health, methods=["GET"]),
        Route("/", health, methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    return Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error, Exception: crash}
    )


class _ASGI:
    """An ASGI callable Starlette routes to as is (a function would be wrapped as a
    request/response endpoint)."""

    def __init__(self, fn: Callable[[Any, Any, Any], Any]) -> None:
        self.fn = fn

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.fn(scope, receive, send)


def _raw_reply(status: int, reason: str, message: str, limit: str) -> bytes:
    body = json.dumps(error_json(message, limit)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _guarded_protocol(cfg: ServeConfig, metrics: ServerMetrics) -> type:
    """Uvicorn's HTTP protocol (httptools when installed, else h11) with a request-head timer and
    a header size limit, which uvicorn does not have.

    The timer starts when a connection opens and again at the first byte of each later request;
    it is disarmed by the request head completing (uvicorn then starts a request cycle). A
    connection that has not sent a complete head within ``read_timeout`` gets a JSON ``408`` and is
    closed; one whose head outgrows ``max_header_bytes`` gets ``431``.
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:  # uvicorn without httptools
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]

    timeout_msg = f"no complete request line and headers within {cfg.read_timeout} s (--read-timeout)"
    big_msg = f"request headers over {cfg.max_header_bytes:,} bytes (--max-header-bytes)"

    class GuardedProtocol(Base):  # type: ignore[misc, valid-type]
        _head_timer: asyncio.TimerHandle | None = None
        _head_cycle: Any = None
        _head_bytes = 0
        _head_tail = b""

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_cycle = self.cycle
            self._head_bytes = 0
            self._head_tail = b""
            self._head_timer = self.loop.call_later(cfg.read_timeout, self._head_timeout)

        def data_received(self, data: bytes) -> None:
            idle = self.cycle is None or self.cycle.response_complete
            if idle and self._head_cycle is not self.cycle:
                self._arm()  # the first bytes of the next request on a kept-alive connection
            if idle:
                # Measure the head (up to the blank line) before the parser sees it, so the
                # limit holds whichever parser runs and however the bytes are split.
                seen = self._head_tail + data
                end = seen.find(b"\r\n\r\n")
                size = self._head_bytes + (len(data) if end < 0 else end + 4 - len(self._head_tail))
                self._head_bytes += len(data)
                self._head_tail = seen[-3:]
                if size > cfg.max_header_bytes:
                    self._refuse(
                        431,
                        "Request Header Fields Too Large",
                        big_msg,
                        "max_header_bytes",
                        "headers_too_large",
                    )
                    return
            super().data_received(data)

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self.cycle is self._head_cycle and not self.transport.is_closing():
                self._refuse(408, "Request Timeout", timeout_msg, "read_timeout", "read_timeout")

        def _refuse(self, status: int, reason: str, message: str, limit: str, kind: str) -> None:
            metrics.error(kind)
            self.transport.write(_raw_reply(status, reason, message, limit))
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

    return GuardedProtocol


def _uvicorn_config(app: Any, cfg: ServeConfig, metrics: ServerMetrics) -> Any:
    import uvicorn

    return uvicorn.Config(
        app,
        host=cfg.host,
        port=cfg.port,
        http=_guarded_protocol(cfg, metrics),
        ws="none",
        lifespan="on",
        log_config=None,
        access_log=cfg.verbose,
        backlog=cfg.backlog,
        # uvicorn annotates these int, but hands them to asyncio (call_later, wait_for), which
        # takes float seconds: fractional timeouts work.
        timeout_keep_alive=cast(int, cfg.keep_alive),
        timeout_graceful_shutdown=cast(int, cfg.shutdown_timeout),
        h11_max_incomplete_event_size=cfg.max_header_bytes,
        server_header=False,
        proxy_headers=False,
    )


class RetrievalServer(UvicornServer):
    """Serve a retriever over HTTP, Search-R1 style, batching concurrent requests (uvicorn).

    Started with :meth:`start` (a background thread) or :meth:`serve_forever`, stopped with
    :meth:`stop` (:class:`~hopgym._uvicorn.UvicornServer`).

    Args:
        retriever: any :class:`~hopgym.retrieval.base.Retriever` (BM25, dense, hybrid...).
        config: the options (defaults: :class:`ServeConfig`'s).
        **options: :class:`ServeConfig` fields that replace ``config``'s (``port=0``: any free
            port, see :attr:`url`).

    The socket is bound on construction (so :attr:`url` is known); :meth:`start` serves in a
    background thread, :meth:`serve_forever` in this one.

    Example:
        >>> from hopgym.retrieval import BM25Retriever
        >>> from hopgym.retrieval.http import HTTPRetriever
        >>> from hopgym.corpora.types import Passage
        >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome is old.")]
        >>> with RetrievalServer(BM25Retriever(docs), port=0).start() as srv:
        ...     [p.doc_id for p in HTTPRetriever(srv.url).search("Rome", 1)]
        ['b']
    """

    what = "retrieval server"

    def __init__(self, retriever: Retriever, config: ServeConfig | None = None, **options: Any) -> None:
        require_serve_extra()
        cfg = config or ServeConfig()
        self.config = cfg.updated(**options) if options else cfg
        self.retriever = retriever
        self.kind = getattr(retriever, "kind", None) or type(retriever).__name__
        self.metrics = ServerMetrics(len(getattr(retriever, "passages", ())))
        self.batcher = Batcher(retriever, self.config, self.metrics)

        @contextlib.asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[None]:
            await self.batcher.start()
            try:
                yield
            finally:
                await self.batcher.stop()

        passages = getattr(retriever, "passages", None)
        doc_bytes = document_bytes(passages) if passages else UNKNOWN_DOC_BYTES
        self.app = build_app(self.batcher, self.config, self.metrics, self._info, lifespan, doc_bytes)
        super().__init__(
            self.config.host, self.config.port, self.config.backlog, self.config.shutdown_timeout
        )

    def _info(self) -> dict[str, Any]:
        return {
            "passages": len(getattr(self.retriever, "passages", ())),
            "retriever": self.kind,
            "default_topk": self.config.topk,
            "server": "uvicorn",
            "query_cache": cache_stats(self.retriever),
        }

    @property
    def stats(self) -> dict[str, int]:
        """Running totals: requests, queries, batches, errors, largest batch."""
        return self.metrics.snapshot()

    @property
    def connections(self) -> int:
        """Open client connections."""
        return 0 if self._server is None else len(self._server.server_state.connections)

    def uvicorn_config(self) -> Any:
        """The ``uvicorn.Config`` of one run: limits, timeouts and the guarded HTTP protocol."""
        return _uvicorn_config(self.app, self.config, self.metrics)


def load_served_index(cfg: ServeConfig) -> tuple[Retriever, Any]:
    """The retriever and manifest of ``cfg.index``, verified (``cfg.verify``) and rebuilt when
    ``cfg.rebuild`` says so (see :func:`~hopgym.retrieval.index_store.load_index`), with a query
    cache of ``cfg.cache_entries`` / ``cfg.cache_bytes``."""
    from hopgym.retrieval.index_store import load_index, read_manifest

    if cfg.index is None:
        raise InvalidOptionError("serve needs an index directory (--index DIR)")
    retriever = load_index(
        cfg.index,
        corpus=cfg.corpus,
        model=cfg.model,
        retriever=cfg.retriever,
        threads=cfg.threads,
        device=cfg.device,
        index_backend=cfg.index_backend,
        verify=cfg.verify,
        rebuild=cfg.rebuild,
        nprobe=cfg.nprobe,
        ef_search=cfg.ef_search,
    )
    configure = getattr(retriever, "configure_cache", None)
    if configure is not None:
        configure(cfg.cache_entries, cfg.cache_bytes)
    return retriever, read_manifest(cfg.index)
