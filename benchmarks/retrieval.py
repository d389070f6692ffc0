"""Retrieval speed and quality: BM25 engines, FAISS indexes, the server, recall on real samples.

    python benchmarks/retrieval.py                                # every section, 100k and 1M
    python benchmarks/retrieval.py --only bm25 --sizes 100000
    python benchmarks/retrieval.py --only faiss --sizes 100000 1000000 --no-hnsw-above 1000000
    python benchmarks/retrieval.py --only dense --device cpu --sizes 100000 1000000
    python benchmarks/retrieval.py --only dense --device cuda    # benchmarks/gpu_retrieval.sh
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
- ``dense``: dense retrieval on ``--device`` (``cpu``, ``cuda``): the encoder (``--model``) on
  the synthetic world's real text, texts/s at each of ``--batches``; then search over random
  unit vectors (``--dim``), FAISS flat (on CUDA: faiss-gpu, when FAISS has GPU support) beside
  the torch flat index (float32 on CPU, float16 on CUDA), q/s of the index alone and of the
  retriever, recall@10 against exact float32 search. ``--json`` keeps the rows.
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

from hopgym._atomic import check_writable, write_json  # noqa: E402
from hopgym.corpora.types import Passage  # noqa: E402
from hopgym.retrieval.sparse import BM25Retriever

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
    console.print(
        f"  synthetic world of {len(world.passages):,} passages in {time.perf_counter() - t0:.1f} s"
    )
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


def latencies(
    calls: Sequence[Callable[[], object]], items_per_call: Sequence[int]
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
    for col in ("passages", "engine", "build s", "queries", "q/s", "p50 ms", "p99 ms", "q/s vs rank-bm25"):
        table.add_column(col, justify="right")
    for size in sizes:
        console.print(f"[bold]bm25[/] at {size:,} passages")
        passages, queries = corpus_and_queries(size, n_queries)
        rows = []
        base = None
        for engine, backend in (
            ("rank_bm25", "sparse"),
            ("bm25s", "sparse"),
            ("bm25s", "numpy"),
            ("bm25s", "numba"),
        ):
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
            qps, p50, p99 = latencies([lambda q=q, r=r: r.search(q, k) for q in qs], [1] * len(qs))
            if engine == "rank_bm25":
                base = qps
            name = "rank-bm25" if engine == "rank_bm25" else f"bm25s ({backend})"
            rows.append(
                [
                    f"{size:,}",
                    name,
                    fmt(build, 1),
                    str(len(qs)),
                    fmt(qps),
                    fmt(p50, 2),
                    fmt(p99, 2),
                    f"{qps / base:,.0f}x" if base else "-",
                ]
            )
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
        out[s : s + len(block)] = block
    return out


def bench_faiss(
    sizes: Sequence[int], n_queries: int, dim: int, batch: int, k: int, hnsw_max: int, threads: Sequence[int]
) -> None:
    import faiss

    table = Table(title=f"FAISS over random {dim}-d unit vectors, top-{k} (passage encoding not included)")
    for col in (
        "vectors",
        "index",
        "threads",
        "BLAS threshold",
        "mode",
        "q/s",
        "p50 ms",
        "p99 ms",
        "vs single",
        "recall@10",
    ):
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
            console.print(
                f"  HNSW (M=32, efConstruction=40) built in "
                f"{time.perf_counter() - t0:.0f} s with {max(threads)} thread(s)"
            )
            hnsw.hnsw.efSearch = 64
            indexes.append(("hnsw", hnsw))
        else:
            console.print(f"  HNSW skipped above {hnsw_max:,} vectors (--no-hnsw-above)")
        for name, index in indexes:
            for th in threads:
                settings = [
                    ("shipped (128000)", 128_000),
                    ("20", 20),
                    (f"hopgym: 4 queries ({4 * dim})", 4 * dim),
                ]
                for blas_name, blas in settings if name == "flat" else settings[2:]:
                    faiss.omp_set_num_threads(th)
                    faiss.cvar.distance_compute_blas_threshold = blas
                    single_qps = None
                    for mode in ("single", f"batch {batch}"):
                        if mode == "single":
                            nq = min(n_queries, 200 if size >= 1_000_000 else n_queries)
                            calls = [lambda qi=q[i : i + 1], ix=index: ix.search(qi, k) for i in range(nq)]
                            items = [1] * nq
                        else:
                            calls = [
                                lambda qb=q[s : s + batch], ix=index: ix.search(qb, k)
                                for s in range(0, n_queries, batch)
                            ]
                            items = [len(q[s : s + batch]) for s in range(0, n_queries, batch)]
                        calls[0]()  # warm-up
                        qps, p50, p99 = latencies(calls, items)
                        if mode == "single":
                            single_qps = qps
                        _, got = index.search(q, 10)
                        rec = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth, strict=True)])
                        table.add_row(
                            f"{size:,}",
                            name,
                            str(th),
                            blas_name,
                            mode,
                            fmt(qps),
                            fmt(p50, 2),
                            fmt(p99, 2),
                            f"{qps / single_qps:.1f}x" if single_qps else "-",
                            f"{rec:.3f}",
                        )
        del x, flat, indexes
    console.print(table)
    faiss.omp_set_num_threads(1)
    console.print(
        "  p50/p99 are per call (one query, or one batch). FAISS 1.15 uses BLAS for "
        "exact search when queries x dim >= the threshold; 20 (the old default, then "
        "counted in queries) now means BLAS even for one query."
    )


# -------------------------------------------------------------------------------------- dense
def _timed(
    call: Callable[[int], object], batch: int, min_time: float, max_calls: int
) -> tuple[float, float, float]:
    """Call ``call(i)`` (one batch each) after a warm-up until ``min_time`` seconds or
    ``max_calls`` calls; return (items/s wall, items/s per CPU second, p50 ms per call)."""
    call(0)  # warm-up: CUDA context, cuBLAS handles, caches
    lat = []
    t_all, c_all = time.perf_counter(), time.process_time()
    while len(lat) < max_calls and (not lat or time.perf_counter() - t_all < min_time):
        t0 = time.perf_counter()
        call(len(lat) + 1)
        lat.append(time.perf_counter() - t0)
    wall, cpu = time.perf_counter() - t_all, time.process_time() - c_all
    n = batch * len(lat)
    return n / wall, n / max(cpu, 1e-9), float(np.median(lat) * 1000)


class _MeanPoolEncoder:
    """A MiniLM-style sentence encoder on transformers alone (mean pooling, L2-normalised): the
    same model and pooling as sentence-transformers, for a machine that lacks that package."""

    def __init__(self, path: str, device: str) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch, self.device = torch, device
        dtype = torch.float16 if device != "cpu" else torch.float32
        self.tok = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path, dtype=dtype).to(device).eval()
        self.name = f"{path} (transformers, mean pooling)"

    def encode(
        self, texts: Sequence[str], *, kind: str = "query", batch_size: int = 64, show_progress: bool = False
    ) -> np.ndarray:
        torch = self.torch
        with torch.inference_mode():
            enc = self.tok(
                list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt"
            ).to(self.device)
            out = self.model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(out.dtype)
            v = (out * mask).sum(1) / mask.sum(1).clamp(min=1)
            v = torch.nn.functional.normalize(v.float(), dim=1)
        return v.cpu().numpy()


def _encoder(model: str, device: str) -> tuple[object | None, str]:
    """hopgym's encoder on ``device``, or the transformers-only one for a model directory when
    sentence-transformers is missing; ``(None, reason)`` when neither loads."""
    from hopgym.errors import DependencyNotInstalled
    from hopgym.retrieval.dense import make_embedder

    try:
        e = make_embedder(model, device=device, batch_size=1024, threads=None)
        return e, f"{e.name} (SentenceTransformerEmbedder)"
    except DependencyNotInstalled as exc:
        if not (Path(model) / "config.json").is_file():
            return None, str(exc)
    except OSError as exc:
        return None, str(exc)
    e = _MeanPoolEncoder(model, device)
    return e, e.name


def _time_search(
    r: object, q: np.ndarray, b: int, k: int, min_time: float
) -> tuple[float, float, float, float]:
    """(index q/s, index q/s per CPU second, index p50 ms, retriever q/s) at batch ``b``; the
    index is asked for ``k + 8`` hits, as the retriever asks it."""

    def batch(i: int) -> np.ndarray:
        s = (i * b) % (len(q) - b + 1)
        return q[s : s + b]

    max_calls = max(1, 4 * len(q) // b)
    qps, cpu_qps, p50 = _timed(lambda i: r.index.search(batch(i), k + 8), b, min_time, max_calls)
    r_qps, _, _ = _timed(lambda i: r.search_vectors(batch(i), k), b, min_time, max_calls)
    return qps, cpu_qps, p50, r_qps


def bench_dense(
    sizes: Sequence[int],
    device: str,
    dim: int,
    batches: Sequence[int],
    k: int,
    model: str | None,
    min_time: float,
    json_path: Path | None,
) -> None:
    import torch

    from hopgym.retrieval.dense import DenseRetriever, HashingEmbedder, import_faiss, place_index
    from hopgym.retrieval.devices import TorchFlatIndex, resolve_device

    device = resolve_device(device)
    on_gpu = device != "cpu"
    gpu_name = torch.cuda.get_device_name(torch.device(device)) if on_gpu else "CPU"
    torch_threads = torch.get_num_threads()
    rows: list[dict[str, object]] = []

    # Encoder on real text: the synthetic world's hop queries and its ~40-word passages.
    if model is not None:
        encoder, name = _encoder(model, device)
        if encoder is None:
            console.print(f"  [yellow]encoder not measured:[/] {name}")
        else:
            passages, queries = corpus_and_queries(2000, max(batches) * 2)
            texts = {"query": queries, "passage": [p.contents for p in passages]}
            table = Table(title=f"encoder on {gpu_name}: {name}")
            for col in ("texts", "batch", "texts/s", "per CPU-s", "p50 ms per batch"):
                table.add_column(col, justify="right")
            # Passages (index building) at 64 a call, and on a GPU at the larger batches too:
            # on a CPU a batch of 1,024 passages takes minutes and says nothing new.
            kind_batches = {
                "query": list(batches),
                "passage": [b for b in batches if b >= 64] if on_gpu else [64],
            }
            for kind in ("query", "passage"):
                pool = texts[kind]
                for b in kind_batches[kind]:

                    def call(i: int, b: int = b, pool: list[str] = pool, kind: str = kind) -> None:
                        s = (i * b) % max(1, len(pool) - b)
                        encoder.encode(pool[s : s + b], kind=kind, batch_size=b)

                    qps, cpu_qps, p50 = _timed(call, b, min_time, max(1, 4 * max(batches) // b))
                    table.add_row(
                        {"query": "queries", "passage": "passages"}[kind],
                        str(b),
                        fmt(qps),
                        "-" if on_gpu else fmt(cpu_qps),
                        fmt(p50, 2),
                    )
                    rows.append(
                        {
                            "part": "encoder",
                            "device": device,
                            "gpu": gpu_name,
                            "model": name,
                            "texts": kind,
                            "batch": b,
                            "per_s": qps,
                            "per_cpu_s": cpu_qps,
                            "p50_ms": p50,
                        }
                    )
            console.print(table)

    # Search over random unit vectors (what the index costs does not depend on the encoder).
    try:
        faiss = import_faiss()
        faiss_note = f"faiss {faiss.__version__}"
    except ImportError:
        faiss, faiss_note = None, "faiss not installed"
    backends = ["faiss", "torch"]
    table = Table(
        title=f"dense search on {gpu_name} ({device}), random {dim}-d unit vectors, "
        f"top-{k} (index asked for {k + 8}); {faiss_note}, torch "
        f"{torch.__version__}, {torch_threads} torch thread(s)"
    )
    for col in (
        "vectors",
        "index",
        "build s",
        "batch",
        "index q/s",
        "q/s per CPU-s",
        "p50 ms",
        "retriever q/s",
        "vs faiss",
        "recall@10",
    ):
        table.add_column(col, justify="right")
    rng = np.random.default_rng(0)
    for size in sizes:
        console.print(f"[bold]dense[/] at {size:,} vectors on {device}")
        x = unit_vectors(size, dim, rng)
        pool_n = max(max(batches) * 2, 256)
        idx = rng.choice(size, pool_n, replace=False)
        q = x[idx] + 0.5 * unit_vectors(pool_n, dim, rng)
        q /= np.linalg.norm(q, axis=1, keepdims=True)
        passages = [Passage(str(i), "", "") for i in range(size)]
        # Exact top-10 of 64 queries in float32 on the CPU: the reference for recall.
        _, truth = TorchFlatIndex(x, "cpu").search(q[:64], 10)
        base: dict[int, float] = {}
        for backend in backends:
            try:
                _, placed = place_index("flat", device, backend)
            except Exception as exc:  # noqa: BLE001 - a backend this machine lacks: say why
                console.print(f"  {backend}: not measured ({type(exc).__name__}: {exc})")
                continue
            t0 = time.perf_counter()
            r = DenseRetriever(
                passages,
                embedder=HashingEmbedder(dim),
                embeddings=x,
                device=device,
                index_backend=backend,
                threads=None,
            )
            build = time.perf_counter() - t0
            label = {
                "faiss": "faiss flat",
                "faiss-gpu": "faiss-gpu flat (fp16)",
                "torch": f"torch flat ({str(getattr(r.index, 'dtype', '')).split('.')[-1]})",
            }[placed]
            _, got = r.index.search(q[:64], 10)
            rec = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, truth, strict=True)])
            for b in batches:
                qps, cpu_qps, p50, r_qps = _time_search(r, q, b, k, min_time)
                # On a shared CPU, CPU seconds compare fairly; on a GPU, wall-clock time.
                speed = qps if on_gpu else cpu_qps
                if backend == backends[0]:
                    base[b] = speed
                table.add_row(
                    f"{size:,}",
                    label,
                    fmt(build, 1),
                    str(b),
                    fmt(qps),
                    "-" if on_gpu else fmt(cpu_qps),
                    fmt(p50, 2),
                    fmt(r_qps),
                    f"{speed / base[b]:.2f}x" if b in base else "-",
                    f"{rec:.3f}",
                )
                rows.append(
                    {
                        "part": "search",
                        "device": device,
                        "gpu": gpu_name,
                        "vectors": size,
                        "index": label,
                        "build_s": build,
                        "batch": b,
                        "index_qps": qps,
                        "index_qps_per_cpu_s": cpu_qps,
                        "p50_ms": p50,
                        "retriever_qps": r_qps,
                        "recall_at_10": float(rec),
                    }
                )
            del r
        del x, passages
    console.print(table)
    console.print(
        "  index q/s: the index's search alone (wall clock); retriever q/s: "
        "DenseRetriever.search_vectors (ranking with ties by position, Passage objects); "
        f"vs faiss: index q/s {'(wall clock)' if on_gpu else 'per CPU second'} over "
        "the first row's; recall@10 against exact float32 search."
    )
    if json_path is not None:
        write_json(json_path, rows, indent=1)
        console.print(f"  results: {json_path}")


# ------------------------------------------------------------------------------------- server
def _serve(kind: str, size: int, port_q: mp.Queue) -> None:  # child process
    from hopgym.retrieval.serving import RetrievalServer

    passages, _ = corpus_and_queries(size, 10)
    if kind == "bm25":
        r = BM25Retriever(passages)
    else:
        from hopgym.retrieval.dense import DenseRetriever, HashingEmbedder

        r = DenseRetriever(passages, embedder=HashingEmbedder(384))
    srv = RetrievalServer(r, port=0, max_batch=64)
    port_q.put(srv.port)
    srv.serve_forever()


def bench_server(sizes: Sequence[int], n_queries: int, clients: int, k: int) -> None:
    from hopgym.retrieval.http import HTTPRetriever

    table = Table(title=f"retrieval server (POST /retrieve, top-{k}), clients on loopback")
    for col in ("passages", "engine", "mode", "q/s", "p50 ms", "p99 ms", "vs sequential", "avg batch"):
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
            seq_qps, p50, p99 = latencies(
                [lambda q=q, c=client: c.search(q, k) for q in queries], [1] * len(queries)
            )
            mid = client.health()["stats"]
            n_b = max(1, mid["batches"] - before["batches"])
            seq_b = (mid["queries"] - before["queries"]) / n_b
            table.add_row(
                f"{size:,}", kind, "1 client", fmt(seq_qps), fmt(p50, 2), fmt(p99, 2), "1.0x", f"{seq_b:.1f}"
            )
            lat: list[float] = []
            lock = threading.Lock()

            def work(
                part: list[str], url: str = url, lat: list[float] = lat, lock: threading.Lock = lock
            ) -> None:
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
            table.add_row(
                f"{size:,}",
                kind,
                f"{clients} clients",
                fmt(conc),
                fmt(float(np.percentile(arr, 50)), 2),
                fmt(float(np.percentile(arr, 99)), 2),
                f"{conc / seq_qps:.1f}x",
                f"{avg_b:.1f}",
            )
            proc.terminate()
            proc.join(10)
    console.print(table)
    console.print(
        "  dense = FAISS flat over HashingEmbedder(384) vectors (no model), so the "
        "figures show the server and the index, not a neural encoder."
    )


# ------------------------------------------------------------------------------------- recall
def bench_recall(data: Path, model: str, ks: Sequence[int], limit: int | None) -> None:
    from hopgym.corpora.datasets import detect_format, load_qa
    from hopgym.retrieval.dense import DenseRetriever, make_embedder
    from hopgym.retrieval.hybrid import HybridRetriever

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
    table = Table(
        title=f"recall@k of supporting paragraphs, open mode (file's paragraphs "
        f"pooled), question as query; dense = {embedder.name}"
    )
    for col in ("dataset", "questions", "passages", "retriever", *[f"R@{k}" for k in ks], "q/s"):
        table.add_column(col, justify="right")
    for f, fmt_ in files:
        ds = load_qa(f, format=fmt_, mode="open", limit=limit)
        console.print(
            f"[bold]recall[/] {f.name}: {len(ds)} questions, {len(ds.passages)} passages; encoding ..."
        )
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
                vals = [
                    len({p.doc_id for p in res[:k]} & set(s.supporting_ids)) / len(s.supporting_ids)
                    for res, s in zip(results, ds.samples, strict=True)
                    if s.supporting_ids
                ]
                recalls.append(f"{statistics.mean(vals):.3f}")
            table.add_row(fmt_, str(len(ds)), str(len(ds.passages)), name, *recalls, fmt(qps))
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("bm25", "faiss", "dense", "server", "recall"),
        default=["bm25", "faiss", "dense", "server", "recall"],
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--slow-queries", type=int, default=10, help="rank-bm25 queries above 100k passages")
    parser.add_argument("--k", type=int, default=5, help="top-k for the speed sections")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument(
        "--no-hnsw-above",
        type=int,
        default=100_000,
        help="skip HNSW above this many vectors (its build takes ~30 min at 1M on one thread)",
    )
    parser.add_argument("--server-sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument(
        "--data",
        type=Path,
        default=ROOT.parent / "shared" / "data",
        help="folder with real HotpotQA / 2Wiki / MuSiQue samples",
    )
    parser.add_argument(
        "--model",
        default="default",
        help="embedder for recall and for the dense section's encoder rows: "
        "'default' (MiniLM), a model directory, 'hashing-384', or 'none' "
        "(dense: no encoder rows)",
    )
    parser.add_argument(
        "--device", default="cpu", help="dense: cpu, cuda, cuda:N or auto (encoder and index)"
    )
    parser.add_argument(
        "--batches", type=int, nargs="+", default=[1, 64, 1024], help="dense: queries per call"
    )
    parser.add_argument(
        "--min-time", type=float, default=2.0, help="dense: seconds of calls per figure (at least one call)"
    )
    parser.add_argument("--json", type=Path, default=None, help="dense: write the rows here")
    parser.add_argument("--recall-k", type=int, nargs="+", default=[2, 5, 10])
    parser.add_argument("--limit", type=int, default=None, help="questions per dataset (recall)")
    args = parser.parse_args()
    if args.json is not None and "dense" in args.only:
        check_writable(args.json)  # before the sections, not after them
    if "recall" in args.only:
        bench_recall(args.data, args.model, args.recall_k, args.limit)
    if "bm25" in args.only:
        bench_bm25(args.sizes, args.queries, args.slow_queries, args.k)
    if "faiss" in args.only:
        bench_faiss(args.sizes, args.queries, args.dim, args.batch, args.k, args.no_hnsw_above, args.threads)
    if "dense" in args.only:
        bench_dense(
            args.sizes,
            args.device,
            args.dim,
            args.batches,
            args.k,
            None if args.model == "none" else args.model,
            args.min_time,
            args.json,
        )
    if "server" in args.only:
        bench_server(args.server_sizes, args.queries, args.clients, args.k)


if __name__ == "__main__":
    main()
