"""MkDocs hook: the command-line reference, generated from the ``hopgym`` argument parsers.

The line ``<!-- cli-reference -->`` of a page becomes one section per command and subcommand
(``hopgym``, ``hopgym eval``, ``hopgym index build``, ...) holding what its ``--help`` prints, so
the reference cannot drift from the options (which are themselves generated from the config
dataclasses the commands run).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from typing import Any

MARKER = "<!-- cli-reference -->"
WIDTH = "100"  # columns argparse wraps the help at, whatever the terminal building the site


def parsers() -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``(prog, parser)`` of ``hopgym`` and of every command and subcommand, depth first."""
    from hopgym.cli import build_parser

    def walk(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
        yield parser.prog, parser
        for action in parser._actions:  # argparse keeps subparsers only here
            if isinstance(action, argparse._SubParsersAction):
                seen: set[int] = set()
                for sub in action.choices.values():
                    if id(sub) not in seen:  # aliases map to the same parser
                        seen.add(id(sub))
                        yield from walk(sub)

    yield from walk(build_parser())


def render() -> str:
    """The reference: a heading and the ``--help`` text of every parser."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        sections = [
            f"## `{prog}`\n\n```text\n{parser.format_help().rstrip()}\n```" for prog, parser in parsers()
        ]
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old
    return "\n\n".join(sections)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """The MkDocs event: the reference in place of its marker."""
    return markdown.replace(MARKER, render()) if MARKER in markdown else markdown
