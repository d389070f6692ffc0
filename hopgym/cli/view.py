"""``hopgym view``: the HTML report of a trajectory file, or the comparison of two.

Options: :class:`ViewConfig`. The report itself is :func:`hopgym.viewer.write_report`.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hopgym.cli._common import CommandError, command_parser, say
from hopgym.cli._dataclass_args import add_config_arguments, config_from_args

__all__ = ["ViewConfig", "add_parser", "run"]


@dataclass
class ViewConfig:
    """Which trajectory files ``hopgym view`` reads and where the report goes."""

    runs: tuple[str, ...] = field(
        metadata={
            "help": "Trajectory file(s) of hopgym eval --trajectories; a second one is compared with "
            "the first.",
            "positional": True,
            "metavar": "RUN.jsonl",
            "commas": False,
        }
    )
    out: str | None = field(
        default=None,
        metadata={
            "help": "Output file (default: RUN.html, or A-vs-B.html, beside the first file).",
            "aliases": ("-o",),
            "metavar": "HTML",
        },
    )


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``view`` to the ``hopgym`` command."""
    p = command_parser(
        subparsers,
        "view",
        "HTML report of a trajectory file (two: compare them)",
        "Write one self-contained HTML file (no server, opens offline): summary, "
        "charts and every episode of a trajectory file, or what a second run "
        "fixed and broke compared with the first.",
        run=run,
    )
    add_config_arguments(p, ViewConfig)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym view``."""
    from hopgym.agents.trajectories import TrajectoryCutWarning
    from hopgym.viewer import write_report

    cfg = config_from_args(args, ViewConfig)
    if len(cfg.runs) > 2:
        raise CommandError(f"give one trajectory file, or two to compare; got {len(cfg.runs)}")
    if cfg.out is not None and Path(cfg.out).is_dir():
        raise CommandError(
            f"-o {cfg.out} is a directory: give the report's file name, e.g. {Path(cfg.out) / 'run.html'}"
        )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TrajectoryCutWarning)
        try:
            path = write_report(cfg.runs, cfg.out)
        except FileNotFoundError as exc:  # the trajectory format's own errors pass through
            raise CommandError(str(exc)) from None
    for w in caught:  # a file cut by a crash: its complete episodes are shown; say what was left out
        if issubclass(w.category, TrajectoryCutWarning):
            print(f"hopgym view: warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    say(str(path))
    return 0
