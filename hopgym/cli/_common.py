"""What the commands share: the env options, making envs, errors, consoles, tables, numbers.

Classes: :class:`EnvConfig` (``--env --kw --seed``), :class:`CommandError`; :data:`ENV_OPTIONS`
(the env's :class:`~hopgym.envs.options.EnvOptions` as ``--top-k``, ``--protocol``, ``--reward`` ...).
Functions: :func:`command_parser` (a subcommand parser that runs its command with clean errors),
:func:`add_env_arguments`, :func:`make_env`, :func:`console`, :func:`progress_label`, :func:`metrics_table`,
:func:`terms_table`, :func:`rounded`, :func:`write_json`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopgym.cli._dataclass_args import ConfigSpec, add_config_arguments, given_values, plain
from hopgym.envs.options import EnvOptions
from hopgym.envs.protocols import PROTOCOLS
from hopgym.errors import HopgymError

__all__ = [
    "DEFAULT_ENV",
    "ENV_OPTIONS",
    "CommandError",
    "EnvConfig",
    "add_env_arguments",
    "command_parser",
    "env_kwargs",
    "console",
    "make_env",
    "metrics_table",
    "progress_label",
    "rounded",
    "terms_table",
    "write_json",
]

DEFAULT_ENV = "hopgym/Synthetic-v1"


class CommandError(HopgymError):
    """A command cannot do what it was asked; the message says why (printed without traceback)."""


@dataclass
class EnvConfig:
    """The env a command runs on."""

    env: str = field(default=DEFAULT_ENV, metadata={"help": "Env id.", "metavar": "ID"})
    kw: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Env keyword arguments (a world's, a dataset's, or any env option), read as "
            "Python literals where they parse; repeat or list several: --kw hops=3 --kw "
            "kinds=bridge."
        },
    )
    seed: int = field(
        default=0, metadata={"help": "Seeds the question order and each episode's reset (and the agent)."}
    )


def command_parser(
    subparsers: Any,
    name: str,
    help: str,
    description: str | None = None,
    run: Callable[[argparse.Namespace], int] | None = None,
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """A subcommand parser with plain-text help whose ``func`` is ``run``, guarded so that any
    error hopgym raises on purpose (a :class:`~hopgym.errors.HopgymError`: a missing extra, a
    config that refuses its values, a stale index, ...) exits with ``hopgym NAME: error: ...``
    (``SystemExit``: status 1, the message on stderr) instead of a traceback."""
    parser = subparsers.add_parser(name, help=plain(help), description=plain(description or help), **kwargs)
    if run is not None:
        parser.set_defaults(func=_guarded(run, parser.prog))
    return parser


def _guarded(run: Callable[[argparse.Namespace], int], prog: str) -> Callable[[argparse.Namespace], int]:
    def func(args: argparse.Namespace) -> int:
        try:
            return int(run(args) or 0)
        except HopgymError as exc:
            raise SystemExit(f"{prog}: error: {exc}") from None

    func.__wrapped__ = run  # type: ignore[attr-defined]
    return func


#: The env options as options of their own; only those given override the env id's.
ENV_OPTIONS = ConfigSpec(
    EnvOptions,
    title="env options (EnvOptions)",
    given_only=True,
    exclude=frozenset({"render_mode"}),
    description="Options given here override the env id's registered ones; the defaults shown "
    "are EnvOptions'. --reward none gives the bare env (reward 0).",
    metadata={"reward": {"metavar": "PRESET"}, "protocol": {"choices": tuple(PROTOCOLS)}},
)


def add_env_arguments(parser: argparse.ArgumentParser, cls: type = EnvConfig, title: str = "env") -> None:
    """``--env --kw --seed`` (the fields of ``cls``, an :class:`EnvConfig`) and the env options
    (:data:`ENV_OPTIONS`)."""
    add_config_arguments(parser, ConfigSpec(cls, title=title))
    add_config_arguments(parser, ENV_OPTIONS)


def env_kwargs(args: argparse.Namespace, kw: dict[str, Any]) -> dict[str, Any]:
    """``gym.make`` keyword arguments: ``--kw`` items plus the env options given on their own.

    Raises:
        CommandError: an option given both ways.
    """
    given = given_values(args, ENV_OPTIONS)
    twice = sorted(set(given) & set(kw))
    if twice:
        raise CommandError(f"{', '.join(twice)} given twice (--kw and its own option): give it once")
    return {**kw, **given}


def make_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    """``gym.make(env_id, **kwargs)`` (``reward="none"`` is the bare env: see ``EnvOptions``).

    Raises:
        CommandError: the id is unknown or the env refused its arguments.
    """
    import gymnasium as gym

    import hopgym  # noqa: F401 - registers the ids

    try:
        return gym.make(env_id, **kwargs)
    except (gym.error.Error, TypeError, ValueError) as exc:
        raise CommandError(f"cannot make {env_id!r}: {exc}") from None


def console() -> Any:
    """A rich console for tables: the terminal's width, or ``COLUMNS`` (80) when piped."""
    from rich.console import Console

    return Console(highlight=False)


def progress_label(env_id: str, agent: str) -> str:
    """What a progress bar is for: ``"Synthetic-v1 iterative"``."""
    return f"{env_id.removeprefix('hopgym/')} {agent}"


def rounded(value: Any, digits: int = 4) -> Any:
    """``value`` with every float rounded to ``digits`` decimals, for showing (JSON files keep all).

    Example:
        >>> rounded({"web": 3.0000000000000027, "n": [0.123456, 2]})
        {'web': 3.0, 'n': [0.1235, 2]}
    """
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(rounded(v, digits) for v in value)
    return value


def _sources(rows: list[tuple[str, dict[str, Any]]], sources: tuple[str, ...]) -> tuple[str, ...]:
    seen = {name for _, m in rows for name in m.get("searches_by_source", {})}
    return tuple(sources) + tuple(sorted(seen - set(sources)))


def metrics_table(title: str, rows: list[tuple[str, dict[str, Any]]], sources: tuple[str, ...] = ()) -> Any:
    """One row of :func:`hopgym.agents.evaluate` metrics per agent, narrow enough for 80 columns.

    With more than one source the searches column shows the split, ``2.77 (2.15/0.62)``, which
    wraps under the total below 85 columns; headers are short or two-line (77 columns without a
    split).
    """
    from rich import box
    from rich.table import Table

    names = _sources(rows, sources)
    split = len(names) > 1
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    heads = (
        "agent",
        "EM",
        "F1",
        "support\nrecall",
        "steps",
        f"searches\n({'/'.join(names)})" if split else "searches",
        "invalid\nturns",
        "reward",
        "ep/s",
    )
    for head in heads:
        wraps = head.startswith("searches")
        table.add_column(
            head,
            justify="left" if head == "agent" else "right",
            no_wrap=not wraps,
            min_width=11 if wraps and split else None,
        )
    for name, m in rows:
        searches = f"{m['avg_searches']:.2f}"
        if split:
            by = m.get("searches_by_source", {})
            searches += " (" + "/".join(f"{by.get(s, 0.0):.2f}" for s in names) + ")"
        table.add_row(
            name,
            f"{m['em']:.3f}",
            f"{m['f1']:.3f}",
            f"{m['support_recall']:.3f}",
            f"{m['avg_steps']:.2f}",
            searches,
            f"{m['invalid_rate']:.3f}",
            f"{m['reward']:.3f}",
            f"{m['episodes_per_s']:.0f}",
        )
    return table


def terms_table(metrics: dict[str, Any]) -> Any:
    """The mean of each reward term per episode."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("reward term")
    table.add_column("mean per episode", justify="right")
    for name, value in sorted(metrics["reward_terms"].items()):
        table.add_row(name, f"{value:+.4f}")
    return table


def write_json(path: str, data: Any) -> None:
    """Write ``data`` as indented JSON (full precision), creating the folder."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
