"""``hopgym bench-rl``: train and evaluate Stable-Baselines3 algorithms (and baselines) on a
featurized env; prints a table, writes JSON and learning curves. Needs ``hopgym[sb3]``.

Options: :class:`BenchRLConfig` (defaults from :func:`hopgym.cli.bench_rl_jobs.bench_rl`).
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from hopgym.agents.scripted import AGENTS
from hopgym.cli._common import (
    ENV_OPTIONS,
    CommandError,
    command_parser,
    console,
    env_id_field,
    env_kw_field,
    env_kwargs,
    write_json,
)
from hopgym.cli._dataclass_args import add_config_arguments, config_from_args
from hopgym.cli.bench_rl_jobs import ALGOS, bench_rl

__all__ = ["BenchRLConfig", "add_parser", "run"]

_BENCH = inspect.signature(bench_rl).parameters


@dataclass
class BenchRLConfig:
    """What ``hopgym bench-rl`` trains, how long, and what it compares against."""

    env: str = env_id_field(_BENCH["env_id"].default, "Featurized env id.")
    kw: dict[str, Any] = env_kw_field()
    eval_kw: dict[str, Any] | None = field(
        default=None,
        metadata={
            "help": "Keyword arguments of the evaluation env (default: those of --kw); the env "
            "options given as options apply to both envs."
        },
    )
    algos: tuple[str, ...] = field(
        default=tuple(_BENCH["algos"].default),
        metadata={"help": "Algorithms to train.", "choices": ALGOS, "metavar": "ALGO"},
    )
    seeds: tuple[int, ...] = field(
        default=tuple(_BENCH["seeds"].default), metadata={"help": "One training run per algorithm and seed."}
    )
    timesteps: int = field(
        default=_BENCH["timesteps"].default, metadata={"help": "Env steps per training run."}
    )
    eval_episodes: int = field(
        default=_BENCH["eval_episodes"].default,
        metadata={"help": "Episodes of the final evaluation (the same questions for every row)."},
    )
    eval_seed: int = field(
        default=_BENCH["eval_seed"].default, metadata={"help": "Seed of the evaluation question order."}
    )
    eval_every: int | None = field(
        default=_BENCH["eval_every"].default,
        metadata={"help": "Steps between learning-curve points (default: timesteps/10; 0: none)."},
    )
    curve_episodes: int = field(
        default=_BENCH["curve_episodes"].default, metadata={"help": "Episodes per learning-curve point."}
    )
    baselines: tuple[str, ...] = field(
        default=tuple(_BENCH["baselines"].default),
        metadata={
            "help": "Masked-random and scripted agents evaluated beside the policies ('' for none).",
            "choices": ("masked-random", *AGENTS),
            "metavar": "AGENT",
        },
    )
    threads: int | None = field(
        default=_BENCH["threads"].default,
        metadata={"help": "Torch threads (1 is fastest for these small MLPs; none: leave them)."},
    )
    progress: bool = field(default=_BENCH["progress"].default, metadata={"help": "Show progress bars."})
    json: str | None = field(
        default=None,
        metadata={
            "help": "Write the results as JSON to PATH (full precision), or print them as JSON "
            "instead of the table when PATH is left out.",
            "nargs": "?",
            "const": "-",
            "metavar": "PATH",
        },
    )
    plot: str | None = field(
        default=None, metadata={"help": "Write the learning curves to this PNG.", "metavar": "PNG"}
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``bench-rl`` to the ``hopgym`` command."""
    p = command_parser(
        subparsers,
        "bench-rl",
        "train and evaluate SB3 algorithms (and baselines) on a featurized env",
        "Train Stable-Baselines3 algorithms on a featurized hopgym env for several seeds, "
        "evaluate them and the scripted baselines on the same questions, print a table and "
        "write learning curves. Needs hopgym[sb3].",
        run=run,
    )
    add_config_arguments(p, BenchRLConfig)
    add_config_arguments(p, ENV_OPTIONS)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym bench-rl``."""
    from hopgym.cli.bench_rl_jobs import render_table

    cfg = config_from_args(args, BenchRLConfig)
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # before torch is imported
    try:
        result = bench_rl(
            cfg.env,
            env_kwargs=env_kwargs(args, cfg.kw),
            eval_env_kwargs=None if cfg.eval_kw is None else env_kwargs(args, cfg.eval_kw, "--eval-kw"),
            algos=cfg.algos,
            seeds=cfg.seeds,
            timesteps=cfg.timesteps,
            eval_episodes=cfg.eval_episodes,
            eval_seed=cfg.eval_seed,
            baselines=cfg.baselines,
            eval_every=cfg.eval_every,
            curve_episodes=cfg.curve_episodes,
            threads=cfg.threads,
            progress=cfg.progress,
            plot=cfg.plot,
        )
    except (ValueError, TypeError, gym.error.Error) as exc:
        raise CommandError(str(exc)) from None
    if cfg.json == "-":
        print(json.dumps(result, indent=2))
        return 0
    out = console()
    out.print(render_table(result))
    if cfg.json:
        write_json(cfg.json, result)
    if cfg.plot:
        out.print(f"learning curves: {cfg.plot}")
    return 0
