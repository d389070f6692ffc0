"""Retrieval speed and quality: BM25 engines, FAISS indexes, the server, recall on real samples.

    python benchmarks/retrieval.py                                # every section, 100k and 1M
    python benchmarks/retrieval.py --only bm25 --sizes 100000
    python benchmarks/retrieval.py --only faiss --sizes 100000 1000000 --no-hnsw-above 1000000
    python benchmarks/retrieval.py --only server --sizes 100000
    python benchmarks/retrieval.py --only recall --data ../shared/data --model default

Sections (``--only``):

- ``bm25``: hopgym's BM25Retriever with bm25s (sparse, numpy and numba backends; query cache
  off) vs rank-bm25 on the synthetic world's passages (``hopgym.corpora.synthetic``): build
  time, single-query q/s, p50/p99 latency, ratio to rank-bm25. rank-bm25 scores every passage
  in Python, so above 100k passages it answers only ``--slow-queries`` queries.
- ``faiss``: FAISS flat and HNSW over random unit vectors (``--dim``; encoding 1M passages with
  MiniLM would take hours on a CPU, so vectors are random and queries are noisy copies of
  corpus vectors), single queries vs batches of ``--batch``, with FAISS's shipped BLAS threshold
  and with hopgym's (20), one thread. HNSW recall@10 against flat is printed beside its speed.
- ``server``: ``hopgym serve``'s server (in a child process) over BM25 and over a dense index,
  one client at a time vs ``--clients`` concurrent clients, against the in-process retriever.
- ``recall``: recall@k of the supporting paragraphs on the real samples in ``--data``
  (HotpotQA, 2Wiki, MuSiQue; open mode, all paragraphs of a file pooled), question as query:
  BM25 vs dense (``--model``) vs hybrid (RRF).

Runs with one thread (set below). Figures on a shared machine are noisy: compare ratios.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopgym.corpora.retrieval import BM25Retriever  # noqa: E402
from hopgym.corpora.types import Passage  # noqa: E402

console = Console(width=160)


# ------------------------------------------------------------------------------------ helpers
def corpus_and_queries(size: int, n_queries: int, seed: int = 0) -> tuple[list[Passage], list[str]]:
    """Synthetic-world passages and its oracle hop queries (entity name + relation word)."""
    try:
        from hopgym.corpora.synthetic import WorldConfig, generate_world
    except ImportError:
        return random_corpus(size, n_queries, seed)
    t0 = time.perf_counter()
    world = generate_world(WorldConfig(n_entities=size, n_questions=max(200, n_queries), seed=seed))
    console.print(f"  synthetic world of {len(world.passages):,} passages in "
                  f"{time.perf_counter() - t0:.1f} s")
    queries = [h.search_query for s in world.samples for h in s.decomposition]
    rng = np.random.default_rng(seed)
    pick = rng.choice(len(queries), size=min(n_queries, len(queries)), replace=False)
    return list(world.passages), [queries[i] for i in pick]


def random_corpus(size: int, n_queries: int, seed: int) -> tuple[list[Passage], list[str]]:
    """Fallback: Zipf-distributed random words (when the synthetic world is unavailable)."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(50_000)])
    ranks = np.minimum(rng.zipf(1.2, size=size * 40), 50_000) - 1
    words = vocab[ranks].reshape(size, 40)
    passages = [Passage(str(i), f"doc {i}", " ".join(row)) for i, row in enumerate(words)]
    queries = [" ".join(vocab[rng.integers(0, 5000, 3)]) for _ in range(n_queries)]
    return passages, queries


def latencies(calls: Sequence[Callable[[], object]], items_per_call: Sequence[int]
              ) -> tuple[float, float, float]:
    """Run every call once; return (items/s, p50 ms per call, p99 ms per call)."""
    lat = []
    t_all = time.perf_counter()
    for call in calls:
        t0 = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t0)
    total = time.perf_counter() - t_all
    arr = np.array(lat) * 1000
    return sum(items_per_call) / total, float(np.percentile(arr, 50)), float(np.percentile(arr, 99))


def fmt(x: float, digits: int = 0) -> str:
    if digits == 0 and x < 10:
        digits = 2  # rank-bm25 at 1M answers well under one query a second
    return f"{x:,.{digits}f}"


# --------------------------------------------------------------------------------------- bm25
def bench_bm25(sizes: Sequence[int], n_queries: int, slow_queries: int, k: int) -> None:
    table = Table(title=f"BM25, single queries, top-{k}, 1 thread")
    for col in ("passages", "engine", "build s", "queries", "q/s", "p50 ms", "p99 ms",
                "q/s vs rank-bm25"):
        table.add_column(col, justify="right")
    for size in sizes:
        console.print(f"[bold]bm25[/] at {size:,} passages")
        passages, queries = corpus_and_queries(size, n_queries)
        rows = []
        base = None
        for engine, backend in (("rank_bm25", "sparse"), ("bm25s", "sparse"), ("bm25s", "numpy"),
                                ("bm25s", "numba")):
            if backend == "numba":
                try:
                    import numba  # noqa: F401
                except ImportError:
                    continue
            t0 = time.perf_counter()
            r = BM25Retriever(passages, engine=engine, backend=backend, cache_entries=0)
            build = time.perf_counter() - t0
            qs = queries if engine != "rank_bm25" or size <= 100_000 else queries[:slow_queries]
            for q in qs[:3]:  # warm-up (numba compiles its kernels on first use)
                r.search(q, k)
            qps, p50, p99 = latencies([lambda q=q, r=r: r.search(q, k) for q in qs],
                                      [1] * len(qs))
            if engine == "rank_bm25":
                base = qps
            name = "rank-bm25" if engine == "rank_bm25" else f"bm25s ({backend})"
            rows.append([f"{size:,}", name, fmt(build, 1), str(len(qs)), fmt(qps), fmt(p50, 2),
                         fmt(p99, 2), f"{qps / base:,.0f}x" if base else "-"])
            del r
        for row in rows:
            table.add_row(*row)
    console.print(table)
    console.print("  rank-bm25 above 100k passages: only the first --slow-queries queries.")


# -------------------------------------------------------------------------------------- faiss
def unit_vectors(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    out = np.empty((n, d), dtype=np.float32)
    for s in range(0, n, 100_000):
        block = rng.standard_normal((min(100_000, n - s), d), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        out[s:s + len(block)] = block
    return out


def bench_faiss(sizes: Sequence[int], n_queries: int, dim: int, batch: int, k: int,
                hnsw_max: int, threads: Sequence[int]) -> None:
    import faiss

    table = Table(title=f"FAISS over random {dim}-d unit vectors, top-{k} "
                        "(passage encoding not included)")
    for col in ("vectors", "index", "threads", "BLAS threshold", "mode", "q/s", "p50 ms", "p99 ms",
                "vs single", "recall@10"):
        table.add_column(col, justify="right")
    rng = np.random.default_rng(0)
    for size in sizes:
        console.print(f"[bold]faiss[/] at {size:,} vectors")
        x = unit_vectors(size, dim, rng)
        idx = rng.choice(size, n_queries, replace=False)
        q = x[idx] + 0.5 * unit_vectors(n_queries, dim, rng)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        flat = faiss.IndexFlatIP(dim)
        flat.add(x)
        _, truth = flat.search(q, 10)
        indexes: list[tuple[str, object]] = [("flat", flat)]
        if size <= hnsw_max:
            faiss.omp_set_num_threads(max(threads))
            t0 = time.perf_counter()
            hnsw = faiss.IndexHNSWFlat(dim, 32, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efConstruction = 40
            hnsw.add(x)
            console.print(f"  HNSW (M=32, efConstruction=40) built in "
                          f"{time.perf_counter() - t0:.0f} s with {max(threads)} thread(s)")
            hnsw.hnsw.efSearch = 64
            indexes.append(("hnsw", hnsw))
        else:
            console.print(f"  HNSW skipped above {hnsw_max:,} vectors (--no-hnsw-above)")
        for name, index in indexes:
            for th in threads:
                settings = [("shipped (128000)", 128_000), ("20", 20),
                            (f"hopgym: 4 queries ({4 * dim})", 4 * dim)]
                for blas_name, blas in (settings if name == "flat" else settings[2:]):
                    faiss.omp_set_num_threads(th)
                    faiss.cvar.distance_compute_blas_threshold = blas
                    single_qps = None
                    for mode in ("single", f"batch {batch}"):
                        if mode == "single":
                            nq = min(n_queries, 200 if size >= 1_000_000 else n_queries)
                            calls = [lambda qi=q[i:i + 1], ix=index: ix.search(qi, k)
                                     for i in range(nq)]
                            items = [1] * nq
                        else:
                            calls = [lambda qb=q[s:s + batch], ix=index: ix.search(qb, k)
                                     for s in range(0, n_queries, batch)]
                            items = [len(q[s:s + batch]) for s in range(0, n_queries, batch)]
                        calls[0]()  # warm-up
                        qps, p50, p99 = latencies(calls, items)
                        if mode == "single":
                            single_qps = qps
                        _, got = index.search(q, 10)
                        rec = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth,
                                                                                 strict=True)])
                        table.add_row(f"{size:,}", name, str(th), blas_name, mode,
                                      fmt(qps), fmt(p50, 2), fmt(p99, 2),
                                      f"{qps / single_qps:.1f}x" if single_qps else "-",
                                      f"{rec:.3f}")
        del x, flat, indexes
    console.print(table)
    faiss.omp_set_num_threads(1)
    console.print("  p50/p99 are per call (one query, or one batch). FAISS 1.15 uses BLAS for "
                  "exact search when queries x dim >= the threshold; 20 (the old default, then "
                  "counted in queries) now means BLAS even for one query.")


# ------------------------------------------------------------------------------------- server
def _serve(kind: str, size: int, port_q: mp.Queue) -> None:  # child process
    from hopgym.corpora.server import RetrievalServer

    passages, _ = corpus_and_queries(size, 10)
    if kind == "bm25":
        r = BM25Retriever(passages)
    else:
        from hopgym.corpora.dense import DenseRetriever, HashingEmbedder

        r = DenseRetriever(passages, embedder=HashingEmbedder(384))
    srv = RetrievalServer(r, port=0, max_batch=64)
    port_q.put(srv.port)
    srv.serve_forever()


def bench_server(sizes: Sequence[int], n_queries: int, clients: int, k: int) -> None:
    from hopgym.corpora.http import HTTPRetriever

    table = Table(title=f"retrieval server (POST /retrieve, top-{k}), clients on loopback")
    for col in ("passages", "engine", "mode", "q/s", "p50 ms", "p99 ms", "vs sequential",
                "avg batch"):
        table.add_column(col, justify="right")
    ctx = mp.get_context("fork")
    for size in sizes:
        _, queries = corpus_and_queries(size, n_queries)
        for kind in ("bm25", "dense"):
            console.print(f"[bold]server[/] {kind} at {size:,} passages")
            port_q: mp.Queue = ctx.Queue()
            proc = ctx.Process(target=_serve, args=(kind, size, port_q), daemon=True)
            proc.start()
            port = port_q.get(timeout=1800)
            url = f"http://127.0.0.1:{port}"
            client = HTTPRetriever(url, timeout=60)
            deadline = time.time() + 600
            while True:
                try:
                    client.health()
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    if time.time() > deadline:
                        raise
                    time.sleep(0.2)
            for q in queries[:5]:
                client.search(q, k)
            before = client.health()["stats"]
            seq_qps, p50, p99 = latencies([lambda q=q, c=client: c.search(q, k) for q in queries],
                                          [1] * len(queries))
            mid = client.health()["stats"]
            n_b = max(1, mid["batches"] - before["batches"])
            seq_b = (mid["queries"] - before["queries"]) / n_b
            table.add_row(f"{size:,}", kind, "1 client", fmt(seq_qps), fmt(p50, 2), fmt(p99, 2),
                          "1.0x", f"{seq_b:.1f}")
            lat: list[float] = []
            lock = threading.Lock()

            def work(part: list[str], url: str = url, lat: list[float] = lat,
                     lock: threading.Lock = lock) -> None:
                c = HTTPRetriever(url, timeout=60)
                mine = []
                for q in part:
                    t0 = time.perf_counter()
                    c.search(q, k)
                    mine.append(time.perf_counter() - t0)
                with lock:
                    lat.extend(mine)

            parts = [queries[i::clients] for i in range(clients)]
            threads = [threading.Thread(target=work, args=(p,)) for p in parts]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            total = time.perf_counter() - t0
            after = client.health()["stats"]
            arr = np.array(lat) * 1000
            conc = len(queries) / total
            avg_b = (after["queries"] - mid["queries"]) / max(1, after["batches"] - mid["batches"])
            table.add_row(f"{size:,}", kind, f"{clients} clients", fmt(conc),
                          fmt(float(np.percentile(arr, 50)), 2),
                          fmt(float(np.percentile(arr, 99)), 2), f"{conc / seq_qps:.1f}x",
                          f"{avg_b:.1f}")
            proc.terminate()
            proc.join(10)
    console.print(table)
    console.print("  dense = FAISS flat over HashingEmbedder(384) vectors (no model), so the "
                  "figures show the server and the index, not a neural encoder.")


# ------------------------------------------------------------------------------------- recall
def bench_recall(data: Path, model: str, ks: Sequence[int], limit: int | None) -> None:
    from hopgym.corpora.dense import DenseRetriever, make_embedder
    from hopgym.corpora.hybrid import HybridRetriever
    from hopgym.corpora.loaders import detect_format, load_qa

    files = []
    for f in sorted(data.glob("*.json*")):
        try:
            fmt_ = detect_format(f)
        except Exception:  # noqa: BLE001 - not a dataset
            continue
        if fmt_ in ("hotpotqa", "2wiki", "musique"):
            files.append((f, fmt_))
    if not files:
        console.print(f"  no HotpotQA / 2Wiki / MuSiQue files in {data}")
        return
    embedder = make_embedder(model, threads=1)
    kmax = max(ks)
    table = Table(title=f"recall@k of supporting paragraphs, open mode (file's paragraphs "
                        f"pooled), question as query; dense = {embedder.name}")
    for col in ("dataset", "questions", "passages", "retriever",
                *[f"R@{k}" for k in ks], "q/s"):
        table.add_column(col, justify="right")
    for f, fmt_ in files:
        ds = load_qa(f, format=fmt_, mode="open", limit=limit)
        console.print(f"[bold]recall[/] {f.name}: {len(ds)} questions, {len(ds.passages)} "
                      "passages; encoding ...")
        t0 = time.perf_counter()
        dense = DenseRetriever(ds.passages, embedder=embedder, show_progress=True)
        console.print(f"  encoded in {time.perf_counter() - t0:.0f} s")
        bm25 = BM25Retriever(ds.passages)
        hybrid = HybridRetriever([bm25, dense])
        questions = [s.question for s in ds.samples]
        for name, r in (("bm25", bm25), ("dense", dense), ("hybrid", hybrid)):
            t0 = time.perf_counter()
            results = r.search_batch(questions, kmax)
            qps = len(questions) / (time.perf_counter() - t0)
            recalls = []
            for k in ks:
                vals = [len({p.doc_id for p in res[:k]} & set(s.supporting_ids))
                        / len(s.supporting_ids) for res, s in zip(results, ds.samples, strict=True)
                        if s.supporting_ids]
                recalls.append(f"{statistics.mean(vals):.3f}")
            table.add_row(fmt_, str(len(ds)), str(len(ds.passages)), name, *recalls, fmt(qps))
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=("bm25", "faiss", "server", "recall"),
                        default=["bm25", "faiss", "server", "recall"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--slow-queries", type=int, default=10,
                        help="rank-bm25 queries above 100k passages")
    parser.add_argument("--k", type=int, default=5, help="top-k for the speed sections")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--no-hnsw-above", type=int, default=100_000,
                        help="skip HNSW above this many vectors (its build takes ~30 min at 1M "
                             "on one thread)")
    parser.add_argument("--server-sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data",
                        help="folder with real HotpotQA / 2Wiki / MuSiQue samples")
    parser.add_argument("--model", default="default",
                        help="embedder for recall: 'default' (MiniLM) or e.g. 'hashing-384'")
    parser.add_argument("--recall-k", type=int, nargs="+", default=[2, 5, 10])
    parser.add_argument("--limit", type=int, default=None, help="questions per dataset (recall)")
    args = parser.parse_args()
    if "recall" in args.only:
        bench_recall(args.data, args.model, args.recall_k, args.limit)
    if "bm25" in args.only:
        bench_bm25(args.sizes, args.queries, args.slow_queries, args.k)
    if "faiss" in args.only:
        bench_faiss(args.sizes, args.queries, args.dim, args.batch, args.k, args.no_hnsw_above,
                    args.threads)
    if "server" in args.only:
        bench_server(args.server_sizes, args.queries, args.clients, args.k)


if __name__ == "__main__":
    main()
