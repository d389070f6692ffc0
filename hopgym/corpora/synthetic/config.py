"""The synthetic world's configuration: :class:`WorldConfig` and the question kinds (:data:`KINDS`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hopgym.errors import InvalidOptionError

__all__ = ["KINDS", "WorldConfig"]

KINDS = ("bridge", "compositional", "comparison", "bridge_comparison", "inference")
_KIND_HOPS = {
    "bridge": (1, 2, 3, 4),
    "compositional": (1, 2, 3, 4),
    "comparison": (2,),
    "bridge_comparison": (3, 4),
    "inference": (2, 3, 4),
}
_SOURCE_SETS = (("local",), ("local", "web"))


@dataclass(frozen=True)
class WorldConfig:
    """Everything that determines a synthetic world. Frozen and hashable (a cache key).

    Args:
        seed: the world's seed; the same config gives byte-identical passages and questions.
        n_entities: number of entities, hence documents; passages = ``n_entities *
            passages_per_doc`` in the complete corpus (100 .. 5,000,000).
        hops: allowed hop counts (an int or a tuple among 1..4).
        kinds: allowed question kinds (a subset of :data:`KINDS`, or one name).
        n_questions: number of questions (train and test together).
        distractors: strength 0..1: the share of entities given a confusable near-namesake
            (and a "Not to be confused with" note). 0 gives an easy world.
        passages_per_doc: split each document into this many passages (1..3); ids become
            ``e000123-p1`` ... when above 1.
        phrasing_variety: templates used per fact (1..3); 1 writes every fact the same way.
        sources: ``("local",)`` or ``("local", "web")``.
        local_coverage: with two sources, the share of regions (hence roughly of documents) the
            cheap local corpus covers, in (0, 1]; the web always covers everything.
        web_noise: share of entities with an extra mirror page on the web (0..1).
        test_fraction: share of entities held out as test entities (0 .. 0.9).

    Example:
        >>> WorldConfig(hops=3).hops
        (3,)
        >>> WorldConfig(hops=5)
        Traceback (most recent call last):
        ...
        hopgym.errors.InvalidOptionError: hops must be ints in 1..4, got (5,)
    """

    seed: int = 0
    n_entities: int = 3000
    hops: int | tuple[int, ...] = (2, 3)
    kinds: str | tuple[str, ...] = KINDS
    n_questions: int = 1000
    distractors: float = 0.5
    passages_per_doc: int = 1
    phrasing_variety: int = 3
    sources: tuple[str, ...] = ("local",)
    local_coverage: float = 0.5
    web_noise: float = 0.3
    test_fraction: float = 0.2

    def __post_init__(self) -> None:
        def bad(msg: str) -> ValueError:
            return InvalidOptionError(msg)

        def is_int(x: object) -> bool:
            return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

        def is_num(x: object) -> bool:
            return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)

        # Any: the field's annotation is what callers should pass, not what they may; checked here.
        given: Any = (self.hops,) if is_int(self.hops) else self.hops
        try:
            if isinstance(given, str) or not all(is_int(h) for h in given):
                raise TypeError
            hops = tuple(sorted({int(h) for h in given}))
        except TypeError:
            raise bad(f"hops must be an int or a tuple of ints in 1..4, got {self.hops!r}") from None
        if not hops or any(h < 1 or h > 4 for h in hops):
            raise bad(f"hops must be ints in 1..4, got {hops!r}")
        kinds = (self.kinds,) if isinstance(self.kinds, str) else tuple(self.kinds)
        unknown = [k for k in kinds if k not in KINDS]
        if not kinds or unknown:
            raise bad(f"kinds must be a non-empty subset of {KINDS}, got unknown {unknown!r}")
        kinds = tuple(k for k in KINDS if k in kinds)  # canonical order
        if not any(h in _KIND_HOPS[k] for k in kinds for h in hops):
            allowed = {k: _KIND_HOPS[k] for k in kinds}
            raise bad(
                f"no question kind in {kinds} has a hop count in {hops}: allowed hops per kind are {allowed}"
            )
        object.__setattr__(self, "hops", hops)
        object.__setattr__(self, "kinds", kinds)
        if not is_int(self.seed) or self.seed < 0:
            raise bad(f"seed must be an int >= 0, got {self.seed!r}")
        if not is_int(self.n_entities) or not 100 <= self.n_entities <= 5_000_000:
            raise bad(f"n_entities must be an int in 100..5,000,000, got {self.n_entities!r}")
        if not is_int(self.n_questions) or self.n_questions < 1:
            raise bad(f"n_questions must be an int >= 1, got {self.n_questions!r}")
        for name, lo, hi in (("distractors", 0.0, 1.0), ("web_noise", 0.0, 1.0), ("test_fraction", 0.0, 0.9)):
            v = getattr(self, name)
            if not is_num(v) or not lo <= float(v) <= hi:
                raise bad(f"{name} must be a number in [{lo}, {hi}], got {v!r}")
        if not is_num(self.local_coverage) or not 0.0 < float(self.local_coverage) <= 1.0:
            raise bad(f"local_coverage must be a number in (0, 1], got {self.local_coverage!r}")
        if not is_int(self.passages_per_doc) or not 1 <= self.passages_per_doc <= 3:
            raise bad(f"passages_per_doc must be 1, 2 or 3, got {self.passages_per_doc!r}")
        if not is_int(self.phrasing_variety) or not 1 <= self.phrasing_variety <= 3:
            raise bad(f"phrasing_variety must be 1, 2 or 3, got {self.phrasing_variety!r}")
        sources = (self.sources,) if isinstance(self.sources, str) else tuple(self.sources)
        if sources not in _SOURCE_SETS:
            raise bad(f"sources must be ('local',) or ('local', 'web'), got {self.sources!r}")
        object.__setattr__(self, "sources", sources)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> WorldConfig:
        """Build a config from keyword arguments (CLI ``--kw``), naming any unknown key.

        Example:
            >>> WorldConfig.from_kwargs(seed=3, hops=2).seed
            3
        """
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - names)
        if unknown:
            raise InvalidOptionError(f"unknown WorldConfig argument(s) {unknown}; valid: {sorted(names)}")
        return cls(**kwargs)

    @property
    def kind_hops(self) -> tuple[tuple[str, int], ...]:
        """The (kind, hops) combinations questions are drawn from, uniformly."""
        assert isinstance(self.hops, tuple)  # __post_init__ makes hops a tuple
        return tuple((k, h) for k in self.kinds for h in self.hops if h in _KIND_HOPS[k])
