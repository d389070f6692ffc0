"""Fail-over between retrieval servers (issue 21): a server that is not (or no longer) a retrieval
server sends the call to the next one, as a dead one does, and a rolling restart of real servers
under load loses no request. The rule itself is written once, in ``hopgym/retrieval/http.py``."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

from hopgym.corpora.datasets import load_corpus  # noqa: E402
from hopgym.errors import RetrievalError  # noqa: E402
from hopgym.retrieval.http import HTTPRetriever  # noqa: E402
from hopgym.retrieval.serving import RetrievalServer  # noqa: E402
from hopgym.retrieval.sparse import BM25Retriever  # noqa: E402

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = load_corpus(FIX / "wiki_corpus.jsonl")
BM25 = BM25Retriever(CORPUS)
QUERIES = ["Kaldor", "Halden", "Tolva River", "Corvin Institute", "Marlow Academy", "Orsk River"]

# What a server that is not a retrieval server answers to POST /retrieve: Ray Serve's proxy once
# the app is deleted (404 text/plain), a web page, JSON of another API.
NOT_RETRIEVAL = {
    "404 text": (
        404,
        "text/plain",
        b"Path '/retrieve' not found. Ping http://.../-/routes for available routes.",
    ),
    "405": (405, "application/json", b'{"detail": "Method Not Allowed"}'),
    "200 html": (200, "text/html", b"<html><body>It works!</body></html>"),
    "200 other json": (200, "application/json", b'{"status": "ok"}'),
}


@contextmanager
def answering(status: int, content_type: str, body: bytes, port: int = 0) -> Iterator[tuple[str, list[int]]]:
    """A plain HTTP server that answers every POST with this reply; yields its URL and a list
    that counts the requests."""
    hits: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - the standard library's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            hits.append(1)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            # No keep-alive: once this server is gone, no connection to it lingers on its port.
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", hits
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.fixture(scope="module")
def live():
    srv = RetrievalServer(BM25, port=0).start()
    yield srv
    srv.stop()


@pytest.mark.parametrize("reply", list(NOT_RETRIEVAL))
def test_a_server_that_is_not_a_retrieval_server_is_failed_over(live, reply):
    with answering(*NOT_RETRIEVAL[reply]) as (url, hits):
        client = HTTPRetriever([url, live.url], retries=1, backoff=5.0)
        t0 = time.monotonic()
        for q in QUERIES:
            assert client.search(q, 2) == BM25.search(q, 2)
        assert time.monotonic() - t0 < 4.0  # moving on to the next server does not wait
        assert hits, "the first server was asked"


@pytest.mark.parametrize("reply", list(NOT_RETRIEVAL))
def test_alone_it_fails_at_once_and_says_what_it_answered(reply):
    status, _, body = NOT_RETRIEVAL[reply]
    with answering(*NOT_RETRIEVAL[reply]) as (a, hits_a), answering(*NOT_RETRIEVAL[reply]) as (b, hits_b):
        for urls in ([a], [a, b]):
            client = HTTPRetriever(urls, retries=3, backoff=5.0)
            t0 = time.monotonic()
            with pytest.raises(RetrievalError, match="no retrieval server answered") as err:
                client.search("Kaldor", 1)
            assert time.monotonic() - t0 < 4.0  # not asked again after a back-off
            assert all(u in str(err.value) for u in urls)
            assert (f"HTTP {status}" if status != 200 else "not a retrieval server") in str(err.value)
        assert len(hits_a) == 2 and len(hits_b) == 1  # each asked once per call


def test_a_bad_request_is_not_failed_over(live):
    # A 4xx other than 404/405 refuses the request itself: every replica would.
    with answering(400, "application/json", b'{"error": "bad"}') as (url, _):
        client = HTTPRetriever([url, live.url], retries=2)
        with pytest.raises(RetrievalError, match="refused the request: HTTP 400"):
            for q in QUERIES:  # calls alternate: one of them starts on the 400 server
                client.search(q, 1)


def _load(
    urls: list[str], n_clients: int, stop: threading.Event, done: list[int], errors: list[BaseException]
):
    """``n_clients`` threads that search until ``stop`` is set, checking every answer."""

    def work(c: int) -> None:
        client = HTTPRetriever(urls, timeout=10, retries=3, backoff=0.05, cooldown=0.2)
        try:
            j = 0
            while not stop.is_set():
                q = QUERIES[(c + j) % len(QUERIES)]
                got = client.search(q, 2)
                if got != BM25.search(q, 2):
                    raise AssertionError(f"wrong answer for {q!r}: {got}")
                done.append(1)
                j += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(c,)) for c in range(n_clients)]
    for t in threads:
        t.start()
    return threads


def _progress(
    done: list[int], errors: list[BaseException], n: int = 40, until: Callable[[], bool] = lambda: True
) -> None:
    """Until ``n`` more requests are answered and ``until()`` holds, or a client failed."""
    goal, deadline = len(done) + n, time.monotonic() + 30
    while not (len(done) >= goal and until()) and not errors and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not errors, errors[:3]
    assert len(done) >= goal and until(), "the load stalled"


def test_a_rolling_restart_of_two_servers_under_load_loses_no_request():
    a, b = RetrievalServer(BM25, port=0).start(), RetrievalServer(BM25, port=0).start()
    port_a, port_b = a.port, b.port
    done: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    threads = _load([a.url, b.url], 8, stop, done, errors)
    try:
        _progress(done, errors)
        a.stop()  # in-flight requests are answered, new connections refused: all go to b
        _progress(done, errors)
        # Something else answers on a's port for a while (a proxy whose app is gone): 404s.
        with answering(*NOT_RETRIEVAL["404 text"], port=port_a) as (_, hits):
            _progress(
                done, errors, until=lambda: bool(hits)
            )  # until a client's cool-down of a ends and it asks
        a = RetrievalServer(BM25, port=port_a).start()  # a is back
        _progress(done, errors)
        b.stop()  # then b goes
        _progress(done, errors)
        b = RetrievalServer(BM25, port=port_b).start()
        _progress(done, errors, until=lambda: b.stats["requests"] > 0)  # back in use
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        a.stop()
        b.stop()
    assert not errors, errors[:3]
