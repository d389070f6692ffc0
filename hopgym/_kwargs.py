"""Keyword-name checks shared by every floor: :func:`unknown_name_error`.

Private helper with no hopgym imports, so that the lowest floor (``corpora``) and the env options
use the same wording for a misspelt keyword.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["unknown_name_error"]


def unknown_name_error(name: str, known: Iterable[str], what: str = "option") -> TypeError:
    """A ``TypeError`` for an unknown keyword, suggesting the closest known one.

    Example:
        >>> str(unknown_name_error("dedupe", ["dedup", "top_k"]))
        "unknown option 'dedupe' (did you mean 'dedup'?)"
        >>> str(unknown_name_error("zzz", ["dedup", "top_k"]))
        "unknown option 'zzz'; known: dedup, top_k"
    """
    names = list(dict.fromkeys(known))
    close = difflib.get_close_matches(str(name), names, n=1)
    if close:
        return TypeError(f"unknown {what} {name!r} (did you mean {close[0]!r}?)")
    return TypeError(f"unknown {what} {name!r}; known: {', '.join(names)}")
