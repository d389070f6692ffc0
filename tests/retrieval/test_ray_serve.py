"""The retrieval app on Ray Serve, started as users start it: ``hopgym serve --ray --replicas 2``
in a child process, which starts a local Ray of its own (one per test file: Ray starts slowly on
2 cores). The tests speak HTTP only; a replica is killed by its process id, which ``/health``
reports, as a crash would kill it."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("ray")
pytest.importorskip("ray.serve")
pytest.importorskip("uvicorn")

from hopgym.errors import RetrievalError
from hopgym.retrieval.http import HTTPRetriever  # noqa: E402
from hopgym.retrieval.hybrid import scored_search_batch  # noqa: E402
from hopgym.retrieval.index_store import build_index, load_index  # noqa: E402
from hopgym.retrieval.serving import RetrievalServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
QUERIES = [
    "Tolva River Kaldor",
    "music school Halden",
    "Corvin Institute founded",
    "Orsk River",
    "Brenna Observatory",
    "zzzz",
    "Mara Corvin geologist",
    "capital of Vandria",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    out = tmp_path_factory.mktemp("ray") / "idx"
    build_index(FIX / "wiki_corpus.jsonl", out)
    return out


@pytest.fixture(scope="module")
def server(index):
    """``hopgym serve --ray --replicas 2`` in a child process; this process joins its Ray."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hopgym.cli",
            "serve",
            "--index",
            str(index),
            "--ray",
            "--replicas",
            "2",
            "--port",
            str(port),
            "--max-wait-ms",
            "1",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 300)  # never hang the suite
        assert ready, "hopgym serve --ray printed nothing in 300 s"
        line = proc.stdout.readline()  # printed once the deployment is up
        assert "on Ray Serve with 2 replica(s)" in line, proc.communicate()[1][-3000:]
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture
def ray_url(server):
    return server[1]


def replicas(url: str, tries: int = 40) -> dict[str, int]:
    """``{replica id: pid}`` of the replicas that answered ``tries`` calls to ``/health``."""
    client = HTTPRetriever(url, timeout=10, retries=3, backoff=0.2)
    seen = {}
    for _ in range(tries):
        h = client.health()
        seen[h["replica"]] = h["pid"]
    return seen


def hits(client, queries):
    return [[(h.passage, round(h.score, 4)) for h in x] for x in client.search_batch_scored(queries, 3)]


def test_two_replicas_answer_as_the_uvicorn_server(ray_url, index):
    assert len(replicas(ray_url)) == 2  # the proxy spreads requests over both
    with RetrievalServer(load_index(index), port=0).start() as local:
        want = hits(HTTPRetriever(local.url), QUERIES)
    client = HTTPRetriever(ray_url, timeout=30)
    assert hits(client, QUERIES) == want
    assert [hits(client, [q])[0] for q in QUERIES] == want  # one query per request, batched
    assert want == [
        [(h.passage, round(h.score, 4)) for h in x]
        for x in scored_search_batch(load_index(index), QUERIES, 3)
    ]


def test_the_same_limits_and_errors_on_ray(ray_url):
    req = urllib.request.Request(
        ray_url + "/retrieve",
        data=json.dumps({"queries": ["x"], "topk": 1000}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 400 and json.loads(err.value.read())["limit"] == "max_topk"
    with urllib.request.urlopen(ray_url + "/metrics", timeout=30) as resp:
        assert b"hopgym_retrieval_errors_total" in resp.read()


def test_killing_a_replica_mid_load_loses_no_retried_request(ray_url, index):
    want = {q: r for q, r in zip(QUERIES, hits(HTTPRetriever(ray_url, timeout=30), QUERIES), strict=True)}
    stop = threading.Event()
    done: list[int] = []
    errors: list[BaseException] = []

    def work(i: int) -> None:
        client = HTTPRetriever(ray_url, timeout=10, retries=6, backoff=0.2, max_backoff=1.0)
        n = 0
        try:
            while not stop.is_set():
                q = QUERIES[(i + n) % len(QUERIES)]
                assert hits(client, [q])[0] == want[q]
                n += 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        done.append(n)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    before = replicas(ray_url)
    time.sleep(1.0)
    victim = next(iter(before))
    os.kill(before[victim], signal.SIGKILL)  # the replica's process dies mid-load
    time.sleep(3.0)
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors, errors[:1]
    assert sum(done) > 20
    # Serve replaces the dead replica.
    deadline = time.monotonic() + 90
    while True:
        now = replicas(ray_url, tries=20)
        if victim not in now and len(now) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert victim not in now and len(now) == 2


@pytest.mark.slow
def test_sigterm_under_load_drains_loses_nothing_and_never_answers_404(server, index):
    """``hopgym serve --ray`` gets SIGTERM while 8 client threads, each with ``urls=[the Ray
    proxy, a uvicorn server]``, send requests: every request gets its right answer, and the Ray
    side only ever refuses with a 503 or a closed port (never the proxy's 404 of a deleted app)."""
    from hopgym.httpclient import HTTPError

    proc, ray_url = server
    want = {q: r for q, r in zip(QUERIES, hits(HTTPRetriever(ray_url, timeout=30), QUERIES), strict=True)}
    seen: list[int | None] = []  # the status of each failed attempt on the Ray proxy
    answered = {"ray": 0, "total": 0}  # replies from the Ray proxy; requests answered
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []
    with RetrievalServer(load_index(index), port=0).start() as local:

        def work(i: int) -> None:
            client = HTTPRetriever([ray_url, local.url], timeout=10, retries=3, backoff=0.1)
            ray_client = client.clients[0]
            post = ray_client.post_json

            def watched(*args, **kwargs):
                try:
                    out = post(*args, **kwargs)
                except HTTPError as exc:
                    with lock:
                        seen.append(exc.status)
                    raise
                with lock:
                    answered["ray"] += 1
                return out

            ray_client.post_json = watched
            n = 0
            try:
                while not stop.is_set():
                    q = QUERIES[(i + n) % len(QUERIES)]
                    assert hits(client, [q])[0] == want[q]
                    n += 1
                    with lock:
                        answered["total"] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while answered["total"] < 100 and time.monotonic() < deadline and not errors:
            time.sleep(0.05)
        before = answered["ray"]
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=90)
        total_at_exit = answered["total"]
        deadline = time.monotonic() + 60  # a few more requests once the Ray side is gone
        while answered["total"] < max(300, total_at_exit + 50) and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors[:1]
    assert proc.returncode == 0, err[-3000:]
    assert before > 0 and answered["total"] >= 300
    assert 404 not in seen, seen
    assert set(seen) <= {None, 503}, seen  # a refused or reset connection, or a 503
    with pytest.raises(RetrievalError):
        HTTPRetriever(ray_url, timeout=2, retries=0).health()
