"""Rollouts at scale: in-process BM25 at 100k and 1M passages, and the query cache on GRPO groups.

    python benchmarks/rollout_scale.py                          # sections b and e, 100k and 1M
    python benchmarks/rollout_scale.py --only e --sizes 100000 --numba
    python benchmarks/rollout_scale.py --only b --sizes 100000

Sections (``--only``), lettered as the figures of the rollouts-at-scale work:

- ``e``: the oracle agent through the env (``make_task_env`` over the synthetic world, as
  ``gym.make("hopgym/Synthetic-v0")`` builds it) with the query cache off, so every search is
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

Section (a), steps/s against the number of envs, belongs with the batching vector env.
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
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hopgym.agents import OracleAgent  # noqa: E402
from hopgym.agents.evaluation import run_episode  # noqa: E402
from hopgym.corpora.retrieval import BM25Retriever, Retriever  # noqa: E402
from hopgym.corpora.sources import QATask, Source  # noqa: E402
from hopgym.corpora.synthetic import WorldConfig, build_task, clear_caches, generate_world  # noqa: E402
from hopgym.envs.actions import Search  # noqa: E402
from hopgym.envs.registration import make_task_env  # noqa: E402

console = Console(width=150)


# ------------------------------------------------------------------------------------ helpers
def task_with(task: QATask, retriever: Retriever) -> QATask:
    """``task`` whose one source searches ``retriever`` instead."""
    (name, src), = task.sources.items()
    return QATask(task.name, task.samples, {name: Source(name, retriever, src.cost,
                                                          src.description)}, task.documents)


def wrap(base: BM25Retriever, backend: str, cache: bool) -> BM25Retriever:
    """The same bm25s index searched with another backend, with or without a query cache."""
    r = BM25Retriever.from_bm25s(base.passages, base.bm25s_model, k1=base.k1, b=base.b,
                                 backend=backend)
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
    return lambda: [run_episode(env, agent, seed=seed + i, options={"index": int(order[i % count])})
                    for i in range(n)]


def per_query_cpu(search: Callable[[str, int], Any], asked: Sequence[tuple[str, int]],
                  repeats: int = 1) -> float:
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

    Path(cache_dir, "numba_exact.py").write_text(NUMBA_EXACT)
    env = {**os.environ, "NUMBA_CACHE_DIR": cache_dir, "PYTHONPATH": cache_dir}
    first, later = (float(subprocess.run([sys.executable, "-c", _FIRST_CALL], env=env, check=True,
                                         capture_output=True, text=True).stdout)
                    for _ in range(2))
    os.environ["NUMBA_CACHE_DIR"] = cache_dir
    sys.path.insert(0, cache_dir)
    from numba_exact import top_k  # type: ignore[import-not-found]

    return top_k, first, later


# ------------------------------------------------------------------------------------ section e
E_COLUMNS = ("passages", "engine", "per query", "oracle steps/s", "vs numpy", "vs rank-bm25",
             "how")
B_COLUMNS = ("passages", "engine", "noise", "cache", "steps/s", "speed-up", "hit rate",
             "transcripts")


def section_e(args: argparse.Namespace, task: QATask, table: Table, notes: list[str],
              out: dict[str, Any]) -> None:
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
    rows = [("sparse (default)", "sparse", "measured"),
            ("numpy (before)", "numpy", f"measured; estimated {estimate('numpy'):,.0f}"),
            ("rank-bm25", "rank_bm25", f"estimated from {len(sample)} queries "
                                       f"(index {rank_build:.0f} s)")]
    if args.numba:
        for name, how in numba_rows(base, asked, per_q).items():
            rates[name] = estimate(name)
            rows.append((name, name, how))
    for label, name, how in rows:
        table.add_row(f"{size:,}", label, f"{per_q[name] * 1e6:,.0f} µs", f"{rates[name]:,.0f}",
                      f"{rates[name] / rates['numpy']:.1f}x",
                      f"{rates[name] / rates['rank_bm25']:,.0f}x", how)
    out.setdefault("e", {})[str(size)] = {
        "steps_per_cpu_s": rates, "per_query_cpu_s": per_q, "searches_per_step": searches_step,
        "queries_sampled_for_rank_bm25": len(sample)}
    if args.check:
        notes.append(check_exact(size, task, sparse, numpy_r))


def numba_rows(base: BM25Retriever, asked: Sequence[tuple[str, int]],
               per_q: dict[str, float]) -> dict[str, str]:
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
    rows["numba exact"] = (f"first answer {first:.1f} s once (compiling), then {later:.1f} s "
                           f"in each process (on-disk cache)")
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
    return (f"{size:,} passages: sparse == numpy (passages, order, scores) for {same:,} of "
            f"{total:,} gold hop searches ({len(queries):,} queries x k = 3, 6, 12)")


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


def grpo_run(env: gym.Env, batches: int, questions: int, group: int, noise: float,
             seed: int) -> tuple[float, int, list[list[dict[str, str]]]]:
    """CPU seconds, steps and transcripts of ``batches`` x ``questions`` x ``group`` episodes."""
    n = len(env.unwrapped.task.samples)
    rng = np.random.default_rng(seed)
    plan = [(int(qi), b * 1000 + g) for b in range(batches)
            for qi in rng.choice(n, size=questions, replace=False) for g in range(group)]
    transcripts: list[list[dict[str, str]]] = []
    steps = 0
    gc.collect()
    t = time.process_time()
    for qi, s in plan:
        r = run_episode(env, NoisyOracle(env, seed=s, noise=noise), seed=s,
                        options={"index": qi})
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
                cpu, steps, transcripts = grpo_run(env, args.batches, args.questions,
                                                   args.group, noise, seed=0)
                results[cache] = (steps / cpu, r.cache_info(), transcripts)
            same = results[False][2] == results[True][2]
            for cache in (False, True):
                rate, info, _ = results[cache]
                table.add_row(f"{len(base):,}", backend + (" (default)" if backend == "sparse"
                                                            else " (before)"),
                              f"{noise:.0%}", "on" if cache else "off", f"{rate:,.0f}",
                              f"{rate / results[False][0]:.2f}x",
                              f"{info.hit_rate:.0%}" if cache else "-",
                              "identical" if same else "DIFFER")
            out.setdefault("b", {}).setdefault(str(len(base)), {})[f"{backend} {noise}"] = {
                "steps_per_cpu_s_off": results[False][0], "steps_per_cpu_s_on": results[True][0],
                "hit_rate": results[True][1].hit_rate, "transcripts_identical": same}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=["b", "e"], default=["b", "e"])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000],
                        help="corpus sizes (entities, one passage each)")
    parser.add_argument("--episodes", type=int, default=500, help="(e) timed oracle episodes")
    parser.add_argument("--rank-sample", type=int, default=20,
                        help="(e) oracle searches timed with rank-bm25")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="(e) skip the sparse == numpy check on every gold hop query")
    parser.add_argument("--numba", action="store_true",
                        help="(e) also time bm25s' numba backend and an exact numba kernel")
    parser.add_argument("--batches", type=int, default=4, help="(b) GRPO batches")
    parser.add_argument("--questions", type=int, default=16, help="(b) questions per batch")
    parser.add_argument("--group", type=int, default=8, help="(b) rollouts per question (G)")
    parser.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.3],
                        help="(b) shares of noisy searches")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    out: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "json"}}
    e_table = Table(title="(e) oracle agent, one core, query cache off: BM25 engines on the same "
                          "index and queries")
    b_table = Table(title=f"(b) GRPO-shaped: {args.batches} batches x {args.questions} questions "
                          f"x G={args.group}, noisy oracle, one core")
    for table, columns in ((e_table, E_COLUMNS), (b_table, B_COLUMNS)):
        for col in columns:
            table.add_column(col, justify="right")
    notes: list[str] = []
    for size in args.sizes:  # one world and index per size, for both sections
        config = WorldConfig(n_entities=size, n_questions=1000)
        t = time.perf_counter()
        generate_world(config)
        gen_s = time.perf_counter() - t
        t = time.perf_counter()
        task = build_task(config)
        build_s = time.perf_counter() - t
        notes.append(f"{size:,} passages: world {gen_s:.0f} s, index and query checks "
                     f"{build_s:.0f} s")
        console.print(notes[-1])
        if "e" in args.only:
            section_e(args, task, e_table, notes, out)
        if "b" in args.only:
            section_b(args, task, b_table, out)
        clear_caches()
        del task
        gc.collect()
    for table, section in ((e_table, "e"), (b_table, "b")):
        if section in args.only:
            console.print(table)
    for line in notes:
        console.print(line)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
