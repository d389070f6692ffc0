"""The retrieval server under bad input and faults: limits, timeouts, overload, shutdown, metrics.

The contract itself (Search-R1's shapes, batching, the client) is in test_server.py.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from hopgym.corpora.datasets import load_corpus
from hopgym.retrieval.base import SearchHit
from hopgym.retrieval.http import HTTPRetriever  # noqa: E402
from hopgym.retrieval.hybrid import scored_search_batch  # noqa: E402
from hopgym.retrieval.serving import RetrievalServer, ServeConfig  # noqa: E402
from hopgym.retrieval.serving.protocol import ERROR_KINDS, RequestError, check_json_depth  # noqa: E402
from hopgym.retrieval.sparse import BM25Retriever

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
CORPUS = load_corpus(FIX / "wiki_corpus.jsonl")
BM25 = BM25Retriever(CORPUS)


@pytest.fixture(scope="module")
def server():
    srv = RetrievalServer(
        BM25,
        port=0,
        max_queries=8,
        max_query_chars=64,
        max_topk=10,
        max_body_bytes=4096,
        max_header_bytes=2048,
        max_json_depth=8,
        read_timeout=0.5,
    ).start()
    yield srv
    srv.stop()


def raw_request(url: str, data: bytes, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read one reply: (status, headers, body)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
        want = int(headers.get("content-length", len(body)))
        while len(body) < want:
            chunk = s.recv(65536)
            if not chunk:
                break
            body += chunk
    return status, headers, body


def post(url: str, body: bytes, extra: str = "") -> tuple[int, dict[str, str], dict]:
    head = (
        f"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    ).encode()
    status, headers, raw = raw_request(url, head + body)
    return status, headers, json.loads(raw)


def alive(srv: RetrievalServer) -> bool:
    return HTTPRetriever(srv.url, timeout=5, retries=0).search("Corvin Institute", 1) == [CORPUS[7]]


@pytest.mark.parametrize(
    "payload,status,limit",
    [
        ({"queries": ["x"] * 9}, 413, "max_queries"),
        ({"queries": ["Kaldor", "y" * 65]}, 413, "max_query_chars"),
        ({"queries": ["x"], "topk": 11}, 400, "max_topk"),
        ({"queries": ["x"], "topk": 0}, 400, "max_topk"),
        ({"queries": ["x"], "topk": 2.5}, 400, "max_topk"),
        ({"queries": "x", "pad": "z" * 5000}, 413, "max_body_bytes"),
        ({"queries": [[[[[[[[["deep"]]]]]]]]]}, 400, "max_json_depth"),
    ],
)
def test_each_limit_is_a_4xx_naming_it(server, payload, status, limit):
    code, _, body = post(server.url, json.dumps(payload).encode())
    assert code == status
    assert body["limit"] == limit
    assert "--" + limit.replace("_", "-") in body["error"]  # the flag to raise it
    assert alive(server)


@pytest.mark.parametrize(
    "raw,needle",
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"queries": [1, 2]}', "list of strings"),
        (b'{"topk": 3}', "list of strings"),
        (b'{"queries": ["x"], "return_scores": "yes"}', "return_scores"),
        (b"\xff\xfe{", "not JSON"),
    ],
)
def test_malformed_bodies_get_400(server, raw, needle):
    code, _, body = post(server.url, raw)
    assert code == 400 and needle in body["error"] and body["limit"] is None
    assert alive(server)


def test_a_100k_deep_body_is_refused_before_parsing(server):
    deep = b'{"queries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    srv = RetrievalServer(BM25, port=0, max_body_bytes=1 << 20).start()
    try:
        code, _, body = post(srv.url, deep)
        assert code == 400 and body["limit"] == "max_json_depth" and "100001 deep" in body["error"]
        assert alive(srv)
    finally:
        srv.stop()
    # Brackets inside strings do not nest; escaped quotes do not end a string.
    check_json_depth(b'{"queries": ["[[[[[[[[[[[[[[[[[[[[", "\\"[[[[[[[[[[[[[[[[[[["]}', 3)
    with pytest.raises(RequestError, match="nested 4 deep"):
        check_json_depth(b'{"a": [[["x"]]], "b": "]]]]"}', 3)


def test_a_2mb_query_is_refused_at_once_and_others_are_served():
    srv = RetrievalServer(BM25, port=0).start()  # the default limits
    try:
        code, _, body = post(srv.url, json.dumps({"queries": ["word " * 400_000]}).encode())
        assert code == 413 and body["limit"] == "max_query_chars"
        assert "refused, not truncated" in body["error"]
        assert srv.stats["queries"] == 0  # it never reached the engine
        assert alive(srv)
    finally:
        srv.stop()


def test_oversized_chunked_body_and_headers(server):
    chunk = b"x" * 3000
    chunked = (
        b"POST /retrieve HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % len(chunk)
        + chunk
        + b"\r\n"
        + b"%x\r\n" % len(chunk)
        + chunk
        + b"\r\n0\r\n\r\n"
    )
    code, headers, raw = raw_request(server.url, chunked)
    assert code == 413 and json.loads(raw)["limit"] == "max_body_bytes"
    assert headers.get("connection") == "close"
    big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 4000 + b"\r\n\r\n"
    code, _, raw = raw_request(server.url, big)
    assert code == 431 and json.loads(raw)["limit"] == "max_header_bytes"
    assert alive(server)


def test_unknown_paths_and_methods_are_json(server):
    code, _, raw = raw_request(server.url, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
    assert code == 404 and "POST /retrieve" in json.loads(raw)["error"]
    code, _, raw = raw_request(server.url, b"GET /retrieve HTTP/1.1\r\nHost: x\r\n\r\n")
    assert code == 405 and "not allowed" in json.loads(raw)["error"]


def test_a_slow_body_times_out_with_408(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(b'POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"q')
        reply = s.recv(65536)
        assert b" 408 " in reply.split(b"\r\n")[0] and b"read_timeout" in reply


def test_idle_and_slow_loris_sockets_time_out_and_never_block_a_client():
    srv = RetrievalServer(BM25, port=0, read_timeout=1.5).start()
    host, port = srv.host, srv.port
    socks = []
    try:
        for i in range(300):
            s = socket.create_connection((host, port), timeout=10)
            if i % 2:  # half send a partial request line, slow-loris style; half send nothing
                s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nX-a: ")
            socks.append(s)
        client = HTTPRetriever(srv.url, timeout=5, retries=0)
        worst = 0.0
        for q in ["Kaldor", "Halden", "Corvin Institute", "Tolva River"] * 3:
            t0 = time.monotonic()
            assert client.search(q, 2) == BM25.search(q, 2)
            worst = max(worst, time.monotonic() - t0)
        assert worst < 1.0
        time.sleep(2.0)  # past read_timeout: every idle socket got a 408 and was closed
        for s in socks[:20]:
            s.settimeout(2)
            data = s.recv(65536)
            assert b" 408 " in data
        deadline = time.monotonic() + 5
        while srv.connections > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.connections <= 1  # the client's own kept-alive connection at most
        assert srv.metrics.errors.labels(kind="read_timeout")._value.get() >= 300
    finally:
        for s in socks:
            s.close()
        srv.stop()


class Gate:
    """A retriever whose batches wait until released."""

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.passages = CORPUS
        self.release = threading.Event()
        self.entered = threading.Event()
        self.delay, self.fail = delay, fail

    def search(self, query: str, k: int):
        return BM25.search(query, k)

    def search_batch(self, queries: Sequence[str], k: int):
        return BM25.search_batch(queries, k)

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        self.entered.set()
        if self.delay:
            time.sleep(self.delay)
        else:
            assert self.release.wait(10)
        if self.fail:
            raise MemoryError("faiss ran out of memory")
        return scored_search_batch(BM25, queries, k)


def test_overload_and_engine_timeouts_are_503_and_errors_500():
    gate = Gate()
    srv = RetrievalServer(gate, port=0, max_pending=2, request_timeout=3.0).start()
    try:
        results: list[tuple[int, dict]] = []
        t = threading.Thread(target=lambda: results.append(post(srv.url, b'{"queries": ["Kaldor"]}')[::2]))
        t.start()
        assert gate.entered.wait(5)  # the engine holds request 1
        t2 = threading.Thread(target=lambda: results.append(post(srv.url, b'{"queries": ["a", "b"]}')[::2]))
        t2.start()  # 2 queries wait: the queue is full
        deadline = time.monotonic() + 5
        while srv.batcher.pending < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        code, headers, body = post(srv.url, b'{"queries": ["c"]}')
        assert code == 503 and body["limit"] == "max_pending" and headers["retry-after"] == "1"
        gate.release.set()
        t.join(10)
        t2.join(10)
        assert sorted(c for c, _ in results) == [200, 200]
    finally:
        gate.release.set()
        srv.stop()
    slow = RetrievalServer(Gate(delay=1.5), port=0, request_timeout=0.3).start()
    try:
        code, _, body = post(slow.url, b'{"queries": ["Kaldor"]}')
        assert code == 503 and body["limit"] == "request_timeout"
    finally:
        slow.stop()
    broken = Gate(delay=0.01, fail=True)
    srv = RetrievalServer(broken, port=0).start()
    try:
        code, _, body = post(srv.url, b'{"queries": ["Kaldor"]}')
        assert code == 500 and "MemoryError: faiss ran out of memory" in body["error"]
        broken.fail = False
        code, _, body = post(srv.url, b'{"queries": ["Kaldor"]}')
        assert code == 200  # the server stays up
    finally:
        srv.stop()


def test_metrics_are_prometheus_text(server):
    from prometheus_client.parser import text_string_to_metric_families

    before = server.stats
    post(server.url, b'{"queries": ["Kaldor", "Halden"], "topk": 2}')
    post(server.url, b'{"queries": ["x"], "topk": 99}')
    status, headers, raw = raw_request(server.url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name: f for f in text_string_to_metric_families(raw.decode())}
    assert {
        "hopgym_retrieval_requests",
        "hopgym_retrieval_queries",
        "hopgym_retrieval_errors",
        "hopgym_retrieval_batch_queries",
        "hopgym_retrieval_batch_requests",
        "hopgym_retrieval_queue_wait_seconds",
        "hopgym_retrieval_engine_seconds",
        "hopgym_retrieval_request_seconds",
        "hopgym_retrieval_pending_queries",
        "hopgym_retrieval_passages",
    } <= set(families)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples
    }
    assert samples[("hopgym_retrieval_passages", ())] == len(CORPUS)
    assert samples[("hopgym_retrieval_queries_total", ())] >= before["queries"] + 2
    assert samples[("hopgym_retrieval_errors_total", (("kind", "topk_out_of_range"),))] >= 1
    assert {
        k for (n, lab), _ in samples.items() if n == "hopgym_retrieval_errors_total" for _, k in lab
    } == set(ERROR_KINDS)
    assert samples[("hopgym_retrieval_batch_queries_bucket", (("le", "+Inf"),))] >= 1
    assert samples[("hopgym_retrieval_requests_total", (("status", "400"),))] >= 1


def test_health_reports_stats_and_limits(server):
    health = HTTPRetriever(server.url).health()
    assert health["status"] == "ok" and health["passages"] == len(CORPUS)
    assert health["limits"]["max_queries"] == 8 and health["limits"]["read_timeout"] == 0.5
    assert health["server"] == "uvicorn" and health["stats"]["requests"] >= 0


def test_config_is_checked():
    with pytest.raises(ValueError, match="max_queries"):
        ServeConfig(max_queries=0)
    with pytest.raises(ValueError, match="replicas > 1 needs ray"):
        ServeConfig(replicas=2)
    with pytest.raises(ValueError, match="verify"):
        ServeConfig(verify="quick")
    with pytest.raises(TypeError, match="unknown serve option"):
        ServeConfig().updated(max_querys=3)
    with pytest.raises(OSError, match="cannot listen"):
        busy = RetrievalServer(BM25, port=0)
        try:
            RetrievalServer(BM25, port=busy.port)
        finally:
            busy.stop()


_DRAIN = textwrap.dedent("""
    import sys, time
    from hopgym.retrieval.hybrid import scored_search_batch
    from hopgym.corpora.datasets import load_corpus
    from hopgym.retrieval import BM25Retriever
    from hopgym.retrieval.serving import RetrievalServer

    bm25 = BM25Retriever(load_corpus(sys.argv[1]))

    class Slow:
        passages = bm25.passages
        def search_batch_scored(self, queries, k):
            time.sleep(1.5)
            return scored_search_batch(bm25, queries, k)

    srv = RetrievalServer(Slow(), port=int(sys.argv[2]))
    print("ready", flush=True)
    srv.serve_forever()
    print("drained", flush=True)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_drains_in_flight_requests_and_refuses_new_ones(sig):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _DRAIN, str(FIX / "wiki_corpus.jsonl"), str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        out: list[tuple[int, dict]] = []
        t = threading.Thread(
            target=lambda: out.append(post(url, b'{"queries": ["Corvin Institute"], "topk": 1}')[::2])
        )
        t.start()
        time.sleep(0.5)  # the request is in the engine (1.5 s)
        proc.send_signal(sig)
        time.sleep(0.3)
        with pytest.raises(OSError):  # the listening socket is closed: refused
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        t.join(10)
        assert out and out[0][0] == 200 and out[0][1]["result"][0][0]["id"] == "7"
        stdout, stderr = proc.communicate(timeout=10)  # it exits by itself once drained
        assert proc.returncode == 0, stderr
        assert "drained" in stdout and "Traceback" not in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_the_guards_hold_on_uvicorns_h11_parser_too(monkeypatch):
    # Without httptools uvicorn parses with h11; the head timer and header limit are the same.
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)
    srv = RetrievalServer(BM25, port=0, read_timeout=0.5, max_header_bytes=1024).start()
    try:
        assert srv._server.config.http_protocol_class.__mro__[1].__name__ == "H11Protocol"
        big = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * 2000 + b"\r\n\r\n"
        code, _, raw = raw_request(srv.url, big)
        assert code == 431
        with socket.create_connection((srv.host, srv.port), timeout=5) as s:
            s.sendall(b"GET /health HTTP/1.1\r\n")
            assert b" 408 " in s.recv(65536)
        assert alive(srv)
    finally:
        srv.stop()


def test_without_the_serve_extra_the_error_names_it(monkeypatch):
    from hopgym.errors import DependencyNotInstalled

    monkeypatch.setitem(sys.modules, "uvicorn", None)
    with pytest.raises(DependencyNotInstalled, match=r"pip install 'hopgym\[serve\]'"):
        RetrievalServer(BM25, port=0)


def test_repeated_queries_are_answered_from_the_query_cache():
    retriever = BM25Retriever(CORPUS)
    srv = RetrievalServer(retriever, port=0).start()
    try:
        client = HTTPRetriever(srv.url)
        first = client.search_batch(["music school founded", "research institute mineralogy"], 3)
        before = client.health()["query_cache"]
        again = client.search_batch(
            ["research institute mineralogy", "music school founded", "research institute mineralogy"], 3
        )
        after = client.health()["query_cache"]
    finally:
        srv.stop()
    assert [[p.doc_id for p in hits] for hits in again] == [
        [p.doc_id for p in first[1]],
        [p.doc_id for p in first[0]],
        [p.doc_id for p in first[1]],
    ]
    assert first[0] and first[1]
    assert before["misses"] == 2 and before["hits"] == 0
    assert after["hits"] == before["hits"] + 3 and after["misses"] == before["misses"]
    # The same ranking as the retriever searched directly without a cache.
    uncached = BM25Retriever(CORPUS, cache_entries=0)
    assert [p.doc_id for p in uncached.search("research institute mineralogy", 3)] == [
        p.doc_id for p in first[1]
    ]


@pytest.mark.parametrize(("entries", "size"), [(0, 0), (10, 1 << 20)])
def test_a_served_index_gets_the_configured_query_cache(tmp_path, entries, size):
    from hopgym.retrieval.index_store import save_index
    from hopgym.retrieval.serving.app import load_served_index

    save_index(BM25Retriever(CORPUS), tmp_path / "idx")
    cfg = ServeConfig(index=str(tmp_path / "idx"), cache_entries=entries, cache_bytes=size)
    retriever, manifest = load_served_index(cfg)
    retriever.search("music school", 2)
    retriever.search("music school", 2)
    info = retriever.cache_info()
    assert (info.max_entries, info.max_bytes) == (entries, size)
    assert info.hits == (1 if entries else 0)
    with pytest.raises(ValueError, match="cache_entries must be an int >= 0"):
        ServeConfig(cache_entries=-1)
