"""JSON in model text, read in linear time with a nesting limit: :func:`decode`, :func:`repair`,
:func:`dumps`. Constants: :data:`MAX_DEPTH`.

:func:`json.loads` recurses once per level of ``[``/``{``: a turn of a thousand ``[`` raises
``RecursionError``. Here the extent of a bracketed value is found first by one scan over its
strings and brackets (a regular expression that never backtracks: possessive string bodies), and
a value nested deeper than :data:`MAX_DEPTH` levels is refused with a ``ValueError`` that says
so; only a value within the limit is handed to the decoder.
"""

from __future__ import annotations

import json
import re
from typing import Any

from hopgym.errors import HopgymError

__all__ = ["MAX_DEPTH", "TOO_DEEP", "JSONTextError", "decode", "repair", "dumps"]

#: The deepest nesting of ``[`` and ``{`` read in a tool call (tool calls need 3 or 4).
MAX_DEPTH = 32

# A string (its closing quote in group 1; unterminated strings run to the end) or a bracket. The
# string body is an unrolled loop: runs of plain characters are read at once, not one by one.
_TOKEN_RE = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(")?|[\[\]{}]', re.DOTALL)
_DECODER = json.JSONDecoder()
#: The reason of a value nested deeper than :data:`MAX_DEPTH`.
TOO_DEEP = f"nested deeper than {MAX_DEPTH} levels of [ and {{"
_CLOSER = {"{": "}", "[": "]"}


class JSONTextError(HopgymError, ValueError):
    """A JSON value that cannot be read: ``reason`` says why; ``end`` is where the reading of
    the value stopped (the end of the text for an unfinished one); ``unfinished`` marks a value
    the text ends inside; ``closers`` the brackets it leaves open (innermost last), when the
    text does not end inside a string."""

    def __init__(self, reason: str, end: int, *, unfinished: bool = False, closers: str | None = None):
        super().__init__(reason)
        self.reason, self.end, self.unfinished, self.closers = reason, end, unfinished, closers


def extent(text: str, start: int) -> tuple[int, str | None]:
    """Where the bracketed value that opens at ``text[start]`` (``[`` or ``{``) ends, in one
    pass, and how: ``(end, "")`` when it closes (a closing bracket of the wrong kind ends it
    too: the decoder then says what is wrong); ``(len(text), closers)`` when the text ends
    inside it (``closers``: the brackets that would close it); ``(len(text), None)`` when the
    text ends inside a string of it; ``(position, None)`` at the bracket that nests deeper than
    :data:`MAX_DEPTH`."""
    stack: list[str] = []
    for m in _TOKEN_RE.finditer(text, start):
        c = m.group()[0]
        if c == '"':
            if m.group(1) is None:
                return len(text), None
        elif c in "[{":
            stack.append(c)
            if len(stack) > MAX_DEPTH:
                return m.start(), None
        elif not stack or _CLOSER[stack.pop()] != c or not stack:
            return m.end(), ""
    return len(text), "".join(_CLOSER[c] for c in reversed(stack))


def decode(text: str, start: int = 0) -> tuple[Any, int]:
    """The JSON value at ``text[start]`` and where it ends (as :meth:`json.JSONDecoder.raw_decode`).

    Raises:
        JSONTextError: malformed, unfinished, or nested deeper than :data:`MAX_DEPTH`.

    Example:
        >>> decode('x {"a": [1]} y', 2)
        ({'a': [1]}, 12)
        >>> decode("[" * 1000)
        Traceback (most recent call last):
            ...
        hopgym.turns.json_scan.JSONTextError: nested deeper than 32 levels of [ and {
    """
    if start < len(text) and text[start] in "[{":
        end, closers = extent(text, start)
        if closers is None and end < len(text):
            raise JSONTextError(TOO_DEEP, end)
        if closers is None or closers:
            raise JSONTextError("the text ends inside it", end, unfinished=True, closers=closers)
        try:
            return json.loads(text[start:end]), end
        except ValueError as exc:
            raise JSONTextError(str(exc), end) from None
    try:
        return _DECODER.raw_decode(text, start)
    except ValueError as exc:
        raise JSONTextError(str(exc), len(text)) from None


def repair(text: str, error: JSONTextError) -> Any:
    """The value of an unfinished JSON ``text`` (``error``: what :func:`decode` raised on it)
    closed with the brackets it leaves open, when that is the one way to finish it: the text
    does not end inside a string or after a comma or colon. Raises ``error`` otherwise.

    Example:
        >>> def read(text):
        ...     try:
        ...         return decode(text)[0]
        ...     except JSONTextError as exc:
        ...         return repair(text, exc)
        >>> read('{"name": "answer", "arguments": {"answer": "China"}')
        {'name': 'answer', 'arguments': {'answer': 'China'}}
        >>> read('{"name": "answer", "arguments": {"answer": "Chi')
        Traceback (most recent call last):
            ...
        hopgym.turns.json_scan.JSONTextError: the text ends inside it
    """
    text = text.strip()
    if not (error.unfinished and error.closers) or text.endswith((",", ":")):
        raise error
    try:
        return json.loads(text + error.closers)
    except ValueError:
        raise error from None


def dumps(value: Any) -> str:
    """``value`` as JSON text, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False)
