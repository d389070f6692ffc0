"""The evaluation harness: :func:`evaluate` runs an agent for N episodes and returns metrics.

Functions: :func:`evaluate`, :func:`run_episode`, :func:`make_vector_env` (the vector env that
batched evaluation acts through).

Metrics (keys of the returned dict): ``em``, ``f1``, ``support_recall``, ``avg_steps``,
``avg_searches``, ``searches_by_source`` (mean per episode, by source), ``invalid_rate`` (invalid
turns / all turns), ``answered`` (share of episodes with an answer), ``reward`` (mean return),
``reward_terms`` (mean per-episode sum of each term in ``info["reward_terms"]``),
``format_issue_rate`` (turns with ``info["format_issues"]`` / all turns), ``truncated_rate``
(turns the agent's model cut at its token limit, or the env reported as ``truncated_turn`` / all
turns), ``episodes`` (finished), ``episodes_requested``, ``stopped`` (``None``, or
``"time_limit"`` when the time cap ended the run early), ``seconds``, ``episodes_per_s``,
``steps_per_s`` and, for agents that report token counts (:class:`~hopgym.agents.llm.LLMAgent`),
``tokens`` (``prompt``, ``cached``, ``completion``: sums over all turns). With no finished
episode the means are ``None``.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from hopgym.agents.scripted import Agent
from hopgym.rewards.scoring import exact_match, token_f1

__all__ = ["evaluate", "run_episode", "make_vector_env"]

#: The info key through which a scheduled sub-env hands its gold sample to the harness (removed
#: before the agent sees the info).
_SAMPLE_KEY = "eval_sample"


def _turn_info(agent: Any, slot: int) -> dict[str, Any] | None:
    info = getattr(agent, "turn_info", None)
    if isinstance(info, list) and slot < len(info) and isinstance(info[slot], dict):
        return {k: v for k, v in info[slot].items() if k != "token_ids"}
    return None


class _Tally:
    """One episode's outcome, turn by turn: what :func:`run_episode` returns."""

    def __init__(self, sample: Any, reset_info: dict[str, Any], record: bool) -> None:
        self.sample = sample
        self.seen: set[str] = set(reset_info.get("new_ids") or ())
        self.ret = 0.0
        self.steps = self.searches = self.invalid = self.issues = self.truncated = 0
        self.by_source: dict[str, int] = defaultdict(int)
        self.terms: dict[str, float] = defaultdict(float)
        self.tokens: dict[str, int] = defaultdict(int)
        self.answer: str | None = None
        self.turns: list[dict[str, Any]] | None = [] if record else None

    def step(self, action: Any, obs: Any, reward: float, info: dict[str, Any],
             agent_info: dict[str, Any] | None) -> None:
        self.steps += 1
        self.ret += float(reward)
        self.seen.update(info.get("new_ids") or ())
        for name, value in (info.get("reward_terms") or {}).items():
            self.terms[name] += float(value)
        kind = info.get("action_type")
        if kind == "search":
            self.searches += 1
            self.by_source[info.get("source", "?")] += 1
        elif kind == "invalid":
            self.invalid += 1
        self.issues += bool(info.get("format_issues"))
        cut = bool(info.get("truncated_turn")) or bool(agent_info and agent_info.get("truncated"))
        self.truncated += cut
        if agent_info:
            for key in ("prompt_tokens", "cached_tokens", "completion_tokens"):
                if isinstance(agent_info.get(key), int):
                    self.tokens[key] += agent_info[key]
        if info.get("answer") is not None:
            self.answer = info["answer"]
        if self.turns is not None:
            turn = {"action": action, "action_type": kind, "observation": obs,
                    "reward": float(reward), "new_ids": list(info.get("new_ids") or ()),
                    "invalid_action": info.get("invalid_action")}
            if info.get("format_issues"):
                turn["format_issues"] = [list(i) if isinstance(i, tuple) else i
                                         for i in info["format_issues"]]
            if agent_info:
                turn["agent"] = agent_info
            self.turns.append(turn)

    def result(self) -> dict[str, Any]:
        golds = list(self.sample.answers)
        support = set(self.sample.supporting_ids)
        answer = self.answer
        out = {
            "question_id": self.sample.id,
            "question": self.sample.question,
            "answers": golds,
            "prediction": answer,
            "em": exact_match(answer, golds) if answer is not None else 0.0,
            "f1": token_f1(answer, golds) if answer is not None else 0.0,
            "support_recall": len(support & self.seen) / len(support) if support else 1.0,
            "steps": self.steps,
            "searches": self.searches,
            "searches_by_source": dict(self.by_source),
            "invalid": self.invalid,
            "format_issues": self.issues,
            "truncated": self.truncated,
            "return": self.ret,
            "reward_terms": dict(self.terms),
        }
        if self.tokens:
            out["tokens"] = dict(self.tokens)
        if self.turns is not None:
            out["turns"] = self.turns
        return out


def run_episode(env: gym.Env, agent: Agent, *, seed: int | None = None,
                options: dict[str, Any] | None = None, record: bool = False,
                deadline: float | None = None) -> dict[str, Any] | None:
    """One episode; returns its outcome (and, with ``record``, every turn).

    With ``deadline`` (a :func:`time.perf_counter` value), the episode is abandoned and ``None``
    returned when the deadline passes before a turn.
    """
    agent.reset()
    obs, info = env.reset(seed=seed, options=options)
    tally = _Tally(env.unwrapped.sample, info, record)
    done = False
    while not done:
        if deadline is not None and time.perf_counter() >= deadline:
            return None
        action = agent.act(obs, info)
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        shown = env.unwrapped.transcript[-2 if obs else -1]["content"] if record else action
        tally.step(shown, obs, reward, info, _turn_info(agent, 0))
    return tally.result()


# ------------------------------------------------------------------------------ vector envs
def make_vector_env(env_fns: Sequence[Callable[[], gym.Env]]) -> gym.vector.VectorEnv:
    """The vector env that batched evaluation acts through.

    Gymnasium's ``SyncVectorEnv`` with ``autoreset_mode=SAME_STEP``: a sub-env that finishes hands
    back the next episode's prompt in the same step (its last observation and info are in
    ``infos["final_obs"]`` and ``infos["final_info"]``).
    """
    return gym.vector.SyncVectorEnv(list(env_fns),
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


class _Schedule:
    """The episodes to run, shared by the sub-envs: episode ``k`` asks question ``order[k % n]``
    with reset seed ``seed + k``, exactly as the single-env loop does."""

    def __init__(self, order: np.ndarray, episodes: int, seed: int) -> None:
        self.order, self.episodes, self.seed = order, episodes, seed
        self.next = 0

    def take(self) -> int | None:
        if self.next >= self.episodes:
            return None
        self.next += 1
        return self.next - 1


class _Scheduled(gym.Wrapper):
    """A sub-env that takes its next question from a :class:`_Schedule` at every reset; once the
    schedule is exhausted it runs spare episodes (``info["eval_episode"] == -1``) that do not
    count."""

    def __init__(self, env: gym.Env, schedule: _Schedule) -> None:
        super().__init__(env)
        self.schedule = schedule

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        k = self.schedule.take()
        n = len(self.schedule.order)
        index = int(self.schedule.order[(k or 0) % n])
        obs, info = self.env.reset(seed=self.schedule.seed + (k or 0), options={"index": index})
        info = dict(info)
        info["eval_episode"] = -1 if k is None else k
        info[_SAMPLE_KEY] = self.env.unwrapped.sample
        return obs, info


def _evaluate_vector(env_fn: Callable[[], gym.Env], agent: Any, num_envs: int, episodes: int,
                     seed: int, order: np.ndarray, emit: Callable[[dict[str, Any]], None],
                     deadline: float | None, record: bool) -> bool:
    """Run the episodes over ``num_envs`` sub-envs, acting with one ``act_batch`` per turn.
    Returns whether the deadline stopped the run."""
    from hopgym.agents.llm import unbatch_infos

    if not callable(getattr(agent, "act_batch", None)):
        raise ValueError(f"num_envs > 1 acts in batches: the agent needs act_batch(observations, "
                         f"infos, active=...), which {type(agent).__name__} lacks (the LLM "
                         f"agents have it; use num_envs=1 for scripted agents)")
    schedule = _Schedule(order, episodes, seed)
    venv = make_vector_env([lambda: _Scheduled(env_fn(), schedule) for _ in range(num_envs)])
    try:
        agent.reset()
        obs, infos = venv.reset(seed=seed)
        per = unbatch_infos(infos, num_envs)
        tallies: list[_Tally | None] = [None] * num_envs

        def start(i: int, info: dict[str, Any]) -> None:
            sample = info.pop(_SAMPLE_KEY, None)
            tallies[i] = _Tally(sample, info, record) if info.get("eval_episode", -1) >= 0 \
                else None

        for i in range(num_envs):
            start(i, per[i])
        finished = 0
        while finished < episodes:
            if deadline is not None and time.perf_counter() >= deadline:
                return True
            active = [t is not None for t in tallies]
            actions = agent.act_batch(list(obs), per, active=active)
            obs, rewards, terms, truncs, infos = venv.step(actions)
            per = unbatch_infos(infos, num_envs)
            ends = unbatch_infos(infos["final_info"], num_envs) if "final_info" in infos else None
            for i in range(num_envs):
                done = bool(terms[i] or truncs[i])
                tally = tallies[i]
                if tally is not None:
                    step_info = ends[i] if done and ends is not None else per[i]
                    step_obs = infos["final_obs"][i] if done else obs[i]
                    tally.step(actions[i], step_obs, float(rewards[i]), step_info,
                               _turn_info(agent, i))
                    if done:
                        emit(tally.result())
                        finished += 1
                if done:
                    start(i, per[i])
                else:
                    per[i].pop(_SAMPLE_KEY, None)
        return False
    finally:
        venv.close()


# ------------------------------------------------------------------------------ evaluate
def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def evaluate(
    env: gym.Env | Callable[[], gym.Env],
    agent: Agent,
    episodes: int = 100,
    seed: int = 0,
    *,
    trajectories: str | Path | None = None,
    progress: bool | Callable[[int], None] = False,
    time_limit: float | None = None,
    num_envs: int = 1,
) -> dict[str, Any]:
    """Run ``agent`` for ``episodes`` episodes and return aggregate metrics.

    Questions are a seeded permutation of the task's questions (distinct until the task runs out,
    then cycling), so every agent evaluated with the same ``seed`` sees the same questions —
    with any ``num_envs``.

    Args:
        env: a hopgym env (wrapped or not), or a function that makes one.
        agent: anything with ``reset()`` and ``act(observation, info)``; with ``num_envs > 1``
            also ``act_batch(observations, infos, active=...)`` (:class:`~hopgym.agents.llm.LLMAgent`).
        episodes: number of episodes.
        seed: seeds the question order and each episode's ``reset``.
        trajectories: optional ``.jsonl`` path; one line per finished episode with every turn,
            written as each episode ends.
        progress: ``True`` for a progress bar, or a callback called with the episode count.
        time_limit: seconds (wall clock) after which the run stops before the next turn; the
            episodes finished so far are scored and written, unfinished ones are dropped, and
            ``metrics["stopped"]`` is ``"time_limit"``.
        num_envs: episodes acted on side by side through :func:`make_vector_env`, one
            ``act_batch`` call per turn for all of them. The sub-envs are made with ``env``
            when it is a function, else with ``gym.make(env.spec)`` (wrappers added by hand
            after ``gym.make`` are not copied).

    Example:
        >>> import gymnasium as gym, hopgym
        >>> from hopgym.agents import OracleAgent
        >>> env = gym.make("hopgym/Tiny-v0")
        >>> evaluate(env, OracleAgent(env), episodes=6)["em"]
        1.0
    """
    if not isinstance(episodes, int) or episodes < 1:
        raise ValueError(f"episodes must be an int >= 1, got {episodes!r}")
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    if time_limit is not None and not (isinstance(time_limit, (int, float))
                                       and not isinstance(time_limit, bool)
                                       and time_limit > 0 and math.isfinite(time_limit)):
        raise ValueError(f"time_limit must be a number of seconds > 0 or None, got {time_limit!r}")
    if isinstance(env, gym.Env):
        env_fn: Callable[[], gym.Env] | None = None
        first = env
    else:
        if not callable(env):
            raise TypeError(f"env must be a gymnasium Env or a function that makes one, got "
                            f"{type(env).__name__}")
        env_fn, first = env, env()
    if num_envs > 1 and env_fn is None:
        if env.spec is None:
            raise ValueError("num_envs > 1 makes more envs: pass an env made by gym.make (its "
                             "spec is copied) or a function that makes one")
        spec = env.spec
        env_fn = lambda: gym.make(spec)  # noqa: E731 - one line, used once

    n = len(first.unwrapped.task.samples)
    order = np.random.default_rng(seed).permutation(n)
    results: list[dict[str, Any]] = []
    out_file = None
    if trajectories is not None:
        Path(trajectories).parent.mkdir(parents=True, exist_ok=True)
        out_file = open(trajectories, "w", encoding="utf-8")  # noqa: SIM115 - closed below
    bar = None
    if progress is True:
        from rich.progress import Progress

        bar = Progress(transient=True)
        bar.start()
        task_id = bar.add_task("episodes", total=episodes)

    def emit(res: dict[str, Any]) -> None:
        results.append(res)
        if out_file is not None:
            out_file.write(json.dumps(res, ensure_ascii=False, default=str) + "\n")
            out_file.flush()
        if bar is not None:
            bar.update(task_id, advance=1)
        elif callable(progress):
            progress(len(results))

    start = time.perf_counter()
    deadline = None if time_limit is None else start + float(time_limit)
    stopped = False
    try:
        if num_envs == 1:
            for i in range(episodes):
                res = run_episode(first, agent, seed=seed + i,
                                  options={"index": int(order[i % n])},
                                  record=out_file is not None, deadline=deadline)
                if res is None:
                    stopped = True
                    break
                emit(res)
        else:
            assert env_fn is not None
            stopped = _evaluate_vector(env_fn, agent, num_envs, episodes, seed, order, emit,
                                       deadline, out_file is not None)
    finally:
        if bar is not None:
            bar.stop()
        if out_file is not None:
            out_file.close()
    elapsed = max(time.perf_counter() - start, 1e-9)
    return _aggregate(results, episodes, elapsed, "time_limit" if stopped else None)


def _aggregate(results: list[dict[str, Any]], requested: int, elapsed: float,
               stopped: str | None) -> dict[str, Any]:
    done = len(results)
    steps = sum(r["steps"] for r in results)
    by_source: dict[str, float] = defaultdict(float)
    terms: dict[str, float] = defaultdict(float)
    tokens: dict[str, int] = defaultdict(int)
    for r in results:
        for k, v in r["searches_by_source"].items():
            by_source[k] += v / done
        for k, v in r["reward_terms"].items():
            terms[k] += v / done
        for k, v in (r.get("tokens") or {}).items():
            tokens[k.removesuffix("_tokens")] += v
    out = {
        "em": _mean([r["em"] for r in results]),
        "f1": _mean([r["f1"] for r in results]),
        "support_recall": _mean([r["support_recall"] for r in results]),
        "avg_steps": steps / done if done else None,
        "avg_searches": _mean([r["searches"] for r in results]),
        "searches_by_source": dict(by_source),
        "invalid_rate": sum(r["invalid"] for r in results) / steps if steps else None,
        "format_issue_rate": sum(r["format_issues"] for r in results) / steps if steps else None,
        "truncated_rate": sum(r["truncated"] for r in results) / steps if steps else None,
        "answered": _mean([float(r["prediction"] is not None) for r in results]),
        "reward": _mean([r["return"] for r in results]),
        "reward_terms": dict(terms),
        "episodes": done,
        "episodes_requested": requested,
        "stopped": stopped,
        "seconds": elapsed,
        "episodes_per_s": done / elapsed,
        "steps_per_s": steps / elapsed,
    }
    if tokens:
        out["tokens"] = dict(tokens)
    return out
