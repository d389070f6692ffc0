"""``hopgym bench``: every scripted baseline on the synthetic worlds, one table per env.

Options: :class:`BenchConfig` (a :class:`~hopgym.cli._common.BaseEnvConfig` with several envs) and
the env options (:data:`~hopgym.cli._common.ENV_OPTIONS`).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any

from hopgym.agents.scripted import AGENTS
from hopgym.cli._common import (
    DEFAULT_ENV,
    BaseEnvConfig,
    add_env_arguments,
    command_parser,
    console,
    env_kwargs,
    failed_searches_line,
    make_env,
    metrics_table,
    progress_label,
    write_json,
)
from hopgym.cli._dataclass_args import config_from_args

__all__ = ["BenchConfig", "add_parser", "run"]


@dataclass
class BenchConfig(BaseEnvConfig):
    """Envs, agents and episodes of ``hopgym bench``."""

    env: tuple[str, ...] = field(
        default=(DEFAULT_ENV, "hopgym/SyntheticRouting-v1"),
        metadata={"help": "Env ids, one table each.", "metavar": "ID"},
    )
    agents: tuple[str, ...] = field(
        default=AGENTS, metadata={"help": "Scripted agents to run.", "choices": AGENTS}
    )
    episodes: int = field(default=300, metadata={"help": "Episodes per agent and env."})
    json: str | None = field(
        default=None,
        metadata={
            "help": "Write every env:agent's metrics here as JSON (full precision).",
            "metavar": "PATH",
        },
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``bench`` to the ``hopgym`` command."""
    p = command_parser(
        subparsers,
        "bench",
        "every scripted baseline on the synthetic worlds",
        "Run every scripted agent on each env (the same seeded questions for "
        "all) and print one table per env.",
        run=run,
    )
    add_env_arguments(p, BenchConfig, title="benchmark")
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym bench``: exit status 1 when every search of an env and agent failed (a dead
    retrieval server), with a line on stderr for each that had failed searches."""
    from hopgym.agents.evaluation import evaluate
    from hopgym.agents.scripted import make_agent

    cfg = config_from_args(args, BenchConfig)
    kwargs = env_kwargs(args, cfg.kw)
    out = console()
    results: dict[str, dict[str, Any]] = {}
    for i, env_id in enumerate(cfg.env):
        env = make_env(env_id, kwargs)
        rows = []
        for name in cfg.agents:
            metrics = evaluate(
                env,
                make_agent(name, env, seed=cfg.seed),
                episodes=cfg.episodes,
                seed=cfg.seed,
                progress=progress_label(env_id, name),
            )
            rows.append((name, metrics))
            results[f"{env_id}:{name}"] = metrics
        if i:
            out.print()  # between tables, never before the first
        out.print(
            metrics_table(
                f"{env_id}, {cfg.episodes} episodes, seed {cfg.seed}",
                rows,
                getattr(env.unwrapped, "source_names", ()),
            )
        )
        env.close()
    if cfg.json:
        write_json(cfg.json, results)
    status = 0
    for name, metrics in results.items():  # a dead or refusing server must not pass unnoticed
        if metrics["failed_searches"]:
            every = metrics["failed_searches"] >= metrics["search_attempts"]
            print(
                f"hopgym bench: {'error' if every else 'warning'}: {name}: {failed_searches_line(metrics)}; "
                f"first: {' '.join(str(metrics['search_error']).split())}",
                file=sys.stderr,
            )
            status = status or int(every)
    return status
