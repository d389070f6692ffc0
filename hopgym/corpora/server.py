"""A retrieval server speaking Search-R1's ``POST /retrieve`` contract, with request batching.

Classes: :class:`RetrievalServer`. Functions: :func:`start_server`, :func:`serve_index`,
:func:`document_json`.

Many rollout workers can share one index through it (``hopgym serve --index DIR``). The wire
format is Search-R1's ``retrieval_server.py``, so Search-R1, SkyRL and rLLM clients work::

    POST /retrieve  {"queries": ["q1", "q2"], "topk": 3, "return_scores": true}
    200             {"result": [[{"document": {"id": ..., "contents": "Title\\ntext", ...},
                                  "score": 12.3}, ...], ...]}

Without ``return_scores`` each result is the list of documents alone. Documents carry ``id`` and
``contents`` (``title`` newline ``text``) as Search-R1's corpus rows do, plus ``title`` and ``text``
so that titles containing a newline survive. ``GET /health`` answers ``{"status": "ok",
"passages": N, "retriever": kind, "stats": {requests, queries, batches, ...}}``.
Errors are JSON ``{"error": message}`` with status 400 (bad request), 404, 413 or 503.

Batching: HTTP handler threads only parse and queue requests; one engine thread takes every
request that is waiting (up to ``max_batch`` queries, waiting at most ``max_wait_ms`` for requests
already being received) and answers them with a single batched engine call. The engine is thus
only ever called from one thread (bm25s and FAISS need no locking), and concurrent clients share
the encoder's and FAISS's batch speed-up. The standard library's ``ThreadingHTTPServer`` serves
HTTP/1.1 with keep-alive; no extra dependency.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hopgym.corpora.hybrid import scored_search_batch
from hopgym.corpora.retrieval import Retriever, SearchHit
from hopgym.corpora.types import Passage

__all__ = ["RetrievalServer", "start_server", "serve_index", "document_json"]

_MAX_BODY = 16 << 20


def document_json(p: Passage) -> dict[str, str]:
    """A passage as Search-R1 returns it: ``id`` and ``contents``, plus ``title`` and ``text``.

    Example:
        >>> document_json(Passage("7", "Oslo", "Oslo is a city."))["contents"]
        'Oslo\\nOslo is a city.'
    """
    return {"id": p.doc_id, "contents": p.contents, "title": p.title, "text": p.text}


@dataclass
class _Job:
    queries: list[str]
    topk: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[list[SearchHit]] | None = None
    error: str | None = None


class _Batcher(threading.Thread):
    """The engine thread: drains the queue into batched engine calls."""

    def __init__(self, server: RetrievalServer) -> None:
        super().__init__(name="hopgym-retrieval-batcher", daemon=True)
        self.srv = server
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.stopping = False

    def run(self) -> None:
        srv = self.srv
        while True:
            job = self.jobs.get()
            if job is None:
                break
            batch = [job]
            n = len(job.queries)
            deadline = time.monotonic() + srv.max_wait_ms / 1000.0
            stop = False
            while n < srv.max_batch:
                try:
                    nxt = self.jobs.get_nowait()
                except queue.Empty:
                    # Wait only for requests that are being received right now: a lone client
                    # pays no batching delay.
                    left = deadline - time.monotonic()
                    if srv._receiving <= 0 or left <= 0:
                        break
                    try:
                        nxt = self.jobs.get(timeout=min(left, 0.0005))
                    except queue.Empty:
                        continue
                if nxt is None:
                    stop = True
                    break
                batch.append(nxt)
                n += len(nxt.queries)
            self._answer(batch)
            if stop:
                break
        # Fail whatever is still queued: the server is going away.
        while True:
            try:
                job = self.jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.error = "the retrieval server is shutting down"
                job.done.set()

    def _answer(self, batch: list[_Job]) -> None:
        srv = self.srv
        queries = [q for j in batch for q in j.queries]
        k = max(j.topk for j in batch)
        try:
            hits = scored_search_batch(srv.retriever, queries, k) if queries else []
        except Exception as exc:  # noqa: BLE001 - reported to every waiting client
            for j in batch:
                j.error = f"{type(exc).__name__}: {exc}"
                j.done.set()
            with srv._lock:
                srv.stats["errors"] += len(batch)
            return
        off = 0
        for j in batch:
            j.result = [h[: j.topk] for h in hits[off:off + len(j.queries)]]
            off += len(j.queries)
            j.done.set()
        with srv._lock:
            srv.stats["batches"] += 1
            srv.stats["queries"] += len(queries)
            srv.stats["max_batch_queries"] = max(srv.stats["max_batch_queries"], len(queries))
            srv.stats["max_batch_requests"] = max(srv.stats["max_batch_requests"], len(batch))


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr: tuple[str, int], owner: RetrievalServer) -> None:
        self.owner = owner
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        super().__init__(addr, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.conn_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.conn_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return  # a client went away (or the server is stopping): nothing to report
        super().handle_error(request, client_address)

    def close_connections(self) -> None:
        with self.conn_lock:
            conns = list(self.connections)
            self.connections.clear()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                c.close()
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse their connection
    # Headers and body leave in two writes; with Nagle's algorithm the second waits for the
    # client's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True
    server: _HTTPServer
    server_version = "hopgym-retrieval"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        if self.server.owner.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, payload: Any) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        owner = self.server.owner
        if self.path.rstrip("/") in ("/health", ""):
            n = len(getattr(owner.retriever, "passages", ()))
            with owner._lock:
                stats = dict(owner.stats)
            self._send(200, {"status": "ok", "passages": n, "retriever": owner.kind,
                             "default_topk": owner.default_topk, "stats": stats})
        else:
            self._send(404, {"error": f"unknown path {self.path!r}: POST /retrieve, GET /health"})

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        owner = self.server.owner
        if self.path.rstrip("/") != "/retrieve":
            self._send(404, {"error": f"unknown path {self.path!r}: POST /retrieve"})
            return
        with owner._lock:
            owner._receiving += 1
        queued = False
        try:
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if length < 0 or length > _MAX_BODY:
                self._send(413 if length > _MAX_BODY else 400,
                           {"error": f"Content-Length must be 0..{_MAX_BODY}"})
                return
            raw = self.rfile.read(length)
            try:
                req = json.loads(raw or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                self._send(400, {"error": f"body is not JSON: {exc}"})
                return
            parsed = owner._parse(req)
            if isinstance(parsed, str):
                self._send(400, {"error": parsed})
                return
            queries, topk, return_scores = parsed
            job = _Job(queries, topk)
            if owner._batcher is None or owner._batcher.stopping:
                self._send(503, {"error": "the retrieval server is shutting down"})
                return
            with owner._lock:
                owner._receiving -= 1
                owner.stats["requests"] += 1
            queued = True
            owner._batcher.jobs.put(job)
        finally:
            if not queued:
                with owner._lock:
                    owner._receiving -= 1
        if not job.done.wait(owner.request_timeout):
            self._send(503, {"error": f"no answer within {owner.request_timeout} s"})
            return
        if job.error is not None or job.result is None:
            self._send(503 if "shutting down" in (job.error or "") else 500,
                       {"error": job.error or "no result"})
            return
        if return_scores:
            result: list[Any] = [[{"document": document_json(h.passage), "score": h.score}
                                  for h in hits] for hits in job.result]
        else:
            result = [[document_json(h.passage) for h in hits] for hits in job.result]
        self._send(200, {"result": result})


class RetrievalServer:
    """Serve a retriever over HTTP, Search-R1 style, batching concurrent requests.

    Args:
        retriever: any :class:`~hopgym.corpora.retrieval.Retriever` (BM25, dense, hybrid...).
        host, port: where to listen (``port=0``: any free port; see :attr:`url`).
        default_topk: ``topk`` when a request gives none.
        max_topk: the largest ``topk`` accepted.
        max_batch: the most queries one engine call answers.
        max_wait_ms: how long the engine thread waits for requests being received to join a
            batch (a lone client never waits).
        max_queries: the most queries one request may carry.
        request_timeout: seconds a request waits for its answer before a 503.
        verbose: log every request to stderr.

    Example:
        >>> from hopgym.corpora.retrieval import BM25Retriever
        >>> from hopgym.corpora.http import HTTPRetriever
        >>> docs = [Passage("a", "Oslo", "Oslo is a city."), Passage("b", "Rome", "Rome is old.")]
        >>> with RetrievalServer(BM25Retriever(docs), port=0).start() as srv:
        ...     [p.doc_id for p in HTTPRetriever(srv.url).search("Rome", 1)]
        ['b']
    """

    def __init__(self, retriever: Retriever, *, host: str = "127.0.0.1", port: int = 8000,
                 default_topk: int = 3, max_topk: int = 1000, max_batch: int = 64,
                 max_wait_ms: float = 2.0, max_queries: int = 4096,
                 request_timeout: float = 60.0, verbose: bool = False) -> None:
        if default_topk < 1 or max_topk < default_topk:
            raise ValueError(f"need 1 <= default_topk <= max_topk, got {default_topk}, {max_topk}")
        if max_batch < 1 or max_wait_ms < 0 or max_queries < 1:
            raise ValueError("max_batch and max_queries must be positive, max_wait_ms >= 0")
        self.retriever = retriever
        self.kind = getattr(retriever, "kind", None) or type(retriever).__name__
        self.default_topk, self.max_topk = default_topk, max_topk
        self.max_batch, self.max_wait_ms, self.max_queries = max_batch, max_wait_ms, max_queries
        self.request_timeout = request_timeout
        self.verbose = verbose
        self.stats: dict[str, int] = {"requests": 0, "queries": 0, "batches": 0, "errors": 0,
                                      "max_batch_queries": 0, "max_batch_requests": 0}
        self._lock = threading.Lock()
        self._receiving = 0
        self._batcher: _Batcher | None = None
        self._thread: threading.Thread | None = None
        self._http = _HTTPServer((host, port), self)
        self.host, self.port = self._http.server_address[:2]

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server (the real port when ``port=0``)."""
        host = self.host if ":" not in str(self.host) else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    def _parse(self, req: Any) -> tuple[list[str], int, bool] | str:
        if not isinstance(req, dict):
            return "the body must be a JSON object with 'queries'"
        queries = req.get("queries", req.get("query"))
        if isinstance(queries, str):
            queries = [queries]
        if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
            return "'queries' must be a list of strings"
        if len(queries) > self.max_queries:
            return f"at most {self.max_queries} queries per request, got {len(queries)}"
        topk = req.get("topk")
        if topk is None:
            topk = self.default_topk
        if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= self.max_topk:
            return f"'topk' must be an integer in 1..{self.max_topk}, got {topk!r}"
        rs = req.get("return_scores", False)
        if not isinstance(rs, bool):
            return f"'return_scores' must be true or false, got {rs!r}"
        return queries, topk, rs

    def start(self) -> RetrievalServer:
        """Serve in background threads; returns ``self`` (use as a context manager to stop)."""
        if self._thread is not None:
            raise RuntimeError("the server is already running")
        self._batcher = _Batcher(self)
        self._batcher.start()
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.1},
            name="hopgym-retrieval-http", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted (Ctrl-C), then shut down cleanly."""
        self._batcher = _Batcher(self)
        self._batcher.start()
        try:
            self._http.serve_forever(poll_interval=0.25)
        except KeyboardInterrupt:
            pass
        finally:
            self._stop_batcher()
            self._http.server_close()
            self._http.close_connections()

    def _stop_batcher(self) -> None:
        if self._batcher is not None:
            self._batcher.stopping = True
            self._batcher.jobs.put(None)
            self._batcher.join(timeout=10)

    def stop(self) -> None:
        """Stop serving: close the listening socket and every open connection (clients see a
        dropped connection, as when the process dies), and fail queued requests."""
        if self._thread is not None:
            self._http.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._stop_batcher()
        self._http.server_close()
        self._http.close_connections()

    def __enter__(self) -> RetrievalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_server(retriever: Retriever, *, host: str = "127.0.0.1", port: int = 0,
                 default_topk: int = 3, max_batch: int = 64, max_wait_ms: float = 2.0
                 ) -> RetrievalServer:
    """Start a :class:`RetrievalServer` in background threads (``port=0``: a free port)."""
    return RetrievalServer(retriever, host=host, port=port, default_topk=default_topk,
                           max_batch=max_batch, max_wait_ms=max_wait_ms).start()


def serve_index(index: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 8000,
                corpus: str | os.PathLike[str] | None = None, model: str | None = None,
                default_topk: int = 3, max_batch: int = 64, max_wait_ms: float = 2.0,
                threads: int | None = 1, verbose: bool = False) -> None:
    """Load a saved index (checked against its corpus) and serve it until interrupted."""
    from hopgym.corpora.index_store import load_index, read_manifest

    manifest = read_manifest(index)
    retriever = load_index(index, corpus=corpus, model=model, threads=threads)
    srv = RetrievalServer(retriever, host=host, port=port, default_topk=default_topk,
                          max_batch=max_batch, max_wait_ms=max_wait_ms, verbose=verbose)
    print(f"hopgym: serving a {manifest.retriever} index of {manifest.num_passages:,} passages "
          f"from {os.fspath(index)} at {srv.url}/retrieve (Ctrl-C to stop)", flush=True)
    srv.serve_forever()
