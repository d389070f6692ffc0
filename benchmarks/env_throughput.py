"""Env throughput: oracle steps/s and episodes/s by corpus size, bm25s vs rank-bm25 side by side.

    python benchmarks/env_throughput.py                      # 1k, 100k and 1M passages
    python benchmarks/env_throughput.py --sizes 1000 100000 --episodes 300

For each corpus size it times world generation and index builds, then runs the oracle agent (which
searches once per hop, routes and answers) through ``gym.make("hopgym/Synthetic-v1")`` with each
BM25 engine and prints the ratio, with the query cache off (every search is scored; the world's
query checks would otherwise leave the oracle's first searches cached). Run with one thread (the
script sets it) on an idle machine. ``benchmarks/rollout_scale.py`` compares the BM25 backends per
core and measures the cache.
rank-bm25 scores every passage in Python, so above 10k passages it runs only ``--slow-episodes``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import time  # noqa: E402

import gymnasium as gym  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import hopgym  # noqa: E402, F401
from hopgym.agents import OracleAgent, evaluate  # noqa: E402
from hopgym.corpora.synthetic import WorldConfig, generate_world
from hopgym.tasks.synthetic import build_task, clear_caches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1_000, 100_000, 1_000_000],
        help="corpus sizes in passages (entities, one passage each)",
    )
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument(
        "--slow-episodes", type=int, default=20, help="episodes for rank-bm25 above 10k passages"
    )
    parser.add_argument("--engines", nargs="+", default=["bm25s", "rank_bm25"])
    args = parser.parse_args()

    table = Table(title="oracle agent through gym.make('hopgym/Synthetic-v1'), 1 thread")
    for col in (
        "passages",
        "world gen s",
        "engine",
        "index s",
        "episodes",
        "steps/s",
        "episodes/s",
        "vs rank-bm25",
    ):
        table.add_column(col, justify="right")
    for size in args.sizes:
        config = WorldConfig(n_entities=size, n_questions=1000)
        t0 = time.perf_counter()
        world = generate_world(config)
        gen_s = time.perf_counter() - t0
        rates: dict[str, float] = {}
        rows = []
        for engine in args.engines:
            t0 = time.perf_counter()
            build_task(config, engine)
            index_s = time.perf_counter() - t0
            env = gym.make("hopgym/Synthetic-v1", n_entities=size, engine=engine)
            for source in env.unwrapped.task.sources.values():
                source.retriever.configure_cache(0, 0)
            episodes = args.episodes
            if engine == "rank_bm25" and size > 10_000:
                episodes = args.slow_episodes
            evaluate(env, OracleAgent(env), episodes=min(20, episodes), seed=1)  # warm-up
            m = evaluate(env, OracleAgent(env), episodes=episodes, seed=0)
            rates[engine] = m["steps_per_s"]
            rows.append(
                [
                    f"{len(world.passages):,}",
                    f"{gen_s:.1f}",
                    engine,
                    f"{index_s:.1f}",
                    str(episodes),
                    f"{m['steps_per_s']:,.0f}",
                    f"{m['episodes_per_s']:,.0f}",
                ]
            )
            env.close()
        for row in rows:
            base = rates.get("rank_bm25")
            row.append(f"{rates[row[2]] / base:.1f}x" if base else "-")
            table.add_row(*row)
        clear_caches()
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
