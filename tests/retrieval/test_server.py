from __future__ import annotations

import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import pytest

from hopgym.corpora.datasets import load_corpus
from hopgym.corpora.types import Passage, QASample
from hopgym.errors import RetrievalError
from hopgym.retrieval.base import SearchHit
from hopgym.retrieval.http import HTTPRetriever, passage_from_json
from hopgym.retrieval.hybrid import scored_search_batch
from hopgym.retrieval.serving import RetrievalServer
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.retrieval.specs import make_retriever
from hopgym.tasks.base import QATask, Source

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
CORPUS = load_corpus(FIX / "wiki_corpus.jsonl")
BM25 = BM25Retriever(CORPUS)


@pytest.fixture
def server():
    srv = RetrievalServer(BM25, port=0).start()
    yield srv
    srv.stop()


def post(url: str, payload: object, raw: bytes | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


class Gate:
    """A retriever whose first batch blocks until released (to pile up concurrent requests)."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        self.passages = CORPUS
        self.batches: list[int] = []

    def search(self, query: str, k: int) -> list[Passage]:
        return BM25.search(query, k)

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        return [h for h in (self.search(q, k) for q in queries)]

    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        if not self.batches:
            self.entered.set()
            assert self.release.wait(10)
        self.batches.append(len(queries))
        return scored_search_batch(BM25, queries, k)


class Slow(Gate):
    def search_batch_scored(self, queries: Sequence[str], k: int) -> list[list[SearchHit]]:
        time.sleep(1.0)
        return scored_search_batch(BM25, queries, k)


def test_client_matches_direct_search(server):
    client = HTTPRetriever(server.url)
    qs = ["Tolva River Kaldor", "music school Halden", "zzzz"]
    got = client.search_batch_scored(qs, 3)
    want = scored_search_batch(BM25, qs, 3)
    assert [[h.passage for h in x] for x in got] == [[h.passage for h in x] for x in want]
    assert [h.score for x in got for h in x] == pytest.approx([h.score for x in want for h in x])
    assert client.search(qs[0], 2) == BM25.search(qs[0], 2)
    assert client.search_batch([], 3) == [] and client.search("Kaldor", 0) == []
    assert client.health()["passages"] == len(CORPUS)


def test_wire_format_is_search_r1s(server):
    status, body = post(
        server.url + "/retrieve", {"queries": ["Corvin Institute"], "topk": 2, "return_scores": True}
    )
    assert status == 200
    item = body["result"][0][0]
    assert set(item) == {"document", "score"}
    doc = item["document"]
    assert doc["id"] == "7" and doc["contents"].startswith("Corvin Institute\n")
    assert {"id", "contents"} <= set(doc)
    status, body = post(server.url + "/retrieve", {"queries": ["Kaldor", "Corvin Institute"]})
    assert status == 200 and len(body["result"]) == 2
    assert len(body["result"][0]) == 3  # the default topk
    first = body["result"][1][0]
    assert "score" not in first and first["id"] == "7"
    assert passage_from_json(first) == CORPUS[7]
    with urllib.request.urlopen(server.url + "/health", timeout=10) as resp:
        assert json.loads(resp.read())["status"] == "ok"


@pytest.mark.parametrize(
    "payload,raw,status",
    [
        (None, b"{not json", 400),
        ({"queries": "x", "topk": 0}, None, 400),
        ({"queries": [1, 2]}, None, 400),
        ({"topk": 3}, None, 400),
        ({"queries": ["x"], "topk": 10**6}, None, 400),
        ({"queries": ["x"], "return_scores": "yes"}, None, 400),
    ],
)
def test_bad_requests_get_400(server, payload, raw, status):
    code, body = post(server.url + "/retrieve", payload, raw)
    assert code == status and body["error"]


def test_unknown_path_is_404_and_not_retried(server):
    code, _ = post(server.url + "/search", {"queries": ["x"]})
    assert code == 404
    client = HTTPRetriever(server.url + "/nope", backoff=5.0, retries=3)
    sent = []
    post_json = client.clients[0].post_json
    client.clients[0].post_json = lambda *a, **kw: sent.append(a) or post_json(*a, **kw)
    with pytest.raises(RetrievalError, match="HTTP 404"):
        client.search("Kaldor", 1)
    assert len(sent) == 1  # a 4xx is not retried


def test_concurrent_requests_are_answered_in_one_batch():
    gate = Gate()
    srv = RetrievalServer(gate, port=0, max_batch=64).start()
    try:
        out: dict[int, list[Passage]] = {}
        queries = ["Kaldor", "Tolva River", "Marlow Academy", "Corvin Institute", "Halden", "Orsk River"]

        def ask(i: int) -> None:
            out[i] = HTTPRetriever(srv.url, timeout=20).search(queries[i], 1)

        first = threading.Thread(target=ask, args=(0,))
        first.start()
        assert gate.entered.wait(10)  # the engine is busy with request 0
        rest = [threading.Thread(target=ask, args=(i,)) for i in range(1, 6)]
        for t in rest:
            t.start()
        deadline = time.monotonic() + 10
        while srv.batcher.pending < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.release.set()
        for t in [first, *rest]:
            t.join(20)
        assert gate.batches == [1, 5]  # five queued requests, one engine call
        assert srv.stats["max_batch_requests"] == 5 and srv.stats["requests"] == 6
        for i, q in enumerate(queries):
            assert out[i] == BM25.search(q, 1)
    finally:
        gate.release.set()
        srv.stop()


def test_many_clients_get_their_own_answers(server):
    errors: list[BaseException] = []
    queries = [p.title for p in CORPUS]

    def work(offset: int) -> None:
        client = HTTPRetriever(server.url)
        try:
            for j in range(10):
                q = queries[(offset + j) % len(queries)]
                assert client.search(q, 2) == BM25.search(q, 2)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert server.stats["queries"] == 80


def test_keep_alive_reuses_one_connection(server):
    client = HTTPRetriever(server.url)
    client.search("Kaldor", 1)
    for _ in range(5):
        client.search("Halden", 1)
    assert client.client.connects == 1
    assert server.connections == 1


def test_dead_server_raises_quickly_with_a_clear_error():
    srv = RetrievalServer(BM25, port=0).start()
    client = HTTPRetriever(srv.url, retries=2, backoff=0.05)
    assert client.search("Kaldor", 1)
    srv.stop()
    t0 = time.monotonic()
    with pytest.raises(RetrievalError, match="failed after 3 attempt") as err:
        client.search("Kaldor", 1)
    assert time.monotonic() - t0 < 3.0
    assert srv.url in str(err.value) and "hopgym serve" in str(err.value)


def test_timeout_is_enforced():
    srv = RetrievalServer(Slow(), port=0).start()
    try:
        client = HTTPRetriever(srv.url, timeout=0.3, retries=1, backoff=0.0)
        t0 = time.monotonic()
        with pytest.raises(RetrievalError, match="no reply within 0.3 s"):
            client.search("Kaldor", 1)
        assert time.monotonic() - t0 < 1.4
    finally:
        srv.stop()


def test_client_recovers_when_the_server_restarts():
    srv = RetrievalServer(BM25, port=0).start()
    port = srv.port
    client = HTTPRetriever(srv.url, retries=0)
    assert client.search("Kaldor", 1)
    srv.stop()
    srv2 = RetrievalServer(BM25, port=port).start()
    try:
        # The kept-alive connection is dead; the client reconnects without using up a retry.
        assert client.search("Halden", 1) == BM25.search("Halden", 1)
    finally:
        srv2.stop()


def test_http_retriever_pickles_and_validates():
    client = HTTPRetriever("http://127.0.0.1:9/retrieve", timeout=2.0)
    clone = pickle.loads(pickle.dumps(client))
    assert clone.endpoint == "http://127.0.0.1:9/retrieve" and clone.timeout == 2.0
    with pytest.raises(ValueError, match="url"):
        HTTPRetriever("127.0.0.1:8000")
    with pytest.raises(ValueError):
        HTTPRetriever("http://h:1", timeout=0)


def test_env_reports_a_server_that_dies_mid_episode():
    from hopgym.envs.registration import make_task_env
    from hopgym.turns import Answer, Search

    srv = RetrievalServer(BM25, port=0).start()
    sample = QASample("q1", "Which river flows through Kaldor?", ("Tolva River",))
    task = QATask(
        "remote",
        [sample],
        {"local": Source("local", HTTPRetriever(srv.url, timeout=1.0, retries=1, backoff=0.05))},
    )
    env = make_task_env(task, reward=None)
    env.reset(seed=0)
    _, _, _, _, info = env.step(Search("Kaldor Tolva"))
    assert info["retrieval_error"] is None and info["new_ids"]
    srv.stop()
    t0 = time.monotonic()
    obs, _, terminated, truncated, info = env.step(Search("Tolva River"))
    assert time.monotonic() - t0 < 5.0
    assert "RetrievalError" in info["retrieval_error"]
    assert info["documents"] == [] and not terminated and not truncated
    assert "failed" in obs.lower()
    _, _, terminated, _, _ = env.step(Answer("Tolva River"))
    assert terminated


def test_dataset_env_with_a_server_url(server):
    import gymnasium as gym

    env = gym.make(
        "hopgym/Bamboogle-v1", path=str(FIX / "bamboogle_test.jsonl"), retriever=server.url, reward=None
    )
    env.reset(seed=0, options={"question_id": "test_2"})
    from hopgym.turns import Search

    _, _, _, _, info = env.step(Search("institute mineralogy"))
    assert info["retrieval_error"] is None
    assert info["documents"][0] == CORPUS[7]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_index_build_and_serve_end_to_end(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    idx = tmp_path / "idx"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hopgym.cli",
            "index",
            "build",
            "--corpus",
            str(FIX / "wiki_corpus.jsonl"),
            "--out",
            str(idx),
            "--no-progress",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hopgym.cli", "serve", "--index", str(idx), "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = HTTPRetriever(f"http://127.0.0.1:{port}", timeout=5.0, retries=0)
        deadline = time.monotonic() + 60
        while True:
            try:
                assert client.health()["passages"] == len(CORPUS)
                break
            except RetrievalError:
                assert proc.poll() is None, proc.communicate()[1]
                assert time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        assert client.search("Corvin Institute", 1) == [CORPUS[7]]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0
    assert f"serving a bm25 index of {len(CORPUS)} passages" in out


# ------------------------------------------------------------------------- several servers
def frozen_server() -> socket.socket:
    """A server that accepts connections and never answers (a process stopped with SIGSTOP)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def test_searches_are_spread_over_several_servers():
    a, b = RetrievalServer(BM25, port=0).start(), RetrievalServer(BM25, port=0).start()
    try:
        client = HTTPRetriever([a.url, b.url])
        assert client.endpoints == (a.url + "/retrieve", b.url + "/retrieve")
        for q in ["Kaldor", "Halden", "Tolva River", "Corvin Institute"] * 5:
            assert client.search(q, 2) == BM25.search(q, 2)
        assert a.stats["requests"] == b.stats["requests"] == 10
        assert client.health()["passages"] == len(CORPUS)
    finally:
        a.stop()
        b.stop()


def test_a_dead_or_frozen_server_is_failed_over_and_then_avoided():
    live = RetrievalServer(BM25, port=0).start()
    frozen = frozen_server()
    dead_port = free_port()
    try:
        frozen_url = f"http://127.0.0.1:{frozen.getsockname()[1]}"
        client = HTTPRetriever(
            [frozen_url, f"http://127.0.0.1:{dead_port}", live.url], timeout=0.5, retries=2, backoff=0.05
        )
        t0 = time.monotonic()
        for q in ["Kaldor", "Halden", "Tolva River", "Corvin Institute"] * 3:
            assert client.search(q, 2) == BM25.search(q, 2)
        # The frozen server cost one timeout; then both failed servers sat in cool-down.
        assert time.monotonic() - t0 < 0.5 + 1.5
        assert live.stats["requests"] == 12
    finally:
        frozen.close()
        live.stop()


def test_when_every_server_fails_the_search_fails_within_the_bound():
    frozen = frozen_server()
    try:
        urls = [f"http://127.0.0.1:{frozen.getsockname()[1]}", f"http://127.0.0.1:{free_port()}"]
        client = HTTPRetriever(urls, timeout=0.4, retries=3, backoff=0.05, max_backoff=0.1)
        assert client.max_total_seconds() == pytest.approx(0.4 * 4 + 3 * 0.1)
        t0 = time.monotonic()
        with pytest.raises(RetrievalError, match="failed after 4 attempt") as err:
            client.search("Kaldor", 1)
        assert time.monotonic() - t0 < client.max_total_seconds() + 0.3
        assert urls[0] in str(err.value) and "no reply within 0.4 s" in str(err.value)
        assert urls[1] in str(err.value) and "cannot connect" in str(err.value)
    finally:
        frozen.close()


def test_gym_make_sets_the_servers_and_their_time_bound():
    import gymnasium as gym

    from hopgym.turns import Search

    live = RetrievalServer(BM25, port=0).start()
    frozen = frozen_server()
    frozen_url = f"http://127.0.0.1:{frozen.getsockname()[1]}"
    try:
        spec = {"urls": [frozen_url, live.url], "timeout": 0.3, "retries": 1, "backoff": 0.05}
        env = gym.make(
            "hopgym/Bamboogle-v1", path=str(FIX / "bamboogle_test.jsonl"), retriever=spec, reward=None
        )
        r = env.unwrapped.task.sources["local"].retriever
        assert (r.urls, r.timeout, r.retries) == ((frozen_url, live.url), 0.3, 1)
        env.reset(seed=0, options={"question_id": "test_2"})
        info = env.step(Search("institute mineralogy"))[4]  # the live server answers
        assert info["retrieval_error"] is None and info["documents"][0] == CORPUS[7]
        info = env.step(Search("Halden Orsk River"))[4]  # whichever server comes first
        assert info["retrieval_error"] is None and info["documents"]
        live.stop()
        r._down_until[:] = [0.0, 0.0]  # forget the cool-down: both servers are tried again
        t0 = time.monotonic()
        info = env.step(Search("Tolva River"))[4]
        assert time.monotonic() - t0 < 0.3 * 2 + 2.0
        assert "RetrievalError" in info["retrieval_error"] and info["documents"] == []
    finally:
        frozen.close()
        live.stop()


def test_one_search_can_be_bounded_from_the_spec():
    r = make_retriever({"urls": ["http://127.0.0.1:9", "http://127.0.0.1:10"], "timeout": 0.2, "retries": 0})
    t0 = time.monotonic()
    with pytest.raises(RetrievalError, match="failed after 1 attempt"):
        r.search("Kaldor", 1)
    assert time.monotonic() - t0 < 1.0
    clone = pickle.loads(pickle.dumps(r))
    assert clone.urls == r.urls and clone.timeout == 0.2
