"""A text space that accepts any string: :class:`FreeText`.

``gymnasium.spaces.Text`` checks every character against a charset (alphanumeric by default), so real
passages with punctuation, accents or CJK text fail its ``contains``. Model turns and retrieved
documents are arbitrary unicode, so hopgym's spaces accept any ``str`` up to a length.

:class:`FreeText` has Gymnasium's shared-memory support (``create_shared_memory``,
``read_from_shared_memory``, ``write_to_shared_memory``), so that
``gym.make_vec(id, vectorization_mode="async")`` works with its default ``shared_memory=True``.
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np
from gymnasium.spaces import Space
from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from hopgym.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = ["FreeText", "SharedTexts"]

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


# Shared memory: one row of ``max_length + 1`` code points per sub-env, the text's length first
# (``Text``'s layout pads with a charset index; any code point, NUL included, can be in a FreeText).
# UTF-32 with "surrogatepass" carries every str, lone surrogates too.
_CODE = np.dtype("<u4")


class SharedTexts(Sequence[str]):
    """The texts of all sub-envs in a shared-memory block, read when indexed.

    ``AsyncVectorEnv`` reads its observations from shared memory once, when it is built, and
    returns that object at every step (a deep copy of it by default): this view is what it reads,
    so that every access sees the workers' latest texts. ``copy.deepcopy`` and pickling give a
    plain tuple of strings, which is what ``AsyncVectorEnv(copy=True)`` (the default) returns.
    """

    def __init__(self, rows: np.ndarray) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        row = self._rows[index]
        return row[1 : 1 + int(row[0])].astype(_CODE).tobytes().decode("utf-32-le", "surrogatepass")

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SharedTexts | tuple | list):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # its contents change

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, (tuple(self),))


def _rows(space: FreeText, shared: Any) -> np.ndarray:
    return np.frombuffer(shared.get_obj(), dtype=np.uint32).reshape(-1, space.max_length + 1)


@create_shared_memory.register(FreeText)
def _create_free_text_shared_memory(space: FreeText, n: int = 1, ctx: ModuleType = mp) -> Any:
    return ctx.Array(np.dtype(np.uint32).char, n * (space.max_length + 1))


@read_from_shared_memory.register(FreeText)
def _read_free_text_from_shared_memory(space: FreeText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(_rows(space, shared_memory)[:n])


@write_to_shared_memory.register(FreeText)
def _write_free_text_to_shared_memory(space: FreeText, index: int, value: str, shared_memory: Any) -> None:
    if not space.contains(value):
        raise InvalidOptionTypeError(
            f"{space} holds strings of at most {space.max_length} characters, got {type(value).__name__}"
            + (f" of {len(value)}" if isinstance(value, str) else "")
        )
    row = _rows(space, shared_memory)[index]
    codes = np.frombuffer(value.encode("utf-32-le", "surrogatepass"), dtype=_CODE)
    row[1 : 1 + len(codes)] = codes
    row[0] = len(codes)
