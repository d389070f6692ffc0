"""``hopgym play``: play an episode yourself in the terminal (turns read from stdin).

Under ``--protocol tools`` a turn is tool calls (or a shortcut); each call is shown as
``name(key="value")`` with its result under it.

Options: :class:`~hopgym.cli._common.EnvConfig` and the env options
(:data:`~hopgym.cli._common.ENV_OPTIONS`).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from hopgym.cli._common import (
    EnvConfig,
    add_env_arguments,
    command_parser,
    env_kwargs,
    make_env,
    rounded,
)
from hopgym.cli._dataclass_args import config_from_args

if TYPE_CHECKING:
    from hopgym.turns.base import Protocol

__all__ = ["add_parser", "shortcuts_help", "call_line", "run"]


def shortcuts_help(sources: tuple[str, ...], protocol: str | Protocol = "tags") -> str:
    """The line that explains the shortcuts; routing only where there is somewhere to route.

    Example:
        >>> "route" in shortcuts_help(("local",))
        False
        >>> "'r SOURCE' route to local or web" in shortcuts_help(("local", "web"))
        True
        >>> "'r SOURCE' search local or web next" in shortcuts_help(("local", "web"), "tools")
        True
    """
    from hopgym.turns.registry import get_protocol

    places = " or ".join(sources)
    if get_protocol(protocol).chat_tools:  # no route tool: a search names its source
        route = f"'r SOURCE' search {places} next, " if len(sources) > 1 else ""
        raw = (
            "tool calls (<tool_call>{...}</tool_call> blocks, several in a turn, or an assistant "
            "message as JSON)"
        )
    else:
        route = f"'r SOURCE' route to {places}, " if len(sources) > 1 else ""
        raw = "raw protocol text"
    return (
        f"Type a turn as {raw}, or a shortcut: 's QUERY' search, {route}'a ANSWER' answer, "
        "'t TEXT' think, 'q' quit."
    )


def call_line(name: str, arguments: Any) -> str:
    """A tool call as ``name(key="value", ...)``; arguments that are not an object as written.

    Example:
        >>> call_line("search", {"query": "Lorn", "source": "web"})
        'search(query="Lorn", source="web")'
        >>> call_line("answer", '{"answer": ')
        'answer({"answer": )'
    """
    if isinstance(arguments, dict):
        shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in arguments.items())
    else:
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return f"{name or '(no name)'}({shown})"


def _show_tool_step(env: Any, obs: str, info: dict[str, Any]) -> None:
    """Each call of a tools turn and its result; then what the env said outside the results."""
    from hopgym.turns.tools import step_calls

    assistant = next(m for m in reversed(env.unwrapped.transcript) if m["role"] == "assistant")
    calls = step_calls(assistant, info)
    if not calls:  # no call could be read: the turn is invalid (or a thought)
        if info.get("invalid_action"):
            print(f"[invalid: {info['invalid_action']}]")
        if obs:
            print(obs.rstrip("\n"))
        return
    for k, call in enumerate(calls, 1):
        part = call["info"] or {}
        print(f"[call {k}] {call_line(call['name'], call['arguments'])}")
        if part.get("action_type") == "invalid":
            print(f"[tool error: {part['invalid_action']}]")
        elif part.get("action_type") == "answer":
            print(f"[answer: {part['answer']}]")
        elif call["result"]:
            print(call["result"])
    for m in info.get("tool_messages") or ():
        if m.get("role") != "tool":
            print(m["content"])


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
    from hopgym.turns.actions import Answer, Route, Search, Think
    from hopgym.turns.registry import get_protocol

    cfg = config_from_args(args, EnvConfig)
    env = make_env(cfg.env, env_kwargs(args, cfg.kw))
    obs, info = env.reset(seed=cfg.seed)
    sources = tuple(getattr(env.unwrapped, "source_names", ()))
    protocol = getattr(env.unwrapped, "protocol", None) or "tags"
    tools = get_protocol(protocol).chat_tools
    print(shortcuts_help(sources, protocol))
    if tools:
        specs = env.unwrapped.tool_specs
        print("Tools: " + ", ".join(call_line(s["function"]["name"], _params(s)) for s in specs))
    print(obs)
    shortcuts: dict[str, Any] = {"s": Search, "a": Answer, "t": Think}
    if len(sources) > 1:
        shortcuts["r"] = Route
    total = 0.0
    route: str | None = None  # tools: the source 'r SOURCE' chose for the next search
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
        if tools and isinstance(action, Route):  # there is no route tool: the next search says where
            route = action.source
            print(f"(the next search goes to {route})")
            continue
        if tools and isinstance(action, Search) and route is not None:
            action, route = Search(action.query, source=route), None
        obs, reward, terminated, truncated, info = env.step(action)
        total += float(reward)
        if tools:
            _show_tool_step(env, obs, info)
        else:
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


def _params(spec: dict[str, Any]) -> str:
    """A tool's parameters as ``query, source?`` (optional ones marked)."""
    params = spec["function"]["parameters"]
    required = set(params.get("required", ()))
    return ", ".join(k if k in required else f"{k}?" for k in params["properties"])
