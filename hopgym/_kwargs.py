"""``KEY=VALUE`` arguments: :func:`parse_kwarg`, :func:`parse_kwargs` and :class:`KwargsError`.

The lowest floor of the package (standard library only), so that the command line, the agents and
the examples can all read ``--kw hops=3 protocol=r3`` the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import Any

__all__ = ["KwargsError", "parse_kwarg", "parse_kwargs"]


class KwargsError(ValueError):
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
