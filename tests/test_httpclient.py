"""hopgym.httpclient against a real local HTTP/1.1 server (http.server on 127.0.0.1)."""

from __future__ import annotations

import json
import pickle
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hopgym import httpclient
from hopgym.errors import HopgymError
from hopgym.httpclient import RETRYABLE_STATUS, HTTPClient, HTTPError, parse_retry_after


class Server:
    """A keep-alive server that plays a script: each request takes the next action.

    An action is ``(status, headers, body)``; ``status`` may also be ``"hang"`` (never answer
    until the test ends), ``"trickle"`` (send a body one byte every 50 ms) or ``"drop"`` (answer,
    then close the connection without saying so, as a server does with an idle keep-alive
    connection). With the script empty, it answers 200 ``{"ok": true, "path": ...}``.
    """

    def __init__(self) -> None:
        self.script: list[tuple] = []
        self.requests: list[dict] = []
        self.ports: set[int] = set()
        self.release = threading.Event()
        self.lock = threading.Lock()
        srv = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def _answer(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with srv.lock:
                    srv.requests.append(
                        {
                            "method": self.command,
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": body,
                            "t": time.monotonic(),
                        }
                    )
                    srv.ports.add(self.client_address[1])
                    action = srv.script.pop(0) if srv.script else (200, {}, None)
                status, headers, payload = action
                if status == "hang":
                    srv.release.wait(10)
                    self.close_connection = True
                    return
                if status == "trickle":
                    self.send_response(200)
                    self.send_header("Content-Length", "200")
                    self.end_headers()
                    for _ in range(200):
                        if srv.release.wait(0.05):
                            break
                        try:
                            self.wfile.write(b"x")
                            self.wfile.flush()
                        except OSError:
                            break
                    self.close_connection = True
                    return
                if status == "chunked":
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for part in (b'{"ok": ', b"true, ", b'"chunked": true}'):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if status == "truncated":
                    self.send_response(200)
                    self.send_header("Content-Length", "100")
                    self.end_headers()
                    self.wfile.write(b'{"ok": true')
                    self.close_connection = True
                    return
                drop = status == "drop"
                status = 200 if drop else status
                if payload is None:
                    payload = json.dumps({"ok": True, "path": self.path}).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                if drop:
                    self.close_connection = True

            do_GET = do_POST = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server():
    s = Server()
    yield s
    s.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_retryable_statuses_are_one_set():
    assert frozenset({408, 429, 500, 502, 503, 504}) == RETRYABLE_STATUS


def test_keep_alive_reuses_one_connection(server):
    client = HTTPClient(server.url + "/api", timeout=5)
    for i in range(6):
        assert client.get_json(f"/n{i}") == {"ok": True, "path": f"/api/n{i}"}
    assert client.connects == 1 and len(server.ports) == 1


def test_each_thread_gets_its_own_connection(server):
    client = HTTPClient(server.url, timeout=5)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for j in range(10):
                assert client.post_json("/p", {"i": i, "j": j})["path"] == "/p"
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and len(server.requests) == 60
    assert client.connects == 6 and len(server.ports) == 6


def test_reads_a_chunked_reply_and_keeps_the_connection(server):
    server.script = [("chunked", None, None)]
    client = HTTPClient(server.url)
    assert client.get_json() == {"ok": True, "chunked": True}
    assert client.get_json()["ok"] and client.connects == 1


def test_retries_a_503_then_succeeds(server):
    server.script = [(503, {}, b'{"error": "busy"}')]
    client = HTTPClient(server.url, retries=2, backoff=0.01)
    assert client.get_json("/x")["ok"]
    assert len(server.requests) == 2


def test_gives_up_after_the_retries_with_url_attempts_and_cause(server):
    server.script = [(503, {}, b'{"error": "busy"}')] * 3
    client = HTTPClient(server.url, retries=2, backoff=0.01)
    with pytest.raises(HTTPError, match=r"failed after 3 attempt\(s\): HTTP 503: busy") as err:
        client.post_json("/v1/x", {})
    e = err.value
    assert isinstance(e, HopgymError) and isinstance(e, RuntimeError)
    assert e.url == server.url + "/v1/x" and e.url in str(e) and e.method == "POST"
    assert (e.attempts, e.status, e.transient) == (3, 503, True)
    assert len(server.requests) == 3


def test_retry_after_is_honoured(server):
    server.script = [(429, {"Retry-After": "0.2"}, b"slow down")]
    client = HTTPClient(server.url, retries=1, backoff=0.0, max_backoff=5.0)
    client.get_json()
    first, second = server.requests
    assert second["t"] - first["t"] >= 0.2


def test_retry_after_is_capped_by_max_backoff(server, monkeypatch):
    server.script = [(503, {"Retry-After": "60"}, b"")]
    client = HTTPClient(server.url, retries=1, backoff=0.0, max_backoff=0.05)
    slept: list[float] = []
    monkeypatch.setattr(httpclient.time, "sleep", slept.append)
    client.get_json()
    assert slept == [0.05]  # max_backoff, not the 60 s asked for
    assert len(server.requests) == 2


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_client_errors_are_not_retried(server, status):
    server.script = [(status, {}, b'{"error": {"message": "bad field"}}')]
    client = HTTPClient(server.url, retries=3, backoff=5.0)
    with pytest.raises(HTTPError, match=rf"answered HTTP {status}: bad field") as err:
        client.post_json("/q", {"a": 1})
    assert (err.value.attempts, err.value.status, err.value.transient) == (1, status, False)
    assert len(server.requests) == 1


def test_a_hanging_server_costs_at_most_the_documented_bound(server):
    server.script = [("hang", None, None)] * 3
    client = HTTPClient(server.url, timeout=0.2, retries=2, backoff=0.05, max_backoff=0.05)
    t0 = time.monotonic()
    with pytest.raises(HTTPError, match=r"failed after 3 attempt\(s\): no reply within 0.2 s"):
        client.get_json("/h")
    elapsed = time.monotonic() - t0
    assert client.max_total_seconds() == pytest.approx(0.2 * 3 + 2 * 0.05)
    assert 0.6 <= elapsed <= client.max_total_seconds() + 0.5  # 0.5 s of scheduling slack


def test_the_timeout_bounds_a_whole_attempt_not_each_read(server):
    # A server that sends its body one byte every 50 ms never idles for 0.3 s, but the whole
    # reply would take 10 s: the attempt must still end after about 0.3 s.
    server.script = [("trickle", None, None)] * 2
    client = HTTPClient(server.url, timeout=0.3, retries=1, backoff=0.0, max_backoff=0.0)
    t0 = time.monotonic()
    with pytest.raises(HTTPError, match="no reply within 0.3 s"):
        client.get_json()
    assert client.max_total_seconds() == pytest.approx(0.6)
    assert time.monotonic() - t0 <= client.max_total_seconds() + 0.5


def test_a_truncated_reply_is_retried_and_never_returned(server):
    server.script = [("truncated", None, None)]
    client = HTTPClient(server.url, retries=1, backoff=0.0)
    assert client.get_json() == {"ok": True, "path": "/"}
    server.script = [("truncated", None, None)]
    with pytest.raises(HTTPError, match="IncompleteRead"):
        client.get_json(retries=0)


def test_connection_refused_names_the_url_and_the_attempts():
    url = f"http://127.0.0.1:{_free_port()}"
    client = HTTPClient(url + "/v1", timeout=2, retries=2, backoff=0.01)
    with pytest.raises(HTTPError) as err:
        client.post_json("/chat/completions", {})
    msg = str(err.value)
    assert f"POST {url}/v1/chat/completions failed after 3 attempt(s): cannot connect" in msg
    assert err.value.attempts == 3 and err.value.status is None


def test_a_connection_closed_while_idle_is_reopened_without_using_a_retry(server):
    server.script = [("drop", {}, None)]
    client = HTTPClient(server.url, retries=0)
    assert client.get_json("/a")["ok"]  # the server closes this connection afterwards
    assert client.get_json("/b")["ok"]  # reopened inside the one attempt allowed
    assert client.connects == 2 and len(server.requests) == 2


def test_jitter_is_deterministic_by_seed_and_leaves_global_random_alone():
    state = random.getstate()
    a = HTTPClient("http://h", backoff=1.0, max_backoff=100.0, seed=7)
    b = HTTPClient("http://h", backoff=1.0, max_backoff=100.0, seed=7)
    c = HTTPClient("http://h", backoff=1.0, max_backoff=100.0, seed=8)
    waits_a = [a.backoff_delay(n) for n in range(1, 6)]
    assert waits_a == [b.backoff_delay(n) for n in range(1, 6)]
    assert waits_a != [c.backoff_delay(n) for n in range(1, 6)]
    for n, w in enumerate(waits_a, start=1):
        assert 2 ** (n - 1) / 2 <= w <= 2 ** (n - 1)  # equal jitter: [w/2, w]
    assert random.getstate() == state


def test_parse_retry_after_forms():
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert parse_retry_after(None) is None and parse_retry_after("later") is None
    assert parse_retry_after("-3") == 0.0 and parse_retry_after("nan") is None


def test_json_helpers_send_headers_and_hide_them(server):
    client = HTTPClient(server.url + "/v1/", headers={"Authorization": "Bearer sk-x"})
    client.post_json("chat", {"q": 1}, headers={"X-Trace": "7"})
    req = server.requests[0]
    assert req["path"] == "/v1/chat" and json.loads(req["body"]) == {"q": 1}
    assert req["headers"]["Authorization"] == "Bearer sk-x" and req["headers"]["X-Trace"] == "7"
    assert req["headers"]["Content-Type"] == "application/json"
    assert "sk-x" not in repr(client)


def test_a_reply_that_is_not_json_is_not_retried(server):
    server.script = [(200, {}, b"<html>")]
    client = HTTPClient(server.url, retries=3)
    with pytest.raises(HTTPError, match="not JSON"):
        client.get_json()
    assert len(server.requests) == 1


def test_pickles_without_its_connections(server):
    client = HTTPClient(server.url, timeout=3, seed=1)
    client.get_json()
    clone = pickle.loads(pickle.dumps(client))
    assert clone.get_json()["ok"] and clone.timeout == 3 and clone.seed == 1
    assert clone.backoff_delay(1) == pickle.loads(pickle.dumps(client)).backoff_delay(1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"retries": -1}, "retries"),
        ({"retries": 1.5}, "retries"),
        ({"backoff": -1}, "backoff"),
        ({"max_backoff": float("nan")}, "max_backoff"),
        ({"seed": "x"}, "seed"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HTTPClient("http://127.0.0.1:1", **kwargs)
    with pytest.raises(ValueError, match="url"):
        HTTPClient("127.0.0.1:8000")
