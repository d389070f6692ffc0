"""The evaluation harness: :func:`evaluate` runs an agent for N episodes and returns metrics.

Metrics (keys of the returned dict): ``em``, ``f1``, ``support_recall``, ``avg_steps``,
``avg_searches``, ``searches_by_source`` (mean per episode, by source), ``invalid_rate`` (invalid
turns / all turns), ``answered`` (share of episodes with an answer), ``reward`` (mean return),
``reward_terms`` (mean per-episode sum of each term in ``info["reward_terms"]``), ``episodes``,
``episodes_per_s``, ``steps_per_s``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from hopgym.agents.scripted import Agent
from hopgym.agents.trajectories import EpisodeRecorder, TrajectoryWriter, trajectory_header

__all__ = ["evaluate", "run_episode", "aggregate"]


def run_episode(env: gym.Env, agent: Agent, *, seed: int | None = None,
                options: dict[str, Any] | None = None, record: bool = False) -> dict[str, Any]:
    """One episode; returns its outcome (and, with ``record``, every turn and document shown).

    The result is an episode record of the trajectory format (:mod:`hopgym.agents.trajectories`).
    """
    agent.reset()
    obs, info = env.reset(seed=seed, options=options)
    recorder = EpisodeRecorder(env, turns=record)
    recorder.start(info, seed=seed)
    done = False
    while not done:
        action = agent.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        recorder.step(obs, reward, terminated, truncated, info)
        done = terminated or truncated
    return recorder.result()


def aggregate(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Means over episode results (of :func:`run_episode`, or read from a trajectory file).

    Returns the metrics of :func:`evaluate` except the speeds: ``em``, ``f1``, ``support_recall``,
    ``avg_steps``, ``avg_searches``, ``searches_by_source``, ``invalid_rate``, ``answered``,
    ``reward``, ``reward_terms``, ``episodes``.

    Example:
        >>> aggregate([{"em": 1.0, "f1": 1.0, "support_recall": 1.0, "steps": 3, "searches": 2,
        ...             "searches_by_source": {"local": 2}, "invalid": 1, "prediction": "x",
        ...             "return": 1.0, "reward_terms": {"outcome": 1.0}}])["invalid_rate"]
        0.3333333333333333
    """
    episodes = len(results)
    if episodes < 1:
        raise ValueError("aggregate needs at least one episode")
    steps = sum(r["steps"] for r in results)
    # Sum first, divide once: adding v / episodes per episode leaves float noise (3.0000000000000027).
    by_source: dict[str, list[float]] = defaultdict(list)
    terms: dict[str, list[float]] = defaultdict(list)
    for r in results:
        for k, v in r["searches_by_source"].items():
            by_source[k].append(v)
        for k, v in r["reward_terms"].items():
            terms[k].append(v)
    return {
        "em": float(np.mean([r["em"] for r in results])),
        "f1": float(np.mean([r["f1"] for r in results])),
        "support_recall": float(np.mean([r["support_recall"] for r in results])),
        "avg_steps": steps / episodes,
        "avg_searches": float(np.mean([r["searches"] for r in results])),
        "searches_by_source": {k: math.fsum(v) / episodes for k, v in by_source.items()},
        "invalid_rate": sum(r["invalid"] for r in results) / max(steps, 1),
        "answered": float(np.mean([r["prediction"] is not None for r in results])),
        "reward": float(np.mean([r["return"] for r in results])),
        "reward_terms": {k: math.fsum(v) / episodes for k, v in terms.items()},
        "episodes": episodes,
    }


def evaluate(
    env: gym.Env,
    agent: Agent,
    episodes: int = 100,
    seed: int = 0,
    *,
    trajectories: str | Path | None = None,
    agent_name: str | None = None,
    progress: bool | str | Callable[[int], None] = False,
) -> dict[str, Any]:
    """Run ``agent`` for ``episodes`` episodes and return aggregate metrics.

    Questions are a seeded permutation of the task's questions (distinct until the task runs out,
    then cycling), so every agent evaluated with the same ``seed`` sees the same questions.

    Args:
        env: a hopgym env (wrapped or not).
        agent: anything with ``reset()`` and ``act(observation, info)``.
        episodes: number of episodes.
        seed: seeds the question order and each episode's ``reset``.
        trajectories: optional ``.jsonl`` path: a header line, then one line per episode with
            every turn (the format of :mod:`hopgym.agents.trajectories`; ``hopgym view`` reads it).
        agent_name: what the trajectory file's header records as the agent (default: the
            agent's class name).
        progress: ``True`` or a label (``"Synthetic-v1 iterative"``) for a progress bar on a
            terminal's stderr (none when stderr is not a terminal), or a callback called with
            the episode count.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> from hopgym.agents import OracleAgent
        >>> env = gym.make("hopgym/Tiny-v1")
        >>> evaluate(env, OracleAgent(env), episodes=6)["em"]
        1.0
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    n = len(env.unwrapped.task.samples)
    order = np.random.default_rng(seed).permutation(n)
    results: list[dict[str, Any]] = []
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        writer = None
        if trajectories is not None:
            header = trajectory_header(env, agent, seed=seed, agent_name=agent_name)
            writer = stack.enter_context(TrajectoryWriter(trajectories, header))
        bar = None
        if progress is True or isinstance(progress, str):
            from rich.console import Console
            from rich.progress import Progress

            err = Console(stderr=True)
            if err.is_terminal:  # piped, a transient bar would only leave a blank line behind
                bar = stack.enter_context(Progress(console=err, transient=True))
                task_id = bar.add_task(progress if isinstance(progress, str) else "episodes",
                                       total=episodes)
        for i in range(episodes):
            res = run_episode(env, agent, seed=seed + i,
                              options={"index": int(order[i % n])}, record=writer is not None)
            if writer is not None:
                writer.write(res)
                # Keep only the numbers: 10k recorded episodes would otherwise stay in memory.
                for key in ("turns", "documents", "background_ids"):
                    res.pop(key, None)
            results.append(res)
            if bar is not None:
                bar.update(task_id, advance=1)
            elif callable(progress):
                progress(i + 1)
    elapsed = max(time.perf_counter() - start, 1e-9)
    metrics = aggregate(results)
    metrics["episodes_per_s"] = episodes / elapsed
    metrics["steps_per_s"] = sum(r["steps"] for r in results) / elapsed
    return metrics
