"""What the commands share: the env options, making envs, errors, consoles, tables, numbers.

Classes: :class:`EnvConfig` (``--env --kw --seed``), :class:`CommandError`; :data:`ENV_OPTIONS`
(the env's :class:`~hopgym.envs.options.EnvOptions` as ``--top-k``, ``--protocol``, ``--reward`` ...).
Functions: :func:`command_parser` (a subcommand parser that runs its command with clean errors),
:func:`env_id_field` and :func:`env_kw_field` (``--env`` and ``--kw`` of any command's config),
:func:`add_env_arguments`, :func:`env_kwargs`, :func:`make_env`, :func:`console`,
:func:`progress_label`, :func:`metrics_table`, :func:`terms_table`, :func:`rounded`, :func:`write_json`.

The env surface is the same on every command that builds an env (``eval``, ``bench``, ``play``,
``bench-rl``, ``train sft/grpo/rft``): ``--env``, ``--kw KEY=VALUE`` and one option per env option
(:data:`ENV_OPTIONS`), merged by :func:`env_kwargs`, which refuses an option given both ways.
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
from hopgym.envs.protocols import PARSE_MODES, PROTOCOLS
from hopgym.errors import HopgymError

__all__ = [
    "DEFAULT_ENV",
    "ENV_OPTIONS",
    "CommandError",
    "EnvConfig",
    "add_env_arguments",
    "command_parser",
    "env_id_field",
    "env_kw_field",
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


def env_id_field(default: str = DEFAULT_ENV, help: str = "Env id.") -> Any:
    """The ``env`` field of a command's config (``--env ID``)."""
    return field(default=default, metadata={"help": help, "metavar": "ID"})


def env_kw_field() -> Any:
    """The ``kw`` field of a command's config (``--kw KEY=VALUE``): any ``gym.make`` keyword.

    An env option given here and as its own option (``--kw top_k=2 --top-k 3``) is refused by
    :func:`env_kwargs`.
    """
    return field(
        default_factory=dict,
        metadata={
            "help": "Env keyword arguments (a world's, a dataset's, or any env option), read as "
            "Python literals where they parse; repeat or list several: --kw hops=3 --kw "
            "kinds=bridge. An env option given here cannot also be given as its own option."
        },
    )


@dataclass
class EnvConfig:
    """The env a command runs on."""

    env: str = env_id_field()
    kw: dict[str, Any] = env_kw_field()
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
    metadata={
        "reward": {"metavar": "PRESET"},
        "protocol": {"choices": tuple(PROTOCOLS)},
        "parse": {"choices": PARSE_MODES},
    },
)


def add_env_arguments(parser: argparse.ArgumentParser, cls: type = EnvConfig, title: str = "env") -> None:
    """``--env --kw --seed`` (the fields of ``cls``, an :class:`EnvConfig`) and the env options
    (:data:`ENV_OPTIONS`)."""
    add_config_arguments(parser, ConfigSpec(cls, title=title))
    add_config_arguments(parser, ENV_OPTIONS)


def env_kwargs(args: argparse.Namespace, kw: dict[str, Any], flag: str = "--kw") -> dict[str, Any]:
    """``gym.make`` keyword arguments: ``kw`` (the ``flag`` items) plus the env options given on
    their own; ``reward="none"`` from either is the bare env (``reward=None``).

    Raises:
        CommandError: an option given both ways (the message names both spellings).

    Example:
        >>> from hopgym.cli import build_parser
        >>> args = build_parser().parse_args(["play", "--max-turns", "3", "--reward", "none"])
        >>> env_kwargs(args, {"hops": 2})
        {'hops': 2, 'max_turns': 3, 'reward': None}
        >>> env_kwargs(args, {"max_turns": 4})
        Traceback (most recent call last):
        ...
        hopgym.cli._common.CommandError: --kw max_turns=4 and --max-turns 3 both set max_turns: give it once
    """
    given = given_values(args, ENV_OPTIONS)
    for name in sorted(set(given) & set(kw)):
        raise CommandError(
            f"{flag} {name}={kw[name]!r} and {ENV_OPTIONS.option(name)} {_word(given[name])} "
            f"both set {name}: give it once"
        )
    out = {**kw, **given}
    if isinstance(out.get("reward"), str) and out["reward"].lower() == "none":
        out["reward"] = None
    return out


def _word(value: Any) -> str:
    """A value as it was typed on the command line (``on``/``off`` for a switch)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def make_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    """``gym.make(env_id, **kwargs)`` (``kwargs`` from :func:`env_kwargs`).

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
