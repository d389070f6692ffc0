"""Keyword arguments, read and checked the same way on every floor.

Functions: :func:`parse_kwarg` and :func:`parse_kwargs` (``KEY=VALUE`` text, as ``--kw hops=3
protocol=r3`` gives it), :func:`unknown_name_error` (one wording for a misspelt keyword). Class:
:class:`KwargsError`. Private helpers on the lowest floor (they import only :mod:`hopgym.errors`),
so that ``corpora``, the env options, the agents and the command line can all use them.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Iterable
from typing import Any

from hopgym.errors import HopgymError, InvalidOptionTypeError

__all__ = ["KwargsError", "parse_kwarg", "parse_kwargs", "unknown_name_error"]


class KwargsError(HopgymError, ValueError):
    """A ``KEY=VALUE`` argument without ``=`` or without a key."""


def parse_kwarg(item: str, flag: str = "--kw") -> tuple[str, Any]:
    """One ``key=value`` string to ``(key, value)``; the value is a Python literal where it parses.

    Args:
        item: the text, e.g. ``"sources=('local','web')"``.
        flag: the option it came from, named in the error.

    Raises:
        KwargsError: ``item`` has no ``=`` or an empty key.

    Example:
        >>> parse_kwarg("hops=3")
        ('hops', 3)
        >>> parse_kwarg("protocol=r3")
        ('protocol', 'r3')
    """
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise KwargsError(f"{flag} takes key=value, got {item!r}")
    try:
        value: Any = ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = raw
    return key.strip(), value


def parse_kwargs(items: Iterable[str], flag: str = "--kw") -> dict[str, Any]:
    """``key=value`` strings to a dict; values are Python literals where they parse, else strings.

    A key given twice keeps its last value.

    Example:
        >>> parse_kwargs(["hops=3", "sources=('local','web')", "protocol=r3"])
        {'hops': 3, 'sources': ('local', 'web'), 'protocol': 'r3'}
    """
    return dict(parse_kwarg(item, flag) for item in items)


#: How many known names an "unknown name" error lists (TRL's configs have ~200 fields).
_SHOWN = 12


def unknown_name_error(name: str, known: Iterable[str], what: str = "option") -> InvalidOptionTypeError:
    """An :class:`~hopgym.errors.InvalidOptionTypeError` for an unknown keyword, naming the closest.

    Example:
        >>> str(unknown_name_error("dedupe", ["dedup", "top_k"]))
        "unknown option 'dedupe' (did you mean 'dedup'?)"
        >>> str(unknown_name_error("zzz", ["dedup", "top_k"]))
        "unknown option 'zzz'; known: dedup, top_k"
    """
    names = list(dict.fromkeys(known))
    close = difflib.get_close_matches(str(name), names, n=1)
    if close:
        return InvalidOptionTypeError(f"unknown {what} {name!r} (did you mean {close[0]!r}?)")
    shown = ", ".join(names[:_SHOWN]) + (f", ... ({len(names)} in all)" if len(names) > _SHOWN else "")
    return InvalidOptionTypeError(f"unknown {what} {name!r}; known: {shown}")
