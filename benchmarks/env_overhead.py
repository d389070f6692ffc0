"""Env overhead: what the env costs around the agent's turn and around its searches.

    python benchmarks/env_overhead.py                       # 100k passages (the target's size)
    python benchmarks/env_overhead.py --passages 5000       # a quick run
    python benchmarks/env_overhead.py --json benchmarks/results/env_overhead.json

Two side-by-side measurements, client CPU time (``time.process_time``), one thread:

1. **Think-only turn**: ``step("<think>…</think>")`` through ``gym.make("hopgym/Tiny-v1")`` with
   its default wrappers (what ``gym.make`` returns: Gymnasium's ``OrderEnforcing`` and
   ``PassiveEnvChecker`` around the ``reward="default"`` preset, ``OutcomeReward``; the bare
   ``MultiHopQAEnv`` is measured too) against a no-tag
   turn of SkyRL-gym's ``SearchEnv`` (``skyrl-gym==0.4.0``: it parses, finds no tag, calls no
   server). Interleaved blocks; the median block is reported. Without ``skyrl-gym`` installed
   the bare ``MultiHopQAEnv`` is the other side, and the script says so. Target: hopgym's turn
   costs no more than SkyRL's.
2. **Env overhead over raw search**: the oracle agent's episodes through
   ``gym.make("hopgym/Synthetic-v1")`` at ``--passages`` passages (query cache off, so every
   search is scored); the time of ``reset`` + ``step`` minus the time inside the retriever's
   ``search`` calls, as a share of the latter (the agent's own time is not counted). The env is
   what ``gym.make`` returns (the same wrappers as above), reset with ``reset(seed=episode)``
   and stepped with the agent's structured actions. The share of Gymnasium's seeding in it
   (``gymnasium.utils.seeding.np_random(seed)``, which ``reset(seed=...)`` runs) is printed
   beside it twice: timed alone in a loop, and as the overhead of the same questions' episodes
   reset by id (``options={"question_id": ...}``: no seeding and no draw), with caches as cold as
   between searches. Target: at most 25% at 100k passages.

``--json`` writes both measurements to a results file, with the machine's load average (1, 5
and 15 minutes) before and after the run: the figures are CPU times of one thread, but a busy
machine slows both sides' caches, so compare only ratios measured in one run.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
from gymnasium.utils import seeding  # noqa: E402

import hopgym  # noqa: E402, F401
from hopgym._atomic import check_writable, write_json  # noqa: E402
from hopgym.agents import OracleAgent  # noqa: E402
from hopgym.tasks.synthetic import clear_caches  # noqa: E402

THINK = "<think>I should look this up first.</think>"


def _hopgym_turns(n: int) -> float:
    env = gym.make("hopgym/Tiny-v1", max_turns=n + 1)
    env.reset(seed=0)
    step = env.step
    t0 = time.process_time()
    for _ in range(n):
        step(THINK)
    return (time.process_time() - t0) / n


def _bare_turns(n: int) -> float:
    env = gym.make("hopgym/Tiny-v1", max_turns=n + 1, reward=None).unwrapped
    env.reset(seed=0)
    step = env.step
    t0 = time.process_time()
    for _ in range(n):
        step(THINK)
    return (time.process_time() - t0) / n


def _skyrl_turns(n: int) -> float:
    from skyrl_gym.envs.search.env import SearchEnv, SearchEnvConfig

    env = SearchEnv(
        SearchEnvConfig(log_requests=False),
        extras={"reward_spec": {"ground_truth": {"target": ["x"]}}, "max_turns": n + 1},
    )
    env.init([{"role": "user", "content": "question"}])
    step = env.step
    t0 = time.process_time()
    for _ in range(n):
        step(THINK)
    return (time.process_time() - t0) / n


def think_turns(blocks: int, n: int) -> tuple[str, float, float]:
    try:
        import skyrl_gym  # noqa: F401

        other, name = _skyrl_turns, "SkyRL-gym SearchEnv no-tag turn"
    except ImportError:
        other, name = _bare_turns, "bare MultiHopQAEnv (skyrl-gym not installed)"
    ours, theirs = [], []
    for _ in range(blocks):  # interleaved, so drift of the machine hits both sides
        ours.append(_hopgym_turns(n))
        theirs.append(other(n))
    return name, statistics.median(ours), statistics.median(theirs)


def oracle_overhead(passages: int, episodes: int) -> dict[str, Any]:
    env = gym.make("hopgym/Synthetic-v1", n_entities=passages, n_questions=1000)
    searched = [0.0]
    for source in env.unwrapped.task.sources.values():
        retriever = source.retriever
        retriever.configure_cache(0, 0)
        search = retriever.search

        def timed(query: str, k: int, _search: Any = search) -> Any:
            t0 = time.process_time()
            try:
                return _search(query, k)
            finally:
                searched[0] += time.process_time() - t0

        retriever.search = timed  # type: ignore[method-assign]
    n_passages = len(env.unwrapped.task.documents or ()) or passages
    agent = OracleAgent(env)

    def run(resets: list[dict[str, Any]]) -> tuple[float, float, int, list[str]]:
        """The oracle's episodes from these resets after 5 warm-up ones: (env s, search s, steps,
        question ids)."""
        in_env, steps, asked = 0.0, 0, []
        for ep, reset in enumerate(resets):
            if ep == 5:  # after a warm-up
                in_env, searched[0], steps, asked = 0.0, 0.0, 0, []
            t0 = time.process_time()
            obs, info = env.reset(**reset)
            in_env += time.process_time() - t0
            asked.append(info["question_id"])
            agent.reset()
            done = False
            while not done:
                action = agent.act(obs, info)
                t0 = time.process_time()
                obs, _, term, trunc, info = env.step(action)
                in_env += time.process_time() - t0
                steps += 1
                done = term or trunc
        return in_env, searched[0], steps, asked

    in_env, search_s, steps, asked = run([{"seed": ep} for ep in range(episodes + 5)])
    # The same questions again, chosen by id: no seeding and no draw in reset. The difference is
    # what Gymnasium's seeding (and the draw) costs in the loop, caches as cold as they are there.
    warm = [{"options": {"question_id": q}} for q in asked[:5]]
    unseeded_env, unseeded_search, _, _ = run(warm + [{"options": {"question_id": q}} for q in asked])
    env.close()
    clear_caches()
    t0 = time.process_time()
    for ep in range(5, episodes + 5):
        seeding.np_random(ep)
    seed_s = time.process_time() - t0
    return {
        "passages": n_passages,
        "episodes": episodes,
        "steps": steps,
        "env_ms_per_episode": 1e3 * in_env / episodes,
        "search_ms_per_episode": 1e3 * search_s / episodes,
        "overhead": (in_env - search_s) / search_s if search_s else float("nan"),
        "seeding_ms_per_episode": 1e3 * seed_s / episodes,
        "seeding_share_of_search": seed_s / search_s if search_s else float("nan"),
        "unseeded": {
            "env_ms_per_episode": 1e3 * unseeded_env / episodes,
            "search_ms_per_episode": 1e3 * unseeded_search / episodes,
            "overhead": (unseeded_env - unseeded_search) / unseeded_search
            if unseeded_search
            else float("nan"),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=100_000, help="synthetic world size (entities)")
    parser.add_argument("--episodes", type=int, default=200, help="oracle episodes")
    parser.add_argument("--turns", type=int, default=20_000, help="think-only turns per block")
    parser.add_argument("--blocks", type=int, default=5, help="interleaved blocks per side")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    if args.json is not None:
        check_writable(args.json)  # before the measuring, not after it

    load_before = os.getloadavg()
    name, ours, theirs = think_turns(args.blocks, args.turns)
    bare = statistics.median(_bare_turns(args.turns) for _ in range(args.blocks))
    print("think-only turn, client CPU per turn (median of interleaved blocks)")
    print(f"  hopgym gym.make('hopgym/Tiny-v1'), default wrappers: {ours * 1e6:7.2f} us")
    print(f"  hopgym bare MultiHopQAEnv:                          {bare * 1e6:7.2f} us")
    print(f"  {name}: {theirs * 1e6:7.2f} us")
    print(f"  ratio hopgym / other: {ours / theirs:.2f} wrapped, {bare / theirs:.2f} bare  (target <= 1.00)")
    m = oracle_overhead(args.passages, args.episodes)
    print(f"oracle episodes through gym.make('hopgym/Synthetic-v1'), {m['passages']:,} passages, cache off")
    print(f"  episodes {m['episodes']}, steps {m['steps']}")
    print(f"  env time per episode:    {m['env_ms_per_episode']:8.3f} ms")
    print(f"  raw search per episode:  {m['search_ms_per_episode']:8.3f} ms")
    print(f"  env overhead over raw search: {m['overhead']:.1%}  (target <= 25%)")
    print(
        f"  of which Gymnasium's seeding in reset(seed=...): {m['seeding_ms_per_episode']:.3f} ms "
        f"per episode, {m['seeding_share_of_search']:.1%} of the raw search (alone, in a loop)"
    )
    print(
        f"  the same questions reset by id (no seeding, no draw): env overhead "
        f"{m['unseeded']['overhead']:.1%} over raw search"
    )
    if args.json is not None:
        result = {
            "python": platform.python_version(),
            "load_average": {"before": list(load_before), "after": list(os.getloadavg())},
            "wrappers": "gym.make's: OrderEnforcing, PassiveEnvChecker, OutcomeReward (reward='default')",
            "think_only": {
                "turns": args.turns,
                "blocks": args.blocks,
                "us_per_turn": {
                    "hopgym, default wrappers": ours * 1e6,
                    "hopgym, bare env": bare * 1e6,
                    name: theirs * 1e6,
                },
            },
            "oracle": m,
        }
        write_json(args.json, result)


if __name__ == "__main__":
    main()
