"""The hopgym command: evaluate, benchmark and play agents, view their trajectories, export data,
build and serve search indexes, train LLM policies (SFT, GRPO) and benchmark classic RL
algorithms.

Run "hopgym COMMAND --help" for a command's options. Options are generated from config
dataclasses (hopgym.cli._dataclass_args); --field_name works as well as --field-name.

One module per command: ``eval``, ``bench``, ``play``, ``view``, ``data``, ``index`` (``build``,
``info``),
``serve``, ``serve_env`` (``serve-env``), ``train`` (``sft``, ``grpo``), ``bench_rl``
(``bench-rl``). Each has ``add_parser(subparsers)`` and a ``run(args)`` that the parser calls
(an error it expects exits with one line, ``hopgym eval: error: ...``); heavy imports (torch, TRL,
FAISS, Stable-Baselines3) happen inside ``run``, so ``import hopgym.cli`` and ``hopgym --help``
stay light, and a command whose extra is missing is still listed and says what to install.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from hopgym._kwargs import KwargsError
from hopgym._kwargs import parse_kwargs as _parse_kwargs

__all__ = ["COMMANDS", "build_parser", "main", "parse_kwargs"]

#: The command modules (``hopgym.cli.<name>``), in the order ``hopgym --help`` lists them.
COMMANDS = (
    "eval",
    "bench",
    "play",
    "view",
    "data",
    "index",
    "serve",
    "serve_env",
    "train",
    "bench_rl",
)


def parse_kwargs(items: Sequence[str], flag: str = "--kw") -> dict[str, Any]:
    """``key=value`` strings to a dict (:func:`hopgym._kwargs.parse_kwargs`); exits on bad input,
    naming ``flag``.

    Example:
        >>> parse_kwargs(["hops=3", "sources=('local','web')", "protocol=r3"])
        {'hops': 3, 'sources': ('local', 'web'), 'protocol': 'r3'}
        >>> parse_kwargs(["hops"], "--set")
        Traceback (most recent call last):
        ...
        SystemExit: hopgym: --set takes key=value, got 'hops'
    """
    try:
        return _parse_kwargs(items, flag)
    except KwargsError as exc:
        raise SystemExit(f"hopgym: {exc}") from None


def build_parser() -> Any:
    """The ``hopgym`` argument parser with every command."""
    from hopgym.cli._dataclass_args import ArgumentParser

    summary, _, details = __doc__.partition("\n\n")
    parser = ArgumentParser(
        prog="hopgym",
        description=" ".join(summary.split()),
        epilog=details.split("\n\n")[0].replace("\n", " "),
    )
    from hopgym import __version__

    parser.add_argument("--version", action="version", version=f"hopgym {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", title="commands")
    for name in COMMANDS:
        importlib.import_module(f"hopgym.cli.{name}").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hopgym`` command; returns the exit status.

    A refusal exits with one line, ``hopgym COMMAND: error: ...`` (status 1; each command's
    parser guards its ``run``, :func:`hopgym.cli._common.command_parser`, and this catches what a
    command added otherwise raises); an interrupt with status 130; a closed stdout ends the
    printing (status 0 when the command got that far: its files are written first).
    """
    from hopgym.cli._common import REFUSALS, error_line

    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("hopgym: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (hopgym index info DIR | head)
        # Python's recipe: point stdout at devnull so that flushing it at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except REFUSALS as exc:
        prog = " ".join(
            [
                "hopgym",
                *(
                    str(getattr(args, k))
                    for k in ("command", "index_command", "train_command")
                    if getattr(args, k, None)
                ),
            ]
        )
        raise SystemExit(f"{prog}: error: {error_line(exc)}") from None


if __name__ == "__main__":
    sys.exit(main())
