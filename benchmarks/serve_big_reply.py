"""The largest reply ``hopgym serve`` allows, in flight, against other clients' latency and the
server's memory (issue 38).

    python benchmarks/serve_big_reply.py            # ~1 min

A retrieval server (``RetrievalServer``, BM25 over a synthetic corpus of ``--passages`` passages
of ~600 characters, Wikipedia-paragraph sized) runs in a child process. Eight clients send small
requests (one query, topk 3) back to back and record each round trip; meanwhile one client sends,
again and again, the largest request the server's ``max_reply_bytes`` lets through (as many
queries as fit at topk 100). Printed: the small requests' p50/p99 alone and with the large ones in
flight (goal: p99 under 200 ms), the large replies' size and time, a request one query over the
bound (refused with 413 before any search), and the server's resident memory before, at its peak
and after (goal: back within 10% of before).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

SERVER = """
import sys, random
sys.path.insert(0, {root!r})
from hopgym.corpora.types import Passage
from hopgym.retrieval.serving import RetrievalServer
from hopgym.retrieval.sparse import BM25Retriever
rng = random.Random(0)
words = [f"w{{i}}" for i in range(5000)]
docs = [Passage(str(i), f"Title {{i}}", " ".join(rng.choice(words) for _ in range(100))) for i in range({n})]
srv = RetrievalServer(BM25Retriever(docs), port=0, max_topk=100)
print(srv.url, flush=True)
srv.serve_forever()
"""


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def post(url: str, payload: Any, timeout: float = 120) -> tuple[int, bytes]:
    req = urllib.request.Request(url, json.dumps(payload).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def small_clients(url: str, seconds: float, n: int = 8) -> list[float]:
    latencies: list[float] = []
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        while time.monotonic() < stop:
            t = time.perf_counter()
            post(url, {"queries": [f"w{i} w{i + 7}"], "topk": 3})
            latencies.append(time.perf_counter() - t)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(1000 * values[min(len(values) - 1, int(q * len(values)))], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=20000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "serve_big_reply.json"))
    args = parser.parse_args()
    from hopgym._atomic import check_writable, write_json

    check_writable(args.out)  # before the server and the load, not after them

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    code = SERVER.format(root=str(ROOT), n=args.passages)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    base = proc.stdout.readline().strip()
    url = f"{base}/retrieve"
    try:
        health = json.loads(urllib.request.urlopen(f"{base}/health", timeout=30).read())
        limit = health["limits"]["max_reply_bytes"]
        # The largest request at topk 100: find it from the 413's bound (doc bytes are the server's).
        status, body = post(url, {"queries": ["w1"] * health["limits"]["max_queries"], "topk": 100})
        doc_bytes = int(json.loads(body)["error"].split("up to ")[1].split(" bytes")[0].replace(",", ""))
        largest = limit // (100 * doc_bytes)
        over_status, _ = post(url, {"queries": ["w1"] * (largest + 1), "topk": 100})
        alone = small_clients(url, args.seconds / 3)
        before = rss_mb(proc.pid)
        peak, big = [before], []
        stop = threading.Event()

        def big_client() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                s, reply = post(url, {"queries": [f"w{i}" for i in range(largest)], "topk": 100})
                big.append((s, len(reply), time.perf_counter() - t))
                peak.append(rss_mb(proc.pid))

        def watch() -> None:
            while not stop.is_set():
                peak.append(rss_mb(proc.pid))
                time.sleep(0.05)

        side = [threading.Thread(target=big_client), threading.Thread(target=watch)]
        for t in side:
            t.start()
        time.sleep(0.5)
        during = small_clients(url, args.seconds)
        stop.set()
        for t in side:
            t.join()
        time.sleep(2)
        after = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result = {
        "passages": args.passages,
        "max_reply_bytes": limit,
        "doc_bytes_bound": doc_bytes,
        "largest_request": {"queries": largest, "topk": 100},
        "one_query_more": over_status,
        "big_replies": {
            "count": len(big),
            "status": sorted({s for s, _, _ in big}),
            "bytes": max((n for _, n, _ in big), default=0),
            "median_s": round(statistics.median([t for _, _, t in big]), 2) if big else None,
        },
        "small_requests_alone_ms": {"n": len(alone), "p50": pct(alone, 0.5), "p99": pct(alone, 0.99)},
        "small_requests_during_ms": {"n": len(during), "p50": pct(during, 0.5), "p99": pct(during, 0.99)},
        "rss_mb": {"before": round(before, 1), "peak": round(max(peak), 1), "after": round(after, 1)},
        "rss_after_vs_before": round(after / before, 3),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
    }
    print(json.dumps(result, indent=2))
    write_json(args.out, result)


if __name__ == "__main__":
    main()
