"""The observation vector of the featurized env: its layout and the features in it.

The vector is, in order: a hashed bag of words of the question and one of the documents shown at
the last step (``hash_dim`` each, binary), the global features (:func:`global_names`), the
:data:`SLOT_FEATURES` of each candidate slot, and optionally sentence embeddings of the question
and of the last documents. :class:`Progress` is what the features read about the episode besides
the :class:`~hopgym.envs.featurized.evidence.Evidence`.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from hopgym.corpora.questions import entity_key
from hopgym.corpora.types import Passage
from hopgym.envs.featurized.evidence import Candidate, Evidence

__all__ = ["SLOT_FEATURES", "Progress", "global_names", "global_features", "slot_features", "hash_index"]

#: Names of the per-slot candidate features, in order.
SLOT_FEATURES = (
    "exists",
    "kind_option",
    "kind_yesno",
    "kind_qentity",
    "kind_title",
    "kind_entity",
    "kind_year",
    "kind_number",
    "in_question",
    "recency",
    "rank",
    "count",
    "level",
    "final",
    "match_any",
    "depth",
    "queried",
    "doc_seen",
    "in_last_docs",
    "value_known",
    "value_min",
    "value_max",
    "yesno_support",
    "type_match",
)
_KINDS = ("option", "yesno", "qentity", "title", "entity", "year", "number")
_WH = ("who", "where", "when", "what", "which", "how", "yesno", "choice", "other")
_ACTION_TYPES = ("reset", "think", "search", "route", "answer", "invalid")


@dataclass
class Progress:
    """The featurizer's view of the episode so far, read from the text env's ``info``.

    Attributes:
        source: the current source.
        searches_by_source: searches issued per source.
        turn, searches: turns taken and searches issued.
        issued: keys of the queries issued.
        queried_keys: keys of the candidates searched for.
        last_docs: the documents the last search that found any returned.
        last_kind: the last action type (``reset`` before the first step).
        last_new, last_empty, last_error: the last search's document count, emptiness, error.
        last_relevant: whether the last search found a document on the question's chain.
        misses: searches in a row without one.
    """

    source: str
    searches_by_source: dict[str, int]
    turn: int = 0
    searches: int = 0
    issued: set[str] = field(default_factory=set)
    queried_keys: set[str] = field(default_factory=set)
    last_docs: list[Passage] = field(default_factory=list)
    last_kind: str = "reset"
    last_new: int = 0
    last_empty: bool = False
    last_error: bool = False
    last_relevant: bool = False
    misses: int = 0


def hash_index(token: str, dim: int, cache: dict[str, int]) -> int:
    """The bag-of-words slot of ``token``: CRC32, not Python's salted ``hash()``, so that it is
    the same slot in every process."""
    idx = cache.get(token)
    if idx is None:
        idx = cache[token] = zlib.crc32(token.encode()) % dim
    return idx


def global_names(sources: Sequence[str]) -> list[str]:
    """The names of the global features, in order (``sources`` adds two per source)."""
    names = [
        "turn",
        "turns_left",
        "searches",
        "docs_seen",
        "last_new",
        "last_empty",
        "last_error",
        "last_relevant",
        "misses",
    ]
    names += [f"last_{t}" for t in _ACTION_TYPES]
    names += [f"wh_{w}" for w in _WH]
    names += [
        "chain_length",
        "depth_reached",
        "final_found",
        "n_entities",
        "entities_covered",
        "n_candidates",
        "wants_min",
        "wants_max",
        "option_values",
        "same_yes",
        "same_no",
    ]
    names += [f"source_{s}" for s in sources] + [f"searches_{s}" for s in sources]
    return names


def global_features(
    p: Progress,
    ev: Evidence,
    slots: Sequence[Candidate],
    *,
    sources: Sequence[str],
    max_turns: int,
    top_k: int,
    max_candidates: int,
) -> list[float]:
    """The values of :func:`global_names`: step and budget, search history, question type,
    chain progress, comparison evidence and sources."""
    q = ev.question
    n = max(len(q.chain), 1)
    budget = float(max_turns)
    final = any(c.level >= len(q.chain) > 0 for c in slots)
    opts = [c for c in slots if c.kind == "option"]
    out = [
        p.turn / budget,
        max(max_turns - p.turn, 0) / budget,
        min(p.searches / budget, 1.0),
        min(len(ev.docs) / (budget * top_k), 1.0),
        min(p.last_new / top_k, 1.0),
        float(p.last_empty),
        float(p.last_error),
        float(p.last_relevant),
        min(p.misses / 3.0, 1.0),
    ]
    out += [float(p.last_kind == t) for t in _ACTION_TYPES]
    out += [float(q.wh == w) for w in _WH]
    out += [
        min(len(q.chain) / 4.0, 1.0),
        min(ev.max_depth / n, 1.0),
        float(final),
        min(len(q.entities) / 3.0, 1.0),
        sum(e in ev.doc_keys for e in q.entities) / max(len(q.entities), 1),
        len(slots) / max_candidates,
        float(q.wants == "min"),
        float(q.wants == "max"),
        sum(c.value is not None for c in opts) / 2.0,
        float(ev.same_yes),
        float(ev.same_no),
    ]
    out += [float(p.source == s) for s in sources]
    out += [min(p.searches_by_source.get(s, 0) / budget, 1.0) for s in sources]
    return out


def slot_features(p: Progress, ev: Evidence, slots: Sequence[Candidate]) -> list[float]:
    """The :data:`SLOT_FEATURES` of each slot in ``slots``, concatenated."""
    q = ev.question
    n = max(len(q.chain), 1)
    q_words = {w for e in q.entities for w in e.split()}
    last = p.searches
    want = ev.answer_kinds()
    rows: list[float] = []
    for c in slots:
        words = set(c.key.split())
        rows += (
            [1.0]
            + [float(c.kind == kind) for kind in _KINDS]
            + [
                len(words & q_words) / max(len(words), 1),
                1.0 / (1 + last - c.last_search) if c.last_search >= 0 else 0.0,
                1.0 / (1 + c.best_rank) if c.best_rank < 99 else 0.0,
                min(c.count / 5.0, 1.0),
                min(c.level / n, 1.0),
                float(c.level >= len(q.chain) > 0),
                float(c.match_any),
                min(c.depth / n, 1.0),
                float(c.key in p.queried_keys),
                float(entity_key(c.text) in ev.doc_keys),
                float(c.last_search == last and last > 0),
                float(c.value is not None),
                float(c.value_min),
                float(c.value_max),
                c.support,
                float(c.kind in want),
            ]
        )
    return rows
