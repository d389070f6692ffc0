"""What the commands share: the env options, making envs, errors, consoles, tables, numbers.

Classes: :class:`EnvConfig` (``--env --kw --seed``), :class:`BaseEnvConfig` (the same with
several envs allowed), :class:`CommandError`; :data:`ENV_OPTIONS`
(the env's :class:`~hopgym.envs.options.EnvOptions` as ``--top-k``, ``--protocol``, ``--reward`` ...).
Functions: :func:`command_parser` (a subcommand parser that runs its command with clean errors),
:func:`env_id_field` and :func:`env_kw_field` (``--env`` and ``--kw`` of any command's config),
:func:`error_line`, :func:`add_env_arguments`, :func:`env_kwargs`, :func:`make_env`, :func:`console`,
:func:`say`, :func:`progress_label`, :func:`metrics_table`, :func:`terms_table`, :func:`rounded`,
:func:`write_json`.

The env surface is the same on every command that builds an env (``eval``, ``bench``, ``play``,
``bench-rl``, ``train sft/grpo/rft``): ``--env``, ``--kw KEY=VALUE`` and one option per env option
(:data:`ENV_OPTIONS`), merged by :func:`env_kwargs`, which refuses an option given both ways.

A closed stdout (``hopgym eval ... | head -1``) ends the printing, not the run: :func:`console`
and :func:`say` stop printing quietly, so the files a command writes are still written and its
exit status is its own.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hopgym import _atomic
from hopgym.cli._dataclass_args import ConfigSpec, add_config_arguments, given_values, plain
from hopgym.envs.options import EnvOptions
from hopgym.errors import HopgymError, InvalidOptionError
from hopgym.turns import PARSE_MODES, PROTOCOLS

__all__ = [
    "DEFAULT_ENV",
    "ENV_OPTIONS",
    "BaseEnvConfig",
    "CommandError",
    "EnvConfig",
    "add_env_arguments",
    "command_parser",
    "env_id_field",
    "env_kw_field",
    "env_kwargs",
    "error_line",
    "failed_searches_line",
    "console",
    "make_env",
    "metrics_table",
    "progress_label",
    "rounded",
    "say",
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
class BaseEnvConfig:
    """``--env --kw --seed``: the fields of :class:`EnvConfig` (one env) and of configs that take
    several envs (``hopgym bench``'s ``env: tuple[str, ...]``); subclasses narrow ``env``."""

    env: str | tuple[str, ...] = env_id_field()
    kw: dict[str, Any] = env_kw_field()
    seed: int = field(
        default=0, metadata={"help": "Seeds the question order and each episode's reset (and the agent)."}
    )

    def __post_init__(self) -> None:
        if self.seed < 0:  # numpy's seeding refuses it later, without naming the option
            raise InvalidOptionError(f"--seed must be >= 0, got {self.seed}")


@dataclass
class EnvConfig(BaseEnvConfig):
    """The env a command runs on."""

    env: str = env_id_field()


def command_parser(
    subparsers: Any,
    name: str,
    help: str,
    description: str | None = None,
    run: Callable[[argparse.Namespace], int] | None = None,
    **kwargs: Any,
) -> argparse.ArgumentParser:
    """A subcommand parser with plain-text help whose ``func`` is ``run``, guarded so that a
    refusal (:data:`REFUSALS`: a :class:`~hopgym.errors.HopgymError` such as a missing extra, a
    config that refuses its values or a stale index; an ``OSError`` such as an unwritable path;
    a ``ValueError``) exits with one line, ``hopgym NAME: error: ...`` (``SystemExit``: status 1,
    the message on stderr), instead of a traceback."""
    parser = subparsers.add_parser(name, help=plain(help), description=plain(description or help), **kwargs)
    if run is not None:
        parser.set_defaults(func=_guarded(run, parser.prog))
    return parser


#: What a command refuses with one line rather than a traceback. ``BrokenPipeError`` (an
#: ``OSError``) is not one: a closed stdout ends the printing, not the run (:func:`say`).
REFUSALS = (HopgymError, OSError, ValueError)


def error_line(exc: BaseException) -> str:
    """A refusal's message on one line: ``OSError``s as ``PATH: reason``.

    Example:
        >>> error_line(IsADirectoryError(21, "Is a directory", "runs/"))
        'runs/: Is a directory'
        >>> error_line(ValueError("two\\n  lines"))
        'two lines'
    """
    if isinstance(exc, OSError) and not isinstance(exc, HopgymError) and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}" if exc.filename is not None else exc.strerror
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


def _guarded(run: Callable[[argparse.Namespace], int], prog: str) -> Callable[[argparse.Namespace], int]:
    def func(args: argparse.Namespace) -> int:
        try:
            return int(run(args) or 0)
        except BrokenPipeError:
            raise
        except REFUSALS as exc:
            raise SystemExit(f"{prog}: error: {error_line(exc)}") from None

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
    """``--env --kw --seed`` (the fields of ``cls``, a :class:`BaseEnvConfig`) and the env options
    (:data:`ENV_OPTIONS`)."""
    add_config_arguments(parser, ConfigSpec(cls, title=title))
    add_config_arguments(parser, ENV_OPTIONS)


def env_kwargs(args: argparse.Namespace, kw: dict[str, Any], flag: str = "--kw") -> dict[str, Any]:
    """``gym.make`` keyword arguments: ``kw`` (the ``flag`` items) plus the env options given on
    their own (``reward="none"`` is the bare env: :class:`~hopgym.envs.options.EnvOptions` reads it).

    Raises:
        CommandError: an option given both ways (the message names both spellings).

    Example:
        >>> from hopgym.cli import build_parser
        >>> args = build_parser().parse_args(["play", "--max-turns", "3", "--reward", "none"])
        >>> env_kwargs(args, {"hops": 2})
        {'hops': 2, 'max_turns': 3, 'reward': 'none'}
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
    return {**kw, **given}


def _word(value: Any) -> str:
    """A value as it was typed on the command line (``on``/``off`` for a switch)."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def make_env(env_id: str, kwargs: dict[str, Any]) -> Any:
    """``gym.make(env_id, **kwargs)`` (``kwargs`` from :func:`env_kwargs`; ``reward="none"`` is the
    bare env: see ``EnvOptions``).

    Raises:
        CommandError: the id is unknown or the env refused its arguments.
    """
    import gymnasium as gym

    import hopgym  # noqa: F401 - registers the ids

    try:
        env = gym.make(env_id, **kwargs)
    except (gym.error.Error, TypeError, ValueError) as exc:
        hint = ""
        if "/" not in env_id and f"hopgym/{env_id}" in gym.registry:  # the namespace left out
            hint = f" (did you mean hopgym/{env_id}?)"
        raise CommandError(f"cannot make {env_id!r}: {exc}{hint}") from None
    from hopgym.envs.multihop_qa import MultiHopQAEnv

    if not isinstance(env.unwrapped, MultiHopQAEnv):
        env.close()
        raise CommandError(
            f"{env_id} is not a hopgym question-answering env ({type(env.unwrapped).__name__}): "
            f"give a hopgym/... id, e.g. {DEFAULT_ENV}"
        )
    return env


def _stdout_closed() -> None:
    """The reader of stdout went away: send the rest to devnull (Python's recipe), so that no
    later print, nor the flush at exit, fails again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def say(*lines: str) -> None:
    """Print ``lines`` on stdout, flushed; a closed stdout ends the printing, quietly."""
    try:
        for line in lines:
            print(line, flush=True)
    except BrokenPipeError:
        _stdout_closed()


def console() -> Any:
    """A rich console for tables: the terminal's width, or ``COLUMNS`` (80) when piped. Its
    printing stops quietly when stdout is closed (as :func:`say`; rich's own exits with status 1)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's own raises SystemExit(1): the run would end
            self.quiet = True
            _stdout_closed()

    return _Console(highlight=False)


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
        recall = m["support_recall"]
        searches = f"{m['avg_searches']:.2f}"
        if split:
            by = m.get("searches_by_source", {})
            searches += " (" + "/".join(f"{by.get(s, 0.0):.2f}" for s in names) + ")"
        table.add_row(
            name,
            f"{m['em']:.3f}",
            f"{m['f1']:.3f}",
            "n/a" if recall is None else f"{recall:.3f}",
            f"{m['avg_steps']:.2f}",
            searches,
            f"{m['invalid_rate']:.3f}",
            f"{m['reward']:.3f}",
            f"{m['episodes_per_s']:.0f}",
        )
    return table


def failed_searches_line(metrics: dict[str, Any]) -> str:
    """``2 of 5 searches failed (connection 2)``: the failed searches of a run, by kind.

    Example:
        >>> failed_searches_line({"failed_searches": 2, "search_attempts": 5,
        ...                       "failed_search_kinds": {"timeout": 1, "connection": 1}})
        '2 of 5 searches failed (connection 1, timeout 1)'
    """
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(metrics["failed_search_kinds"].items()))
    return f"{metrics['failed_searches']} of {metrics['search_attempts']} searches failed ({kinds})"


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
    """Write ``data`` as indented JSON (full precision), creating the folder: whole or not at
    all (:func:`hopgym._atomic.write_json`; an error names the file)."""
    _atomic.write_json(path, data)
