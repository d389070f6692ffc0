"""``hopgym play``: play an episode yourself in the terminal (turns read from stdin).

Options: :class:`~hopgym.cli._common.EnvConfig` and the env options
(:data:`~hopgym.cli._common.ENV_OPTIONS`).
"""

from __future__ import annotations

import argparse
from typing import Any

from hopgym.cli._common import (
    EnvConfig,
    add_env_arguments,
    command_parser,
    env_kwargs,
    make_env,
    rounded,
)
from hopgym.cli._dataclass_args import config_from_args

__all__ = ["add_parser", "shortcuts_help", "run"]


def shortcuts_help(sources: tuple[str, ...]) -> str:
    """The line that explains the shortcuts; routing only where there is somewhere to route.

    Example:
        >>> "route" in shortcuts_help(("local",))
        False
        >>> "'r SOURCE' route to local or web" in shortcuts_help(("local", "web"))
        True
    """
    route = f"'r SOURCE' route to {' or '.join(sources)}, " if len(sources) > 1 else ""
    return (
        "Type a turn as raw protocol text, or a shortcut: 's QUERY' search, "
        f"{route}'a ANSWER' answer, 't TEXT' think, 'q' quit."
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``play`` to the ``hopgym`` command."""
    p = command_parser(
        subparsers,
        "play",
        "play an episode yourself in the terminal",
        "Play one episode: read the question, type turns (raw protocol text "
        "or shortcuts), see the documents and the reward.",
        run=run,
    )
    add_env_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym play``."""
    from hopgym.envs.actions import Answer, Route, Search, Think

    cfg = config_from_args(args, EnvConfig)
    env = make_env(cfg.env, env_kwargs(args, cfg.kw))
    obs, info = env.reset(seed=cfg.seed)
    sources = tuple(getattr(env.unwrapped, "source_names", ()))
    print(shortcuts_help(sources))
    print(obs)
    shortcuts: dict[str, Any] = {"s": Search, "a": Answer, "t": Think}
    if len(sources) > 1:
        shortcuts["r"] = Route
    total = 0.0
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            print("\n(end of input)")
            return 0
        if line == "q":
            return 0
        head, _, rest = line.partition(" ")
        shortcut = shortcuts.get(head)
        action: Any = shortcut(rest) if shortcut and rest else line
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        if info.get("invalid_action"):
            print(f"[invalid: {info['invalid_action']}]")
        if obs:
            print(obs)
        if terminated or truncated:
            sample = env.unwrapped.sample
            print(
                f"Episode over ({'answered' if terminated else 'out of turns'}). "
                f"Gold: {sample.answer}. Return: {total:.3f}. "
                f"Terms: {rounded(info.get('reward_terms'))}"
            )
            return 0
