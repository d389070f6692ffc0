"""Benchmark classic RL algorithms on featurized envs: :func:`bench_rl`, ``hopgym bench-rl``.

Functions: :func:`bench_rl` (train + evaluate, returns a JSON-able dict), :func:`make_model`,
:func:`evaluate_model`, :func:`render_table`, :func:`plot_curves`. Classes: :class:`PolicyAgent`,
:class:`MaskedRandomAgent`. The ``hopgym bench-rl`` command is :mod:`hopgym.cli.bench_rl`.

Stable-Baselines3 algorithms (``ppo``, ``a2c``, ``dqn``; ``maskppo`` = sb3-contrib's MaskablePPO)
train on ``--env`` (a :class:`~hopgym.envs.featurized.FeaturizedEnv`, default
``hopgym/SyntheticFeaturized-v0``) for each seed; every policy is then evaluated with
:func:`hopgym.agents.evaluate` on the same seeded questions as the baselines: ``masked-random`` (uniform
over the featurized env's sensible actions) and the scripted text agents (``random``,
``iterative``, ``oracle`` …) run on the wrapped text env, same reward preset. Learning curves
(EM on a fixed question sample every ``eval_every`` steps) go to a PNG.

Heavy imports (torch, stable-baselines3, matplotlib) happen inside the functions; importing this
module is cheap, so ``hopgym --help`` stays fast. Needs the ``sb3`` extra.

    hopgym bench-rl --env hopgym/SyntheticFeaturized-v0 --algos ppo,a2c,dqn --seeds 0,1,2 \\
        --timesteps 60000 --json results.json --plot curves.png
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from hopgym._atomic import save_figure
from hopgym.errors import DependencyNotInstalled, InvalidOptionError, InvalidOptionTypeError

if TYPE_CHECKING:
    from stable_baselines3.common.vec_env import VecEnv

__all__ = [
    "ALGOS",
    "DEFAULT_ENV",
    "HYPERPARAMS",
    "N_ENVS",
    "bench_rl",
    "make_model",
    "evaluate_model",
    "render_table",
    "plot_curves",
    "PolicyAgent",
    "MaskedRandomAgent",
]

#: Algorithms :func:`make_model` knows.
ALGOS = ("ppo", "a2c", "dqn", "maskppo")
DEFAULT_ENV = "hopgym/SyntheticFeaturized-v0"
DEFAULT_BASELINES = ("masked-random", "random", "iterative")

#: Hyper-parameters per algorithm (SB3 defaults where not listed). Chosen on the default synthetic
#: world (benchmarks/sb3_learning.py) so that every algorithm learns within 60k steps on one CPU
#: thread, on every seed we tried.
HYPERPARAMS: dict[str, dict[str, Any]] = {
    "ppo": {
        "n_steps": 256,
        "batch_size": 256,
        "n_epochs": 4,
        "learning_rate": 1e-3,
        "ent_coef": 0.01,
        "gamma": 0.99,
    },
    "maskppo": {
        "n_steps": 256,
        "batch_size": 256,
        "n_epochs": 4,
        "learning_rate": 1e-3,
        "ent_coef": 0.01,
        "gamma": 0.99,
    },
    # A2C (8 envs x 8 steps, GAE 1.0) stalled on 2 of 3 seeds at EM ~0.15, the policy that answers
    # a comparison's first option at once; 16 envs x 5 steps with GAE 0.95 escape it.
    "a2c": {"n_steps": 5, "learning_rate": 1e-3, "ent_coef": 0.02, "gae_lambda": 0.95, "gamma": 0.99},
    # DQN cannot use the action masks; with lr 5e-4 and gamma 0.99 its Q-values drifted towards
    # empty (invalid, reward-free) slots and EM collapsed after 10k steps. Episodes last at most
    # a few turns, so a short horizon (gamma 0.9) costs nothing and keeps the targets tame.
    "dqn": {
        "learning_rate": 1e-4,
        "buffer_size": 50_000,
        "learning_starts": 2_000,
        "batch_size": 64,
        "train_freq": 2,
        "target_update_interval": 500,
        "exploration_fraction": 0.3,
        "exploration_final_eps": 0.05,
        "gamma": 0.9,
    },
}
#: Parallel envs per algorithm (a ``DummyVecEnv``): one policy forward serves several env steps,
#: which is most of the speed on one CPU thread.
N_ENVS: dict[str, int] = {"ppo": 8, "maskppo": 8, "a2c": 16, "dqn": 4}


def _import_sb3() -> Any:
    try:
        import stable_baselines3
    except ImportError:
        raise DependencyNotInstalled.for_extra("stable-baselines3", "sb3") from None
    return stable_baselines3


def _unwrap_featurized(env: gym.Env) -> Any:
    from hopgym.envs.featurized import FeaturizedEnv

    layer = env  # the FeaturizedEnv wrapper, under gym.make's own wrappers
    while not isinstance(layer, FeaturizedEnv):
        if not isinstance(layer, gym.Wrapper):
            raise InvalidOptionTypeError(
                f"bench-rl needs a featurized env (e.g. {DEFAULT_ENV}); "
                f"{type(layer).__name__} has text actions"
            )
        layer = layer.env
    return layer


def make_model(
    algo: str,
    env: gym.Env | VecEnv,
    seed: int,
    *,
    hyperparams: Mapping[str, Any] | None = None,
    device: str = "cpu",
) -> Any:
    """An SB3 model with an MLP policy for ``env``.

    Args:
        algo: one of :data:`ALGOS`.
        env: a featurized env (or a vector env of them).
        seed: the model's seed (network init, exploration, minibatches).
        hyperparams: overrides of :data:`HYPERPARAMS` for this algorithm.
        device: torch device.
    """
    if algo not in ALGOS:
        raise InvalidOptionError(f"unknown algorithm {algo!r}; choose from {', '.join(ALGOS)}")
    sb3 = _import_sb3()
    kwargs = {**HYPERPARAMS[algo], **dict(hyperparams or {})}
    if algo == "maskppo":
        try:
            from sb3_contrib import MaskablePPO
        except ImportError:
            raise DependencyNotInstalled.for_extra("sb3-contrib", "sb3") from None
        cls: Any = MaskablePPO
    else:
        cls = {"ppo": sb3.PPO, "a2c": sb3.A2C, "dqn": sb3.DQN}[algo]
    return cls("MlpPolicy", env, seed=seed, device=device, verbose=0, **kwargs)


class PolicyAgent:
    """A trained SB3 model as a hopgym :class:`~hopgym.agents.scripted.Agent` (featurized env).

    ``act`` returns the model's greedy action index (with the env's action mask for MaskablePPO).
    """

    def __init__(self, model: Any, env: gym.Env, *, deterministic: bool = True) -> None:
        self.model = model
        self.env = env
        self.deterministic = deterministic
        self.masked = type(model).__name__ == "MaskablePPO"
        self._obs: np.ndarray | None = None

    def reset(self) -> None:
        self._obs = None

    def act(self, observation: Any, info: dict[str, Any]) -> int:
        obs = observation
        if not isinstance(obs, np.ndarray):
            # evaluate() passes what reset/step returned: the feature vector.
            obs = np.asarray(obs, dtype=np.float32)
        if self.masked:
            action, _ = self.model.predict(
                obs, deterministic=self.deterministic, action_masks=info["action_mask"]
            )
        else:
            action, _ = self.model.predict(obs, deterministic=self.deterministic)
        return int(action)


class MaskedRandomAgent:
    """Uniformly random over the featurized env's sensible actions (its action mask)."""

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self) -> None:
        pass

    def act(self, observation: Any, info: dict[str, Any]) -> int:
        return int(self.rng.choice(np.flatnonzero(info["action_mask"])))


def evaluate_model(model: Any, env: gym.Env, episodes: int, seed: int) -> dict[str, Any]:
    """:func:`hopgym.agents.evaluate` of ``model``'s greedy policy on ``env`` (a featurized env)."""
    from hopgym.agents.evaluation import evaluate

    return evaluate(env, PolicyAgent(model, env), episodes=episodes, seed=seed)


def _curve_callback(
    env: gym.Env,
    every: int,
    episodes: int,
    seed: int,
    points: list[tuple[int, float]],
    tick: Callable[[int], None] | None,
) -> Any:
    from stable_baselines3.common.callbacks import BaseCallback

    class _Curve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self._next = every

        def _on_training_start(self) -> None:
            points.append((0, evaluate_model(self.model, env, episodes, seed)["em"]))

        def _on_step(self) -> bool:
            if tick is not None:
                tick(self.training_env.num_envs)  # an increment
            if every > 0 and self.num_timesteps >= self._next:
                self._next += every
                points.append((self.num_timesteps, evaluate_model(self.model, env, episodes, seed)["em"]))
            return True

    return _Curve()


def _set_threads(threads: int | None) -> None:
    if threads is None:
        return
    import torch

    torch.set_num_threads(int(threads))


def bench_rl(
    env_id: str = DEFAULT_ENV,
    *,
    env_kwargs: Mapping[str, Any] | None = None,
    eval_env_kwargs: Mapping[str, Any] | None = None,
    algos: Sequence[str] = ("ppo", "a2c", "dqn"),
    seeds: Sequence[int] = (0, 1, 2),
    timesteps: int = 60_000,
    eval_episodes: int = 300,
    eval_seed: int = 10_000,
    baselines: Sequence[str] = DEFAULT_BASELINES,
    eval_every: int | None = None,
    curve_episodes: int = 100,
    hyperparams: Mapping[str, Mapping[str, Any]] | None = None,
    n_envs: int | Mapping[str, int] | None = None,
    threads: int | None = 1,
    progress: bool = True,
    plot: str | Path | None = None,
) -> dict[str, Any]:
    """Train each algorithm for each seed, evaluate policies and baselines, return the results.

    One flat sequence (check the arguments, train every algorithm for every seed, evaluate on the
    same questions, the baselines, the summary), kept in one function so that the order in which
    seeds are drawn and envs are built reads top to bottom.

    Args:
        env_id: a featurized env id.
        env_kwargs: keyword arguments for ``gym.make(env_id, ...)`` (training).
        eval_env_kwargs: keyword arguments of the evaluation env (default ``env_kwargs``), e.g.
            ``{"base_kwargs": {"split": "test"}}`` to evaluate on held-out questions.
        algos: algorithms from :data:`ALGOS`.
        seeds: one training run per algorithm and seed.
        timesteps: environment steps per training run.
        eval_episodes: episodes of the final evaluation (the same questions for every row).
        eval_seed: seed of the evaluation question order.
        baselines: ``masked-random`` and scripted text agents (``random``, ``iterative``,
            ``oracle``, ``single-search``, ``direct``).
        eval_every: steps between learning-curve points (default ``timesteps // 10``; 0: none).
        curve_episodes: episodes per learning-curve point.
        hyperparams: per-algorithm overrides of :data:`HYPERPARAMS`.
        n_envs: parallel training envs (an int for all, or per algorithm; default
            :data:`N_ENVS`).
        threads: torch threads (1 is fastest for these small MLPs); ``None`` leaves it.
        progress: show rich progress bars.
        plot: write the learning curves to this PNG.

    Returns:
        ``{"env", "env_kwargs", "timesteps", "eval_episodes", "runs": [...], "summary": {...},
        "baselines": {...}}``; each run has ``algo``, ``seed``, ``em``, ``f1``, ``reward``,
        ``avg_searches``, ``avg_steps``, ``invalid_rate``, ``train_s``, ``train_steps_per_s``
        and ``curve`` (``[[timesteps, em], ...]``); ``summary`` has per algorithm the mean and
        standard deviation over seeds.

    Example:
        >>> out = bench_rl("hopgym/SyntheticFeaturized-v0", algos=["ppo"], seeds=[0],
        ...                timesteps=256, eval_episodes=5, baselines=[], eval_every=0,
        ...                progress=False, hyperparams={"ppo": {"n_steps": 128}})  # doctest: +SKIP
        >>> sorted(out["summary"])  # doctest: +SKIP
        ['ppo']
    """
    import hopgym  # noqa: F401 - registers the ids
    from hopgym.agents.evaluation import evaluate
    from hopgym.agents.scripted import make_agent

    unknown = [a for a in algos if a not in ALGOS]
    if unknown:
        raise InvalidOptionError(f"unknown algorithm(s) {unknown}; choose from {', '.join(ALGOS)}")
    if timesteps < 1:
        raise InvalidOptionError(f"timesteps must be >= 1, got {timesteps}")
    if eval_episodes < 1:
        raise InvalidOptionError(f"eval_episodes must be >= 1, got {eval_episodes}")
    if algos:
        _import_sb3()
        from stable_baselines3.common.env_util import make_vec_env
    _set_threads(threads if algos else None)
    kwargs = dict(env_kwargs or {})
    every = max(timesteps // 10, 1) if eval_every is None else eval_every
    hp = {k: dict(v) for k, v in (hyperparams or {}).items()}

    eval_kwargs = dict(kwargs if eval_env_kwargs is None else eval_env_kwargs)

    def make() -> gym.Env:
        return gym.make(env_id, **kwargs)

    def make_eval() -> gym.Env:
        return gym.make(env_id, **eval_kwargs)

    _unwrap_featurized(make())
    _unwrap_featurized(make_eval())
    runs: list[dict[str, Any]] = []
    base_rows: dict[str, dict[str, Any]] = {}
    bar, tasks = _progress(progress)
    label = env_id.removeprefix("hopgym/")  # progress bars say which env and agent they are for
    try:
        for name in baselines:
            env = make_eval()
            feat = _unwrap_featurized(env)
            task_id = tasks(f"{label} {name}", eval_episodes)
            tick = _ticker(bar, task_id, cumulative=True)
            if name == "masked-random":
                m = evaluate(
                    env,
                    MaskedRandomAgent(eval_seed),
                    episodes=eval_episodes,
                    seed=eval_seed,
                    progress=tick or False,
                )
            else:
                text_env = feat.env
                m = evaluate(
                    text_env,
                    make_agent(name, text_env, seed=eval_seed),
                    episodes=eval_episodes,
                    seed=eval_seed,
                    progress=tick or False,
                )
            base_rows[name] = _row(m)
            env.close()
        for algo in algos:
            for seed in seeds:
                n = _n_envs(n_envs, algo)
                vec_env = make_vec_env(make, n_envs=n, seed=int(seed))
                curve_env = make_eval()
                task_id = tasks(f"{label} {algo} seed {seed}", timesteps)
                tick = _ticker(bar, task_id, cumulative=False)
                points: list[tuple[int, float]] = []
                callback = _curve_callback(curve_env, every, curve_episodes, eval_seed + 1, points, tick)
                model = make_model(algo, vec_env, seed, hyperparams=hp.get(algo))
                start = time.perf_counter()
                model.learn(total_timesteps=timesteps, callback=callback)
                train_s = time.perf_counter() - start
                eval_env = make_eval()
                m = evaluate_model(model, eval_env, eval_episodes, eval_seed)
                row = _row(m)
                row.update(
                    algo=algo,
                    seed=int(seed),
                    n_envs=n,
                    train_s=train_s,
                    train_steps_per_s=timesteps / max(train_s, 1e-9),
                    curve=[[int(t), float(e)] for t, e in points],
                )
                runs.append(row)
                vec_env.close()
                for e in (curve_env, eval_env):
                    e.close()
    finally:
        if bar is not None:
            bar.stop()
    summary: dict[str, dict[str, float]] = {}
    for algo in algos:
        rows = [r for r in runs if r["algo"] == algo]
        summary[algo] = {}
        for key in ("em", "f1", "reward", "avg_searches", "avg_steps", "invalid_rate", "train_steps_per_s"):
            vals = np.array([r[key] for r in rows], dtype=float)
            summary[algo][key] = float(vals.mean())
            summary[algo][f"{key}_std"] = float(vals.std())
    result = {
        "env": env_id,
        "env_kwargs": {k: _jsonable(v) for k, v in kwargs.items()},
        "eval_env_kwargs": {k: _jsonable(v) for k, v in eval_kwargs.items()},
        "timesteps": timesteps,
        "eval_episodes": eval_episodes,
        "eval_seed": eval_seed,
        "seeds": [int(s) for s in seeds],
        "runs": runs,
        "summary": summary,
        "baselines": base_rows,
    }
    if plot is not None:
        plot_curves(result, plot)
    return result


def _n_envs(n_envs: int | Mapping[str, int] | None, algo: str) -> int:
    if n_envs is None:
        return N_ENVS[algo]
    n = n_envs if isinstance(n_envs, int) else int(n_envs.get(algo, N_ENVS[algo]))
    if n < 1:
        raise InvalidOptionError(f"n_envs must be >= 1, got {n}")
    return n


def _jsonable(v: Any) -> Any:
    try:
        json.dumps(v)
        return v
    except TypeError:
        return repr(v)


def _row(m: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "em": float(m["em"]),
        "f1": float(m["f1"]),
        "reward": float(m["reward"]),
        "avg_searches": float(m["avg_searches"]),
        "avg_steps": float(m["avg_steps"]),
        "invalid_rate": float(m["invalid_rate"]),
        "eval_steps_per_s": float(m["steps_per_s"]),
    }


def _progress(show: bool) -> tuple[Any, Callable[[str, int], Any]]:
    from rich.console import Console

    err = Console(stderr=True)
    if not show or not err.is_terminal:  # piped, the bars would end up as lines in the output
        return None, lambda name, total: None
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    )
    bar.start()
    return bar, lambda name, total: bar.add_task(name, total=total)


def _ticker(bar: Any, task_id: Any, *, cumulative: bool) -> Callable[[int], None] | None:
    """A progress callback: ``cumulative`` counts (evaluate()'s) or increments (training's)."""
    if bar is None:
        return None
    if cumulative:
        return lambda n: bar.update(task_id, completed=n)
    return lambda n: bar.update(task_id, advance=n)


def render_table(result: Mapping[str, Any]) -> Any:
    """A rich table of the summary (mean ± std over seeds) and the baselines."""
    from rich import box
    from rich.table import Table

    seeds = len(result.get("seeds", ()))
    env = str(result["env"]).removeprefix("hopgym/")
    table = Table(
        title=f"bench-rl, {env}: {result['timesteps']:,} steps x {seeds} seed(s), "
        f"{result['eval_episodes']} eval episodes",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        collapse_padding=True,
    )
    # Short and two-line headers: the table fits 80 columns.
    for col in ("agent", "EM ± std", "F1", "reward", "searches", "steps", "invalid\nturns", "train\nsteps/s"):
        table.add_column(col, justify="left" if col == "agent" else "right", no_wrap=True)
    for algo, s in result["summary"].items():
        table.add_row(
            algo,
            f"{s['em']:.3f} ± {s['em_std']:.3f}",
            f"{s['f1']:.3f}",
            f"{s['reward']:.3f}",
            f"{s['avg_searches']:.2f}",
            f"{s['avg_steps']:.2f}",
            f"{s['invalid_rate']:.3f}",
            f"{s['train_steps_per_s']:.0f}",
        )
    for name, b in result["baselines"].items():
        table.add_row(
            f"[dim]{name}[/dim]",
            f"{b['em']:.3f}",
            f"{b['f1']:.3f}",
            f"{b['reward']:.3f}",
            f"{b['avg_searches']:.2f}",
            f"{b['avg_steps']:.2f}",
            f"{b['invalid_rate']:.3f}",
            "-",
        )
    return table


def plot_curves(result: Mapping[str, Any], path: str | Path) -> Path:
    """Learning curves (EM vs steps; mean over seeds, min-max band) and baselines as a PNG."""
    try:
        import matplotlib
    except ImportError:
        raise DependencyNotInstalled.for_extra("matplotlib", "sb3") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, algo in enumerate(result["summary"]):
        curves = [r["curve"] for r in result["runs"] if r["algo"] == algo and r["curve"]]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        steps = np.array([p[0] for p in curves[0][:n]])
        ems = np.array([[p[1] for p in c[:n]] for c in curves])
        color = colors[i % len(colors)]
        ax.plot(steps, ems.mean(axis=0), label=f"{algo} ({len(curves)} seeds)", color=color)
        ax.fill_between(steps, ems.min(axis=0), ems.max(axis=0), alpha=0.2, color=color)
    for j, (name, b) in enumerate(result["baselines"].items()):
        ax.axhline(
            b["em"],
            linestyle="--",
            linewidth=1,
            color=colors[(j + 4) % len(colors)],
            label=f"{name} ({b['em']:.2f})",
        )
    ax.set_xlabel("environment steps")
    ax.set_ylabel("exact match")
    ax.set_ylim(0, 1)
    ax.set_title(f"{result['env']}")
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    try:
        return save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)
