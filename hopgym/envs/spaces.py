"""A text space that accepts any string: :class:`FreeText`.

``gymnasium.spaces.Text`` checks every character against a charset (alphanumeric by default), so real
passages with punctuation, accents or CJK text fail its ``contains``. Model turns and retrieved
documents are arbitrary unicode, so hopgym's spaces accept any ``str`` up to a length.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Space

from hopgym.errors import InvalidOptionError

__all__ = ["FreeText"]

# Sorted so that samples are identical across processes (set order depends on hash seeds).
_SAMPLE_CHARS = np.array(sorted(set(string.printable) | set("éßøλ中<>/")))


class FreeText(Space[str]):
    """Any Python string of at most ``max_length`` characters.

    ``sample()`` draws printable text, sometimes wrapped in protocol tags, so random agents exercise
    both the valid and the corrective paths of an env.

    Example:
        >>> space = FreeText(100, seed=0)
        >>> space.contains("Doc 1 (Title: Zürich) « quoted » text")
        True
        >>> space.contains(b"bytes")
        False
    """

    def __init__(self, max_length: int, *, seed: int | np.random.Generator | None = None) -> None:
        if max_length < 1:
            raise InvalidOptionError(f"max_length must be >= 1, got {max_length}")
        self.max_length = int(max_length)
        super().__init__(dtype=str, seed=seed)

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string; about half of the samples are tag-shaped actions."""
        if mask is not None or probability is not None:
            raise NotImplementedError("FreeText.sample takes no mask or probability")
        n = int(self.np_random.integers(0, min(self.max_length, 48) + 1))
        text = "".join(self.np_random.choice(_SAMPLE_CHARS, size=n))
        tag = ("think", "search", "route", "answer", None, None, None, None)[int(self.np_random.integers(8))]
        if tag is not None:
            text = f"<{tag}>{text}</{tag}>"
        return text[: self.max_length]

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"FreeText({self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FreeText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("FreeText", self.max_length))
