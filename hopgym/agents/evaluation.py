"""The evaluation harness: :func:`evaluate` runs an agent for N episodes and returns metrics.

Metrics (keys of the returned dict): ``em``, ``f1``, ``support_recall``, ``avg_steps``,
``avg_searches``, ``searches_by_source`` (mean per episode, by source), ``invalid_rate`` (invalid
turns / all turns), ``answered`` (share of episodes with an answer), ``reward`` (mean return),
``reward_terms`` (mean per-episode sum of each term in ``info["reward_terms"]``), ``episodes``,
``episodes_per_s``, ``steps_per_s``.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from hopgym.agents.scripted import Agent
from hopgym.rewards.scoring import exact_match, token_f1

__all__ = ["evaluate", "run_episode"]


def run_episode(env: gym.Env, agent: Agent, *, seed: int | None = None,
                options: dict[str, Any] | None = None, record: bool = False) -> dict[str, Any]:
    """One episode; returns its outcome (and, with ``record``, every turn)."""
    agent.reset()
    obs, info = env.reset(seed=seed, options=options)
    sample = env.unwrapped.sample
    seen: set[str] = set(info.get("new_ids") or ())
    ret, steps, searches, invalid = 0.0, 0, 0, 0
    by_source: dict[str, int] = defaultdict(int)
    terms: dict[str, float] = defaultdict(float)
    answer: str | None = None
    turns: list[dict[str, Any]] = []
    done = False
    while not done:
        action = agent.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        steps += 1
        ret += float(reward)
        seen.update(info.get("new_ids") or ())
        for name, value in (info.get("reward_terms") or {}).items():
            terms[name] += float(value)
        kind = info.get("action_type")
        if kind == "search":
            searches += 1
            by_source[info.get("source", "?")] += 1
        elif kind == "invalid":
            invalid += 1
        if info.get("answer") is not None:
            answer = info["answer"]
        if record:
            turns.append({"action": env.unwrapped.transcript[-2 if obs else -1]["content"],
                          "action_type": kind, "observation": obs, "reward": float(reward),
                          "new_ids": list(info.get("new_ids") or ()),
                          "invalid_action": info.get("invalid_action")})
    golds = list(sample.answers)
    support = set(sample.supporting_ids)
    out = {
        "question_id": sample.id,
        "question": sample.question,
        "answers": golds,
        "prediction": answer,
        "em": exact_match(answer, golds) if answer is not None else 0.0,
        "f1": token_f1(answer, golds) if answer is not None else 0.0,
        "support_recall": len(support & seen) / len(support) if support else 1.0,
        "steps": steps,
        "searches": searches,
        "searches_by_source": dict(by_source),
        "invalid": invalid,
        "return": ret,
        "reward_terms": dict(terms),
    }
    if record:
        out["turns"] = turns
    return out


def evaluate(
    env: gym.Env,
    agent: Agent,
    episodes: int = 100,
    seed: int = 0,
    *,
    trajectories: str | Path | None = None,
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
        trajectories: optional ``.jsonl`` path; one line per episode with every turn.
        progress: ``True`` or a label (``"Synthetic-v0 iterative"``) for a progress bar on a
            terminal's stderr (none when stderr is not a terminal), or a callback called with
            the episode count.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> from hopgym.agents import OracleAgent
        >>> env = gym.make("hopgym/Tiny-v0")
        >>> evaluate(env, OracleAgent(env), episodes=6)["em"]
        1.0
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    n = len(env.unwrapped.task.samples)
    order = np.random.default_rng(seed).permutation(n)
    results: list[dict[str, Any]] = []
    out_file = None
    if trajectories is not None:
        Path(trajectories).parent.mkdir(parents=True, exist_ok=True)
        out_file = open(trajectories, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    bar = None
    if progress is True or isinstance(progress, str):
        from rich.console import Console
        from rich.progress import Progress

        err = Console(stderr=True)
        if err.is_terminal:  # piped, a transient bar would only leave a blank line behind
            bar = Progress(console=err, transient=True)
            bar.start()
            task_id = bar.add_task(progress if isinstance(progress, str) else "episodes",
                                   total=episodes)
    start = time.perf_counter()
    try:
        for i in range(episodes):
            res = run_episode(env, agent, seed=seed + i,
                              options={"index": int(order[i % n])}, record=out_file is not None)
            results.append(res)
            if out_file is not None:
                out_file.write(json.dumps(res, ensure_ascii=False) + "\n")
            if bar is not None:
                bar.update(task_id, advance=1)
            elif callable(progress):
                progress(i + 1)
    finally:
        if bar is not None:
            bar.stop()
        if out_file is not None:
            out_file.close()
    elapsed = max(time.perf_counter() - start, 1e-9)
    steps = sum(r["steps"] for r in results)
    by_source: dict[str, float] = defaultdict(float)
    terms: dict[str, float] = defaultdict(float)
    for r in results:
        for k, v in r["searches_by_source"].items():
            by_source[k] += v / episodes
        for k, v in r["reward_terms"].items():
            terms[k] += v / episodes
    return {
        "em": float(np.mean([r["em"] for r in results])),
        "f1": float(np.mean([r["f1"] for r in results])),
        "support_recall": float(np.mean([r["support_recall"] for r in results])),
        "avg_steps": steps / episodes,
        "avg_searches": float(np.mean([r["searches"] for r in results])),
        "searches_by_source": dict(by_source),
        "invalid_rate": sum(r["invalid"] for r in results) / max(steps, 1),
        "answered": float(np.mean([r["prediction"] is not None for r in results])),
        "reward": float(np.mean([r["return"] for r in results])),
        "reward_terms": dict(terms),
        "episodes": episodes,
        "episodes_per_s": episodes / elapsed,
        "steps_per_s": steps / elapsed,
    }
