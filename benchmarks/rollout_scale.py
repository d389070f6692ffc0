"""Rollouts at scale: vector envs that batch searches, env workers on Ray, the step's own cost,
in-process BM25 at 100k and 1M passages, and the query cache on GRPO groups.

    python benchmarks/rollout_scale.py                          # every section; b, e at 100k and 1M
    python benchmarks/rollout_scale.py --only a c d --sizes 100000
    python benchmarks/rollout_scale.py --only e --sizes 100000 --numba
    python benchmarks/rollout_scale.py --only b --sizes 100000

Sections (``--only``), lettered as the figures of the rollouts-at-scale work:

- ``a``: sub-env steps per CPU second against the number of envs (``--envs``, 1, 8, 64) for
  Gymnasium's ``SyncVectorEnv`` and hopgym's ``BatchedSearchVectorEnv`` on the same episodes:
  GRPO-shaped, groups of up to 8 sub-envs work through the same questions (``--group``), each
  sub-env driven by the scripted IRCoT-like reader with seeded query noise (``--noise-a``), the
  retriever's query cache on and off (``--cache``) in both. Only the ``step`` calls are timed
  (CPU seconds of this process; the best of ``--repeats`` runs, the two vector envs in turn);
  the agents' own time is left out. BM25 at each ``--sizes``; dense with the
  packaged all-MiniLM-L6-v2 (one torch thread) at ``--dense-size`` passages, every passage
  encoded by MiniLM (cached on disk in ``--cache-dir``: ~35 min per 100k passages on one
  thread), and at ``--dense-random-size`` passages with MiniLM encoding the queries but random
  unit vectors for the passages (the FAISS search costs what it costs at that size; the
  rankings mean nothing, so the reader searches more). The final transcripts of the two vector
  envs are compared.
- ``c``: the Ray vector env (``RayVectorEnv``) with 1 and 2 workers next to ``SyncVectorEnv``
  and ``BatchedSearchVectorEnv`` in this process, ``--ray-envs`` sub-envs, BM25 at
  ``--ray-size``, the same workload; wall-clock steps/s (the workers' CPU is not this
  process's), with the machine's load average before and after.
- ``d``: the CPU cost of one think-only step (``<think>…</think>``): the bare env, the env as
  ``gym.make(..., reward=None)`` builds it (step budget and Gymnasium's checkers), and with the
  default reward (``reward="default"``); the same for ``r3`` and for a lenient turn the general
  parser reads (an unclosed ``<think>``).
- ``e``: the oracle agent through the env (``make_task_env`` over the synthetic world, as
  ``gym.make("hopgym/Synthetic-v1")`` builds it) with the query cache off, so every search is
  scored: BM25 backend ``sparse`` (the default) vs ``numpy`` (the default before it: bm25s scores
  every passage) on the same index, and rank-bm25 on the same queries. Steps/s are per core: CPU
  seconds of this process (``time.process_time``), so other jobs on the machine do not count.
  rank-bm25 scores every passage in Python (3 queries/s at 100k, ~0.3 at 1M), so its steps/s are
  estimated, not run: the sparse run's CPU per step plus the searches per step times the
  difference of their per-query CPU times on a sample of the oracle's own searches
  (``--rank-sample``); the same estimate for ``numpy`` is printed beside its measured figure as a
  check of the method. It also checks that ``sparse`` and ``numpy`` return the same passages in
  the same order with the same scores for every gold hop query at k = 3, 6, 12. ``--numba``
  adds bm25s' numba backend and an exact numba kernel (full postings, on-disk cache) per query.
- ``b``: a GRPO-shaped workload: batches of 16 questions x G=8 rollouts, by an oracle that
  samples its queries with seeded noise (``--noise``: each search drops a word, moves its last
  word first or adds a word of the question, a third each; some searches are repeated), with
  the query cache off and on; steps/s (per core), hit rate, and the transcripts compared.

Run with one thread (set below); compare ratios measured side by side in one run.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopgym._atomic import atomic_write, check_writable, write_json, write_text  # noqa: E402
from hopgym.agents import OracleAgent  # noqa: E402
from hopgym.agents.evaluation import run_episode  # noqa: E402
from hopgym.agents.iterative import IterativeAgent  # noqa: E402
from hopgym.corpora.synthetic import WorldConfig, generate_world
from hopgym.envs.registration import make_task_env  # noqa: E402
from hopgym.envs.vector import BatchedSearchVectorEnv  # noqa: E402
from hopgym.retrieval.base import Retriever
from hopgym.retrieval.sparse import BM25Retriever
from hopgym.tasks.base import QATask, Source  # noqa: E402
from hopgym.tasks.synthetic import build_task, clear_caches
from hopgym.turns import Search  # noqa: E402

console = Console(width=150)
#: The sections, in the order they print.
SECTIONS = ("a", "c", "d", "e", "b")


# ------------------------------------------------------------------------------------ helpers
def task_with(task: QATask, retriever: Retriever) -> QATask:
    """``task`` whose one source searches ``retriever`` instead."""
    ((name, src),) = task.sources.items()
    return QATask(
        task.name, task.samples, {name: Source(name, retriever, src.cost, src.description)}, task.documents
    )


def wrap(base: BM25Retriever, backend: str, cache: bool) -> BM25Retriever:
    """The same bm25s index searched with another backend, with or without a query cache."""
    r = BM25Retriever.from_bm25s(base.passages, base.bm25s_model, k1=base.k1, b=base.b, backend=backend)
    if not cache:
        r.configure_cache(0, 0)
    return r


class Recording:
    """A retriever that notes each ``(query, k)`` it is asked."""

    def __init__(self, inner: Retriever) -> None:
        self.inner, self.asked = inner, []

    def search(self, query: str, k: int) -> list[Any]:
        self.asked.append((query, k))
        return self.inner.search(query, k)

    def search_batch(self, queries: Sequence[str], k: int) -> list[list[Any]]:
        return [self.search(q, k) for q in queries]


def cpu_run(env: gym.Env, episodes: Callable[[], Any]) -> tuple[float, int, int]:
    """``(cpu seconds, steps, searches)`` of running ``episodes()`` (a list of outcomes)."""
    gc.collect()
    t = time.process_time()
    results = episodes()
    cpu = time.process_time() - t
    return cpu, sum(r["steps"] for r in results), sum(r["searches"] for r in results)


def oracle_episodes(env: gym.Env, n: int, seed: int) -> Callable[[], list[dict[str, Any]]]:
    count = len(env.unwrapped.task.samples)
    order = np.random.default_rng(seed).permutation(count)
    agent = OracleAgent(env)
    return lambda: [
        run_episode(env, agent, seed=seed + i, options={"index": int(order[i % count])}) for i in range(n)
    ]


def per_query_cpu(
    search: Callable[[str, int], Any], asked: Sequence[tuple[str, int]], repeats: int = 1
) -> float:
    """Best CPU seconds per query over ``repeats`` passes."""
    best = float("inf")
    for _ in range(repeats):
        t = time.process_time()
        for q, k in asked:
            search(q, k)
        best = min(best, (time.process_time() - t) / len(asked))
    return best


NUMBA_EXACT = """
import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def top_k(data, indices, indptr, terms, k, scratch, touched):
    nt = 0
    for j in range(len(terms)):  # bm25s' float32 sums, in query order
        t = terms[j]
        for p in range(indptr[t], indptr[t + 1]):
            d = indices[p]
            if scratch[d] == 0.0:
                touched[nt] = d
                nt += 1
            scratch[d] += data[p]
    kk = min(k, nt)
    best_d = np.empty(kk, np.int64)
    best_s = np.empty(kk, np.float32)
    cnt = 0
    for i in range(nt):  # insertion into the top k: score, then position
        d = touched[i]
        s = scratch[d]
        if cnt < kk:
            pos = cnt
            cnt += 1
        elif s > best_s[kk - 1] or (s == best_s[kk - 1] and d < best_d[kk - 1]):
            pos = kk - 1
        else:
            continue
        while pos > 0 and (best_s[pos - 1] < s or (best_s[pos - 1] == s and best_d[pos - 1] > d)):
            best_s[pos] = best_s[pos - 1]
            best_d[pos] = best_d[pos - 1]
            pos -= 1
        best_s[pos] = s
        best_d[pos] = d
    for i in range(nt):
        scratch[touched[i]] = 0.0
    return best_d[:cnt], best_s[:cnt]
"""

_FIRST_CALL = """
import time
t = time.perf_counter()
import numpy as np
from numba_exact import top_k
z = np.zeros(4, np.float32)
top_k(z, np.zeros(4, np.int32), np.zeros(2, np.int64), np.zeros(1, np.int64), 1, z,
      np.zeros(4, np.int64))
print(time.perf_counter() - t)
"""


def numba_exact_kernel(cache_dir: str) -> tuple[Callable[..., Any], float, float]:
    """An exact numba top-k over every posting of the query's terms (bm25s' float32 sums in
    query order, ties by position) with numba's on-disk cache in ``cache_dir``, and the seconds
    a fresh process spends before its first answer: the first time (compiling) and later."""
    import subprocess

    write_text(Path(cache_dir, "numba_exact.py"), NUMBA_EXACT)
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "PYTHONPATH": cache_dir}
    first, later = (
        float(
            subprocess.run(
                [sys.executable, "-c", _FIRST_CALL], env=env, check=True, capture_output=True, text=True
            ).stdout
        )
        for _ in range(2)
    )
    os.environ["NUMBA_CACHE_DIR"] = cache_dir
    sys.path.insert(0, cache_dir)
    from numba_exact import top_k  # type: ignore[import-not-found]

    return top_k, first, later


# ------------------------------------------------------------------------------------ section e
E_COLUMNS = ("passages", "engine", "per query", "oracle steps/s", "vs numpy", "vs rank-bm25", "how")
B_COLUMNS = ("passages", "engine", "noise", "cache", "steps/s", "speed-up", "hit rate", "transcripts")


def section_e(
    args: argparse.Namespace, task: QATask, table: Table, notes: list[str], out: dict[str, Any]
) -> None:
    base = task.sources["local"].retriever
    size = len(base)
    sparse, numpy_r = wrap(base, "sparse", False), wrap(base, "numpy", False)

    # The oracle's own searches, for per-query timings.
    rec = Recording(sparse)
    oracle_episodes(make_task_env(task_with(task, rec)), 100, seed=7)()
    asked = rec.asked
    sample = asked[: args.rank_sample]

    rates: dict[str, float] = {}
    per_q: dict[str, float] = {}
    per_step: dict[str, tuple[float, float]] = {}
    for name, r in (("sparse", sparse), ("numpy", numpy_r)):
        env = make_task_env(task_with(task, r))
        oracle_episodes(env, 20, seed=1)()  # warm-up
        cpu, steps, searches = cpu_run(env, oracle_episodes(env, args.episodes, seed=0))
        rates[name] = steps / cpu
        per_step[name] = (cpu / steps, searches / steps)
        per_q[name] = per_query_cpu(r.search, asked, repeats=3 if name == "sparse" else 1)
    t = time.perf_counter()
    rank = BM25Retriever(base.passages, engine="rank_bm25", cache_entries=0)
    rank_build = time.perf_counter() - t
    per_q["rank_bm25"] = per_query_cpu(rank.search, sample)
    del rank
    gc.collect()
    cpu_step, searches_step = per_step["sparse"]

    def estimate(name: str) -> float:
        return 1.0 / (cpu_step + searches_step * (per_q[name] - per_q["sparse"]))

    rates["rank_bm25"] = estimate("rank_bm25")
    rows = [
        ("sparse (default)", "sparse", "measured"),
        ("numpy (before)", "numpy", f"measured; estimated {estimate('numpy'):,.0f}"),
        ("rank-bm25", "rank_bm25", f"estimated from {len(sample)} queries (index {rank_build:.0f} s)"),
    ]
    if args.numba:
        for name, how in numba_rows(base, asked, per_q).items():
            rates[name] = estimate(name)
            rows.append((name, name, how))
    for label, name, how in rows:
        table.add_row(
            f"{size:,}",
            label,
            f"{per_q[name] * 1e6:,.0f} µs",
            f"{rates[name]:,.0f}",
            f"{rates[name] / rates['numpy']:.1f}x",
            f"{rates[name] / rates['rank_bm25']:,.0f}x",
            how,
        )
    out.setdefault("e", {})[str(size)] = {
        "steps_per_cpu_s": rates,
        "per_query_cpu_s": per_q,
        "searches_per_step": searches_step,
        "queries_sampled_for_rank_bm25": len(sample),
    }
    if args.check:
        notes.append(check_exact(size, task, sparse, numpy_r))


def numba_rows(
    base: BM25Retriever, asked: Sequence[tuple[str, int]], per_q: dict[str, float]
) -> dict[str, str]:
    """Per-query CPU of bm25s' numba backend and of the exact numba kernel (needs numba)."""
    try:
        import numba  # noqa: F401
    except ImportError:
        console.print("--numba: numba is not installed (pip install 'hopgym[fast]')")
        return {}
    rows = {}
    model = base.bm25s_model
    r = wrap(base, "sparse", False)
    r.backend = model.backend = "numba"  # bm25s' compiled top-k on the same index
    t = time.perf_counter()
    r.search(asked[0][0], asked[0][1])
    compile_s = time.perf_counter() - t
    per_q["bm25s numba"] = per_query_cpu(r.search, asked, repeats=2)
    model.backend = "numpy"
    rows["bm25s numba"] = f"first query {compile_s:.0f} s (compiles in each process); ties rounded"
    with tempfile.TemporaryDirectory() as cache_dir:
        kernel, first, later = numba_exact_kernel(cache_dir)
        scores = model.scores
        data, indices = scores["data"], scores["indices"]
        indptr = np.asarray(scores["indptr"], dtype=np.int64)
        scratch, touched = np.zeros(len(base), np.float32), np.zeros(len(base), np.int64)
        ids = [np.asarray(base._query_ids(q), np.int64) for q, _ in asked]
        kernel(data, indices, indptr, ids[0], 3, scratch, touched)
        t = time.process_time()
        for (_, k), terms in zip(asked, ids, strict=True):
            kernel(data, indices, indptr, terms, k, scratch, touched)
        per_q["numba exact"] = (time.process_time() - t) / len(asked)
    rows["numba exact"] = (
        f"first answer {first:.1f} s once (compiling), then {later:.1f} s in each process (on-disk cache)"
    )
    return rows


def check_exact(size: int, task: QATask, sparse: BM25Retriever, numpy_r: BM25Retriever) -> str:
    """How many gold hop searches sparse and numpy answer alike (passages, order, scores)."""
    queries = [h.query for s in task.samples for h in s.decomposition]
    same = total = 0
    for k in (3, 6, 12):
        got = sparse.search_batch_scored(queries, k)
        ref = numpy_r.search_batch_scored(queries, k)  # bm25s' dense scores, top_k_indices
        same += sum(a == b for a, b in zip(got, ref, strict=True))
        total += len(queries)
    return (
        f"{size:,} passages: sparse == numpy (passages, order, scores) for {same:,} of "
        f"{total:,} gold hop searches ({len(queries):,} queries x k = 3, 6, 12)"
    )


# ------------------------------------------------------------------------------------ section b
class NoisyOracle(OracleAgent):
    """The oracle's hop queries with seeded noise, as a sampled policy would vary them.

    With probability ``noise`` a search drops a random word, moves its last word to the front or
    adds a word of the question (a third each); with probability ``repeat`` it then searches the
    same hop once more later (a policy that re-checks).
    """

    def __init__(self, env: gym.Env, seed: int, noise: float, repeat: float = 0.1) -> None:
        super().__init__(env)
        self.rng = np.random.default_rng(seed)
        self.noise, self.repeat = noise, repeat

    def act(self, observation: str, info: dict[str, Any]) -> Any:
        action = super().act(observation, info)
        if not isinstance(action, Search):
            return action
        words = action.query.split()
        if self.rng.random() < self.noise:
            kind = int(self.rng.integers(3))
            if kind == 0 and len(words) > 1:
                words.pop(int(self.rng.integers(len(words))))
            elif kind == 1:
                words.insert(0, words.pop())
            else:
                extra = self.env.unwrapped.sample.question.rstrip("?").split()
                words.append(extra[int(self.rng.integers(len(extra)))])
        if self.attempted and self.rng.random() < self.repeat:
            self.attempted.discard(max(self.attempted))
        return Search(" ".join(words), think=action.think)


def grpo_run(
    env: gym.Env, batches: int, questions: int, group: int, noise: float, seed: int
) -> tuple[float, int, list[list[dict[str, str]]]]:
    """CPU seconds, steps and transcripts of ``batches`` x ``questions`` x ``group`` episodes."""
    n = len(env.unwrapped.task.samples)
    rng = np.random.default_rng(seed)
    plan = [
        (int(qi), b * 1000 + g)
        for b in range(batches)
        for qi in rng.choice(n, size=questions, replace=False)
        for g in range(group)
    ]
    transcripts: list[list[dict[str, str]]] = []
    steps = 0
    gc.collect()
    t = time.process_time()
    for qi, s in plan:
        r = run_episode(env, NoisyOracle(env, seed=s, noise=noise), seed=s, options={"index": qi})
        steps += r["steps"]
        transcripts.append(env.unwrapped.transcript)
    return time.process_time() - t, steps, transcripts


def section_b(args: argparse.Namespace, task: QATask, table: Table, out: dict[str, Any]) -> None:
    base = task.sources["local"].retriever
    for backend in ("sparse", "numpy"):
        for noise in args.noise:
            results = {}
            for cache in (False, True):
                r = wrap(base, backend, cache)
                env = make_task_env(task_with(task, r))
                grpo_run(env, 1, 4, 2, noise, seed=99)  # warm-up, on other questions
                r.cache_clear()
                cpu, steps, transcripts = grpo_run(
                    env, args.batches, args.questions, args.group, noise, seed=0
                )
                results[cache] = (steps / cpu, r.cache_info(), transcripts)
            same = results[False][2] == results[True][2]
            for cache in (False, True):
                rate, info, _ = results[cache]
                table.add_row(
                    f"{len(base):,}",
                    backend + (" (default)" if backend == "sparse" else " (before)"),
                    f"{noise:.0%}",
                    "on" if cache else "off",
                    f"{rate:,.0f}",
                    f"{rate / results[False][0]:.2f}x",
                    f"{info.hit_rate:.0%}" if cache else "-",
                    "identical" if same else "DIFFER",
                )
            out.setdefault("b", {}).setdefault(str(len(base)), {})[f"{backend} {noise}"] = {
                "steps_per_cpu_s_off": results[False][0],
                "steps_per_cpu_s_on": results[True][0],
                "hit_rate": results[True][1].hit_rate,
                "transcripts_identical": same,
            }


# ------------------------------------------------------------------------------------ section a
class NoisyReader(IterativeAgent):
    """The IRCoT-like scripted reader, whose queries a sampled policy would vary: with
    probability ``noise`` a search drops a word, moves its last word first or adds a word of the
    question (a third each). It reads only observations and infos, as an LLM policy does."""

    def __init__(self, seed: int, noise: float) -> None:
        super().__init__()
        self.rng = np.random.default_rng(seed)
        self.noise = noise
        self.question = ""

    def act(self, observation: str, info: dict[str, Any]) -> Any:
        if "question" in info:
            self.question = str(info["question"])
        action = super().act(observation, info)
        if not isinstance(action, Search) or self.rng.random() >= self.noise:
            return action
        words = action.query.split()
        kind = int(self.rng.integers(3))
        if kind == 0 and len(words) > 1:
            words.pop(int(self.rng.integers(len(words))))
        elif kind == 1:
            words.insert(0, words.pop())
        else:
            extra = self.question.rstrip("?").split() or ["the"]
            words.append(extra[int(self.rng.integers(len(extra)))])
        return Search(" ".join(words), think=action.think)


class GroupQuestions(gym.Wrapper):
    """Each reset takes the next question of its group's seeded order (GRPO: the G rollouts of
    a group work through the same questions)."""

    def __init__(self, env: gym.Env, order: Sequence[int]) -> None:
        super().__init__(env)
        self.order, self.k = list(order), 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        index = self.order[self.k % len(self.order)]
        self.k += 1
        return self.env.reset(seed=seed, options={"index": index})


def grouped_fns(
    make: Callable[[], gym.Env], n: int, group: int, questions: int, seed: int
) -> list[Callable[[], gym.Env]]:
    """``n`` env fns; sub-envs ``g*group .. g*group+group-1`` share question order ``g``."""

    def fn(g: int) -> Callable[[], gym.Env]:
        order = np.random.default_rng([seed, g]).permutation(questions).tolist()
        return lambda: GroupQuestions(make(), order)

    return [fn(i // group) for i in range(n)]


def per_env(infos: dict[str, Any], n: int) -> list[dict[str, Any]]:
    """A vector env's info dict as one dict per sub-env."""
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in infos.items():
        if key.startswith("_") or isinstance(value, dict):
            continue
        mask = infos["_" + key]
        for i in np.flatnonzero(mask):
            out[i][key] = value[i]
    return out


def drive(venv: Any, steps: int, noise: float, seed: int) -> dict[str, Any]:
    """Scripted readers in ``venv`` (``SAME_STEP``) for ``steps`` steps; the CPU and wall seconds
    spent inside ``venv.step``, the sub-env steps, searches and each sub-env's transcripts."""
    n = venv.num_envs
    agents = [NoisyReader(seed * 1000 + i, noise) for i in range(n)]
    obs, infos = venv.reset(seed=seed)
    info_list = per_env(infos, n)
    cpu = wall = 0.0
    searches = 0
    transcripts: list[list[str]] = [[] for _ in range(n)]
    gc.collect()
    for _ in range(steps):
        actions = [agents[i].act(obs[i], info_list[i]) for i in range(n)]
        t, w = time.process_time(), time.perf_counter()
        obs, _, terminated, truncated, infos = venv.step(actions)
        cpu += time.process_time() - t
        wall += time.perf_counter() - w
        info_list = per_env(infos, n)
        ends = per_env(infos["final_info"], n) if "final_info" in infos else None
        for i in range(n):
            last = ends[i] if ends is not None and (terminated[i] or truncated[i]) else info_list[i]
            searches += last.get("action_type") == "search"
            if terminated[i] or truncated[i]:
                transcripts[i].append(infos["final_obs"][i])
                agents[i].reset()
            transcripts[i].append(obs[i])
    return {"cpu": cpu, "wall": wall, "steps": steps * n, "searches": searches, "transcripts": transcripts}


def dense_retriever(task: QATask, cache_dir: Path, random_vectors: bool) -> Retriever:
    """A flat FAISS index over the task's passages for the packaged MiniLM: the passages encoded
    by MiniLM (cached in ``cache_dir``) or, with ``random_vectors``, random unit vectors."""
    from hopgym.retrieval.dense import DenseRetriever, SentenceTransformerEmbedder

    passages = task.sources["local"].retriever.passages
    embedder = SentenceTransformerEmbedder("default", threads=1)
    if random_vectors:
        x = np.random.default_rng(0).standard_normal((len(passages), embedder.dim), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
    else:
        cache_dir.mkdir(parents=True, exist_ok=True)
        path = cache_dir / f"minilm-synthetic-{len(passages)}.npy"
        if path.exists():
            x = np.load(path)
        else:
            console.print(f"encoding {len(passages):,} passages with MiniLM (once; cached in {path}) ...")
            x = embedder.encode([p.contents for p in passages], kind="passage", show_progress=True)
            with atomic_write(path, "wb") as fh:  # a later run loads it whenever it exists
                np.save(fh, x)
    return DenseRetriever(passages, embedder=embedder, embeddings=x)


A_COLUMNS = (
    "index",
    "envs",
    "query cache",
    "SyncVectorEnv steps/s",
    "batched steps/s",
    "speed-up",
    "searches/step",
    "search calls/step",
    "transcripts",
)


def section_a(
    args: argparse.Namespace, label: str, task: QATask, table: Table, out: dict[str, Any], steps_target: int
) -> None:
    make = partial(make_task_env, task)
    questions = len(task.samples)
    retriever = task.sources["local"].retriever
    for cache, n in [(c, n) for c in args.cache for n in args.envs]:
        if cache == "on":
            retriever.configure_cache()  # the default bounds
        else:
            retriever.configure_cache(0, 0)
        steps = max(8, -(-steps_target // n))
        rates: dict[str, float] = {}
        runs: dict[str, Any] = {}
        for _ in range(args.repeats):  # the two vector envs in turn; the best rate of each
            for name, cls in (("sync", gym.vector.SyncVectorEnv), ("batched", BatchedSearchVectorEnv)):
                retriever.cache_clear()  # each run starts with a cold cache
                venv = cls(
                    grouped_fns(make, n, args.group, questions, seed=1),
                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
                )
                drive(venv, 4, args.noise_a, seed=99)  # warm-up: the same for both
                before = venv.search_stats().calls if name == "batched" else 0
                run = drive(venv, steps, args.noise_a, seed=0)
                rates[name] = max(rates.get(name, 0.0), run["steps"] / run["cpu"])
                runs[name] = run
                if name == "batched":
                    calls = (venv.search_stats().calls - before) / steps
        same = runs["sync"]["transcripts"] == runs["batched"]["transcripts"]
        table.add_row(
            label,
            str(n),
            cache,
            f"{rates['sync']:,.0f}",
            f"{rates['batched']:,.0f}",
            f"{rates['batched'] / rates['sync']:.2f}x",
            f"{runs['batched']['searches'] / steps:.1f}",
            f"{calls:.1f}",
            "identical" if same else "DIFFER",
        )
        out.setdefault("a", {}).setdefault(label, {})[f"{n} cache {cache}"] = {
            "sync_steps_per_cpu_s": rates["sync"],
            "batched_steps_per_cpu_s": rates["batched"],
            "speed_up": rates["batched"] / rates["sync"],
            "vector_steps": steps,
            "searches_per_vector_step": runs["batched"]["searches"] / steps,
            "search_calls_per_vector_step": calls,
            "transcripts_identical": same,
        }
        console.print(
            f"(a) {label}, {n} envs, cache {cache}: sync {rates['sync']:,.0f}, "
            f"batched {rates['batched']:,.0f} steps/s"
        )
    retriever.configure_cache()


# ------------------------------------------------------------------------------------ section c
C_COLUMNS = ("vector env", "envs", "workers", "steps/s (wall)", "vs SyncVectorEnv", "transcripts")


def _ray_task(config: WorldConfig) -> gym.Env:
    return make_task_env(build_task(config))


def section_c(args: argparse.Namespace, table: Table, notes: list[str], out: dict[str, Any]) -> None:
    import ray

    from hopgym.envs.ray_vector import RayVectorEnv

    config = WorldConfig(n_entities=args.ray_size, n_questions=1000)
    make = partial(_ray_task, config)
    local = build_task(config)
    questions = len(local.samples)
    n = args.ray_envs
    steps = max(8, -(-args.ray_steps // n))
    load_before = os.getloadavg()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    rows, runs = [], {}
    try:
        for name, workers in (
            ("SyncVectorEnv", 0),
            ("BatchedSearchVectorEnv", 0),
            ("RayVectorEnv", 1),
            ("RayVectorEnv", 2),
        ):
            local.sources["local"].retriever.cache_clear()  # each run starts with a cold cache
            fns = grouped_fns(make, n, args.group, questions, seed=1)
            if name == "SyncVectorEnv":
                venv: Any = gym.vector.SyncVectorEnv(fns, autoreset_mode="SameStep")
            elif name == "BatchedSearchVectorEnv":
                venv = BatchedSearchVectorEnv(fns, autoreset_mode="SameStep")
            else:
                t = time.perf_counter()
                venv = RayVectorEnv(fns, workers=workers, autoreset_mode="SameStep")
                notes.append(
                    f"(c) {workers} Ray worker(s) built their worlds and indexes in "
                    f"{time.perf_counter() - t:.0f} s"
                )
            drive(venv, 4, args.noise_a, seed=99)  # warm-up: the same for every vector env
            run = drive(venv, steps, args.noise_a, seed=0)
            venv.close()
            key = f"{name} {workers}" if workers else name
            runs[key] = run
            rows.append((name, workers, key))
            console.print(f"(c) {key}: {run['steps'] / run['wall']:,.0f} steps/s (wall)")
    finally:
        ray.shutdown()
    load_after = os.getloadavg()
    base = runs["SyncVectorEnv"]
    for name, workers, key in rows:
        run = runs[key]
        rate = run["steps"] / run["wall"]
        same = run["transcripts"] == base["transcripts"]
        table.add_row(
            name,
            str(n),
            str(workers) if workers else "-",
            f"{rate:,.0f}",
            f"{rate / (base['steps'] / base['wall']):.2f}x",
            "identical" if same else "DIFFER",
        )
        out.setdefault("c", {})[key] = {
            "steps_per_wall_s": rate,
            "envs": n,
            "vector_steps": steps,
            "transcripts_identical": same,
        }
    out.setdefault("c", {})["load_average"] = {"before": load_before, "after": load_after}
    notes.append(
        f"(c) load average (1, 5, 15 min) before {_load(load_before)}, after "
        f"{_load(load_after)}, on {os.cpu_count()} cores"
    )


def _load(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


# ------------------------------------------------------------------------------------ section d
D_COLUMNS = ("protocol", "turn", "bare env", "gym.make(reward=None)", "reward='default'", "wrappers add")


def think_cost(env: gym.Env, action: str, episodes: int) -> float:
    """CPU microseconds per think-only step (resets are not timed): the best of three passes."""
    turns = env.unwrapped.max_turns - 1
    best = float("inf")
    for rep in range(3):
        cpu = 0
        for e in range(episodes):
            env.reset(seed=rep * episodes + e)
            t = time.process_time_ns()
            for _ in range(turns):
                env.step(action)
            cpu += time.process_time_ns() - t
        best = min(best, cpu / (episodes * turns) / 1000)
    return best


def section_d(args: argparse.Namespace, table: Table, out: dict[str, Any]) -> None:
    cases = [
        ("tags", "<think>I should look up who founded it first.</think>", "canonical"),
        ("tags", "<think>I should look up who founded it first.", "unclosed <think>"),
        ("r3", "The problem analysis: I should look up who founded it first.", "analysis only"),
    ]
    for protocol, action, what in cases:
        costs = {}
        for name, reward, bare in (
            ("bare", None, True),
            ("budget", None, False),
            ("default", "default", False),
        ):
            env = gym.make("hopgym/Tiny-v1", protocol=protocol, reward=reward)
            costs[name] = think_cost(env.unwrapped if bare else env, action, args.think_episodes)
        table.add_row(
            protocol,
            what,
            f"{costs['bare']:.1f} µs",
            f"{costs['budget']:.1f} µs",
            f"{costs['default']:.1f} µs",
            f"{costs['default'] - costs['bare']:.1f} µs",
        )
        out.setdefault("d", {})[f"{protocol} {what}"] = costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[100_000, 1_000_000],
        help="(a, b, e) corpus sizes for BM25 (entities, one passage each)",
    )
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8, 64], help="(a) numbers of sub-envs")
    parser.add_argument(
        "--cache",
        nargs="+",
        choices=["on", "off"],
        default=["on", "off"],
        help="(a) the retriever's query cache, in both vector envs",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="(a) runs of each vector env, in turn; the best rate counts"
    )
    parser.add_argument(
        "--noise-a", type=float, default=0.3, help="(a, c) share of the reader's searches that are varied"
    )
    parser.add_argument(
        "--steps-a",
        type=int,
        default=2000,
        help="(a) sub-env steps timed per vector env and envs count (BM25)",
    )
    parser.add_argument(
        "--dense-steps",
        type=int,
        default=600,
        help="(a) sub-env steps timed per vector env and envs count (dense)",
    )
    parser.add_argument(
        "--dense-size",
        type=int,
        default=10_000,
        help="(a) dense: passages, every one encoded by MiniLM (0: skip)",
    )
    parser.add_argument(
        "--dense-random-size",
        type=int,
        default=100_000,
        help="(a) dense: passages as random vectors, MiniLM queries (0: skip)",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=Path.home() / ".cache" / "hopgym" / "benchmarks",
        help="(a) where MiniLM passage embeddings are kept between runs",
    )
    parser.add_argument("--ray-size", type=int, default=100_000, help="(c) BM25 corpus size")
    parser.add_argument("--ray-envs", type=int, default=16, help="(c) sub-envs")
    parser.add_argument("--ray-steps", type=int, default=1600, help="(c) sub-env steps timed per vector env")
    parser.add_argument(
        "--think-episodes", type=int, default=3000, help="(d) episodes of think-only steps per pass"
    )
    parser.add_argument("--episodes", type=int, default=500, help="(e) timed oracle episodes")
    parser.add_argument(
        "--rank-sample", type=int, default=20, help="(e) oracle searches timed with rank-bm25"
    )
    parser.add_argument(
        "--no-check",
        dest="check",
        action="store_false",
        help="(e) skip the sparse == numpy check on every gold hop query",
    )
    parser.add_argument(
        "--numba", action="store_true", help="(e) also time bm25s' numba backend and an exact numba kernel"
    )
    parser.add_argument("--batches", type=int, default=4, help="(b) GRPO batches")
    parser.add_argument("--questions", type=int, default=16, help="(b) questions per batch")
    parser.add_argument("--group", type=int, default=8, help="(a, b, c) rollouts per question (G)")
    parser.add_argument(
        "--noise", type=float, nargs="+", default=[0.1, 0.3], help="(b) shares of noisy searches"
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="also write the figures to this file (the sections run here replace theirs in an existing file)",
    )
    args = parser.parse_args()
    if args.json:
        check_writable(args.json)  # before the sections, not after them
    run_args = {k: v for k, v in vars(args).items() if k != "json"}
    out: dict[str, Any] = {"args": dict.fromkeys(args.only, run_args)}
    tables = {
        "a": Table(
            title=f"(a) sub-env steps per CPU second (step calls only), GRPO-shaped: "
            f"groups of {args.group}, noisy reader ({args.noise_a:.0%})"
        ),
        "c": Table(
            title=f"(c) Ray env workers, {args.ray_envs} sub-envs, BM25 at "
            f"{args.ray_size:,} passages, wall clock on this machine"
        ),
        "d": Table(title="(d) one think-only step, CPU microseconds (Tiny-v1)"),
        "e": Table(
            title="(e) oracle agent, one core, query cache off: BM25 engines on the same index and queries"
        ),
        "b": Table(
            title=f"(b) GRPO-shaped: {args.batches} batches x {args.questions} questions "
            f"x G={args.group}, noisy oracle, one core"
        ),
    }
    for section, columns in (
        ("a", A_COLUMNS),
        ("c", C_COLUMNS),
        ("d", D_COLUMNS),
        ("e", E_COLUMNS),
        ("b", B_COLUMNS),
    ):
        for col in columns:
            tables[section].add_column(col, justify="right")
    notes: list[str] = [
        f"load average (1, 5, 15 min) at the start {_load(os.getloadavg())}, on {os.cpu_count()} cores"
    ]
    if "d" in args.only:
        section_d(args, tables["d"], out)
    for size in args.sizes if {"a", "b", "e"} & set(args.only) else []:
        config = WorldConfig(n_entities=size, n_questions=1000)  # one world per size
        t = time.perf_counter()
        generate_world(config)
        gen_s = time.perf_counter() - t
        t = time.perf_counter()
        task = build_task(config)
        build_s = time.perf_counter() - t
        notes.append(f"{size:,} passages: world {gen_s:.0f} s, index and query checks {build_s:.0f} s")
        console.print(notes[-1])
        if "a" in args.only:
            section_a(args, f"BM25, {size:,}", task, tables["a"], out, args.steps_a)
        if "e" in args.only:
            section_e(args, task, tables["e"], notes, out)
        if "b" in args.only:
            section_b(args, task, tables["b"], out)
        if "a" in args.only:
            for dense_size, random_vectors in ((args.dense_size, False), (args.dense_random_size, True)):
                if dense_size != size:
                    continue
                label = f"dense MiniLM{', random passages' if random_vectors else ''}, {size:,}"
                section_a(
                    args,
                    label,
                    task_with(task, dense_retriever(task, args.cache_dir, random_vectors)),
                    tables["a"],
                    out,
                    args.dense_steps,
                )
        clear_caches()
        del task
        gc.collect()
    if "a" in args.only:
        for dense_size, random_vectors in ((args.dense_size, False), (args.dense_random_size, True)):
            if not dense_size or dense_size in args.sizes:
                continue
            task = build_task(WorldConfig(n_entities=dense_size, n_questions=1000))
            label = f"dense MiniLM{', random passages' if random_vectors else ''}, {dense_size:,}"
            section_a(
                args,
                label,
                task_with(task, dense_retriever(task, args.cache_dir, random_vectors)),
                tables["a"],
                out,
                args.dense_steps,
            )
            clear_caches()
            del task
            gc.collect()
    if "c" in args.only:
        section_c(args, tables["c"], notes, out)
    notes.append(f"load average (1, 5, 15 min) at the end {_load(os.getloadavg())}")
    for section in SECTIONS:
        if section in args.only:
            console.print(tables[section])
    for line in notes:
        console.print(line)
    if args.json:
        merged: dict[str, Any] = {}
        if args.json.exists():
            merged = json.loads(args.json.read_text())
            old_args = merged.get("args", {})
            if "only" in old_args:  # one args record for the whole run (older files)
                merged["args"] = dict.fromkeys(old_args["only"], old_args)
        merged.setdefault("args", {}).update(out.pop("args"))
        merged.setdefault("notes", {}).update(dict.fromkeys(args.only, notes))
        for section, rows in out.items():  # (a) keeps the indexes this run did not measure
            if section == "a" and isinstance(merged.get("a"), dict):
                merged["a"].update(rows)
            else:
                merged[section] = rows
        write_json(args.json, merged, default=str)


if __name__ == "__main__":
    main()
