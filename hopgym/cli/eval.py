"""``hopgym eval``: evaluate one agent on an env; prints a table, writes JSON and trajectories.

Options: :class:`~hopgym.cli._common.EnvConfig` and the env options
(:data:`~hopgym.cli._common.ENV_OPTIONS`), :class:`EvalConfig` and, for ``--agent llm``,
:class:`LLMConfig` (its defaults are those of :func:`hopgym.agents.llm.make_llm_agent`).
"""

from __future__ import annotations

import argparse
import inspect
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopgym.agents.llm import BACKENDS, make_llm_agent
from hopgym.agents.scripted import AGENTS
from hopgym.cli._common import (
    CommandError,
    EnvConfig,
    add_env_arguments,
    command_parser,
    console,
    env_kwargs,
    make_env,
    metrics_table,
    progress_label,
    terms_table,
    write_json,
)
from hopgym.cli._dataclass_args import ConfigSpec, add_config_arguments, config_from_args

__all__ = ["EvalConfig", "LLMConfig", "add_parser", "make_cli_agent", "run"]

_LLM = inspect.signature(make_llm_agent).parameters


@dataclass
class EvalConfig:
    """Which agent, for how long, and where the results go."""

    agent: str = field(default="oracle", metadata={
        "help": f"A scripted agent ({', '.join(AGENTS)}) or llm (needs --model)."})
    episodes: int = field(default=100, metadata={"help": "Episodes to run."})
    json: str | None = field(default=None, metadata={
        "help": "Write the metrics here as JSON (full precision).", "metavar": "PATH"})
    trajectories: str | None = field(default=None, metadata={
        "help": "Write every episode, turn by turn, here (.jsonl; hopgym view reads it).",
        "metavar": "PATH"})
    report: str | None = field(default=None, metadata={
        "help": "Write the HTML report of the run here (see hopgym view).", "metavar": "HTML"})


@dataclass
class LLMConfig:
    """The model behind ``--agent llm`` (:func:`hopgym.agents.llm.make_llm_agent`)."""

    model: str | None = field(default=None, metadata={
        "help": "Model path or hub id (transformers, vllm), or the served model name (openai).",
        "metavar": "ID"})
    backend: str = field(default=_LLM["backend"].default, metadata={
        "help": "Generation backend.", "choices": BACKENDS})
    base_url: str | None = field(default=None, metadata={
        "help": "API root of an OpenAI-compatible server (openai backend).", "metavar": "URL"})
    temperature: float = field(default=_LLM["temperature"].default, metadata={
        "help": "Sampling temperature (0: greedy)."})
    top_p: float = field(default=_LLM["top_p"].default, metadata={"help": "Nucleus sampling mass."})
    max_new_tokens: int = field(default=_LLM["max_new_tokens"].default, metadata={
        "help": "Longest model turn in tokens."})


LLM_SPEC = ConfigSpec(LLMConfig, title="llm agent")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``eval`` to the ``hopgym`` command."""
    p = command_parser(subparsers, "eval", "evaluate one agent; prints a table, writes JSON",
                       "Run one agent for N episodes on an env and print EM, F1, support "
                       "recall, steps, searches (by source), invalid turns, reward and the mean "
                       "of each reward term.", run=run)
    add_env_arguments(p)
    add_config_arguments(p, ConfigSpec(EvalConfig, title="evaluation"))
    add_config_arguments(p, LLM_SPEC)
    return p


def make_cli_agent(name: str, env: Any, seed: int, llm: LLMConfig | None = None) -> Any:
    """A scripted agent by name, or the LLM agent ``llm`` describes.

    Raises:
        CommandError: an unknown name, or ``llm`` without a model.
    """
    from hopgym.agents.scripted import make_agent

    if name == "llm":
        if llm is None or not llm.model:
            raise CommandError("--agent llm needs --model PATH_OR_ID")
        try:
            return make_llm_agent(llm.model, backend=llm.backend,
                                  protocol=env.unwrapped.protocol.name, base_url=llm.base_url,
                                  temperature=llm.temperature, top_p=llm.top_p,
                                  max_new_tokens=llm.max_new_tokens, seed=seed)
        except ValueError as exc:  # e.g. the openai backend without --base-url
            raise CommandError(str(exc)) from None
    try:
        return make_agent(name, env, seed=seed)
    except ValueError as exc:
        raise CommandError(f"{exc} (or llm)") from None


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym eval``."""
    from hopgym.agents.evaluation import evaluate

    cfg = config_from_args(args, EnvConfig)
    ev = config_from_args(args, EvalConfig)
    env = make_env(cfg.env, env_kwargs(args, cfg.kw))
    llm = config_from_args(args, LLM_SPEC)
    agent = make_cli_agent(ev.agent, env, cfg.seed, llm)
    agent_name = f"llm:{llm.model}" if ev.agent == "llm" else ev.agent
    with tempfile.TemporaryDirectory() as tmp:
        # The report is built from a trajectory file; without --trajectories it is a temporary one.
        trajectories = ev.trajectories or (str(Path(tmp) / "run.jsonl") if ev.report else None)
        try:
            metrics = evaluate(env, agent, episodes=ev.episodes, seed=cfg.seed,
                               trajectories=trajectories, agent_name=agent_name,
                               progress=progress_label(cfg.env, ev.agent))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if ev.report:
            from hopgym.viewer import write_report

            report = write_report(trajectories, ev.report,
                                  title=f"hopgym: {ev.agent} on {cfg.env}")
    out = console()
    out.print(metrics_table(f"{cfg.env}, {ev.episodes} episodes, seed {cfg.seed}",
                            [(ev.agent, metrics)], getattr(env.unwrapped, "source_names", ())))
    if metrics["reward_terms"]:
        out.print(terms_table(metrics))
    if ev.json:
        write_json(ev.json, metrics)
    if ev.report:
        out.print(f"report: {report}")
    return 0
