"""A numeric view of any hopgym text env, for classic RL libraries: :class:`FeaturizedEnv`.

Classes: :class:`FeaturizedEnv`, :class:`QuestionInfo`, :class:`Candidate`.
Functions: :func:`make_featurized` (the entry point of ``hopgym/SyntheticFeaturized-v0``),
:func:`read_question`, :func:`extract_spans`, :func:`sentence_concepts`.

A :class:`FeaturizedEnv` wraps a real hopgym text env (reward wrappers and all) and steps it with
structured actions, so rewards, ``info`` and ``info["reward_terms"]`` are the text env's own. What
changes is the interface: the observation is a ``Box`` of floats and the action is a ``Discrete``
index into a list of candidate actions built from the current state:

- slot ``0``: search with the question itself;
- slots ``1..K``: search for candidate ``i`` (an entity, title, year or number read from the
  retrieved documents, or an entity/option of the question) plus the relation word to follow
  from it (``"Maren Oskdal born"``);
- slots ``K+1..K+S``: route to source ``j``;
- slots ``K+S+1..2K+S``: answer with candidate ``i``.

``action_masks()`` (the method sb3-contrib's ``MaskablePPO`` calls) marks the sensible choices. A
choice that names no candidate (an empty slot, an index out of range, a non-integer) is stepped as
an *invalid turn* of the text env: it costs a turn, a ``FormatReward`` may penalise it, and nothing
raises. Masked but existing choices (a repeated query, a route to the current source) are executed
as the text env would execute them.

How candidates are read. The featurizer knows a small English relation lexicon (directed, founded,
headquartered, located, born, father, spouse, studied, country, capital, released, population) and
kinship words (grandfather, mother, father-in-law, …). It turns the question into a *chain* of
relations, innermost first ("Where did the director of X study?" -> ``direct, study``), gives
every retrieved document a *depth* (1 for a document about a question entity, ``d + 1`` for one
about a candidate reached at depth ``d``) and scores each candidate by the deepest level at which
it sits in a sentence expressing the relation the chain expects there. Comparison questions get
the values (years, populations) of their options and yes/no questions the evidence for a shared
value. The policy still has to learn what to do with these features: when to search which
candidate, when to route, when to answer and with what.
"""

from __future__ import annotations

import functools
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from hopgym.corpora.types import Passage
from hopgym.envs.actions import Action, Answer, Route, Search

__all__ = [
    "FeaturizedEnv",
    "Candidate",
    "QuestionInfo",
    "make_featurized",
    "read_question",
    "extract_spans",
    "sentence_concepts",
    "DEFAULT_REWARD",
    "SLOT_FEATURES",
    "CONCEPTS",
]

#: The reward preset :func:`make_featurized` applies by default.
DEFAULT_REWARD = "default"

_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
# A capitalised span: capitalised words, possibly joined by a few lower-case particles
# ("University of Lorn", "Night at Harrow Pier").
_CAPS = re.compile(
    r"[A-Z][\w'-]*(?:\s+(?:(?:of|the|de|del|da|von|van|der|du|la|le|at|on|upon)\s+)*[A-Z][\w'-]*)*")
_YEAR = re.compile(r"\b(?:1[0-9]{3}|20[0-9]{2})\b")
_NUMBER = re.compile(r"\b\d{1,3}(?:,\d{3})+\b|\b\d+(?:\.\d+)?\b")
_SENT = re.compile(r"(?<=[.!?;])\s+")
_CHOICE = re.compile(r",\s*(.+?)\s+or\s+(.+?)\?*\s*$")
# Capitalised words that open sentences or questions without naming anything.
_CAP_STOP = frozenset(
    """a an the he she it its his her they their them this that these those in on at after
    before during since both who whom whose which what where when how is was are were did do does
    has have had born there here then also not notable directed""".split())
_AUX = frozenset("is was are were did do does has have had can could".split())
_WH = ("who", "where", "when", "what", "which", "how", "yesno", "choice", "other")
_WANTS_MIN = frozenset(
    "first earlier earliest older oldest fewer fewest smaller smallest less".split())
_WANTS_MAX = frozenset(
    "later latest recently recent younger youngest larger largest more most bigger biggest".split())

#: Relation concepts: name -> (question cue prefixes, document cue prefixes). Cues are matched as
#: word prefixes, on lower-case words only (so "University of X" does not cue ``located``).
CONCEPTS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "direct": (("direct",), ("direct",)),
    "found": (("found", "establish", "start"), ("found", "establish")),
    "hq": (("headquarter",), ("headquarter", "based")),
    "loc": (("locat", "situat"), ("locat", "university", "based", "situat")),
    "birth": (("born", "birth"), ("born", "birth")),
    "father": (("father", "dad"), ("father", "son", "daughter")),
    "spouse": (("spouse", "marr", "wife", "husband"), ("spouse", "marr", "wife", "husband")),
    "study": (("stud", "attend", "alma", "graduat", "educat"), ("stud", "graduat", "educat")),
    "country": (("country", "nation"), ("country", "lies", "located", "city", "town", "nation")),
    "capital": (("capital",), ("capital",)),
    "release": (("releas", "came", "come", "premiere"), ("releas", "film", "premiere")),
    "pop": (("population", "inhabitant", "live", "populous"),
            ("population", "inhabitant", "live", "home", "populous")),
}
_CONCEPT_NAMES = tuple(CONCEPTS)
# Kinship words as relation chains, innermost first ("mother of X" = spouse of the father of X).
_KINSHIP: dict[str, tuple[str, ...]] = {
    "grandfather": ("father", "father"),
    "grandmother": ("father", "father", "spouse"),
    "mother": ("father", "spouse"),
    "father-in-law": ("spouse", "father"),
    "mother-in-law": ("spouse", "father", "spouse"),
    "grandfather-in-law": ("spouse", "father", "father"),
}

#: Names of the per-slot candidate features, in order.
SLOT_FEATURES = (
    "exists", "kind_option", "kind_yesno", "kind_qentity", "kind_title", "kind_entity",
    "kind_year", "kind_number", "in_question", "recency", "rank", "count", "level", "final",
    "match_any", "depth", "queried", "doc_seen", "in_last_docs", "value_known", "value_min",
    "value_max", "yesno_support", "type_match",
)
_F = len(SLOT_FEATURES)
_KINDS = ("option", "yesno", "qentity", "title", "entity", "year", "number")


@functools.lru_cache(maxsize=65536)
def _key(text: str) -> str:
    """Identity of a candidate: lower case, articles and punctuation dropped."""
    return " ".join(w for w in _WORD.findall(text.lower()) if w not in ("the", "a", "an"))


def _hash(token: str, dim: int, cache: dict[str, int]) -> int:
    # CRC32, not Python's salted hash(): the same slot in every process.
    idx = cache.get(token)
    if idx is None:
        idx = cache[token] = zlib.crc32(token.encode()) % dim
    return idx


@functools.lru_cache(maxsize=65536)
def _concepts_of(word: str, side: int) -> tuple[str, ...]:
    return tuple(name for name, cues in CONCEPTS.items() if word.startswith(cues[side]))


def sentence_concepts(sentence: str) -> frozenset[str]:
    """The relation concepts a document sentence expresses (cued by its lower-case words).

    Example:
        >>> sorted(sentence_concepts("Maren Oskdal (born 1931) is a chemist who studied at Lorn."))
        ['birth', 'study']
    """
    out: set[str] = set()
    for i, w in enumerate(_WORD.findall(sentence)):
        # Capitalised words name things ("University of Lorn"), except the sentence's first
        # ("Directed by ...").
        if w[0].islower() or i == 0:
            out.update(_concepts_of(w.lower(), 1))
    return frozenset(out)


def _strip_caps(span: str) -> str:
    parts = span.split()
    while parts and parts[0].lower() in _CAP_STOP:
        parts = parts[1:]
    return " ".join(parts)


@dataclass(frozen=True)
class QuestionInfo:
    """What the featurizer reads off a question.

    Attributes:
        text: the question.
        wh: its type, one of ``who where when what which how yesno choice other``.
        entities: keys of the capitalised spans it names, in order.
        entity_texts: those spans as written.
        chain: relation concepts to follow, innermost first.
        words: for each concept, the question word that expresses it (hop queries use it).
        options: the two options of a choice question (``"…, A or B?"``), else empty.
        wants: ``"min"``, ``"max"`` or ``""`` (which extreme a comparison asks for).
    """

    text: str
    wh: str
    entities: tuple[str, ...]
    entity_texts: tuple[str, ...]
    chain: tuple[str, ...]
    words: Mapping[str, str]
    options: tuple[str, ...]
    wants: str

    @property
    def relation_words(self) -> tuple[str, ...]:
        """The question words of the chain, in chain order."""
        return tuple(dict.fromkeys(self.words[c] for c in self.chain))


@functools.lru_cache(maxsize=4096)
def read_question(question: str) -> QuestionInfo:
    """Parse a question into :class:`QuestionInfo`.

    Example:
        >>> q = read_question("Where did the director of Kemuzu Voiage II study?")
        >>> q.wh, q.entities, q.chain
        ('where', ('kemuzu voiage ii',), ('direct', 'study'))
        >>> read_question("Who is the paternal grandmother of Kewo Gaya?").chain
        ('father', 'father', 'spouse')
        >>> read_question("In which country is the city where Tartar University is located?").chain
        ('loc', 'country')
        >>> q = read_question("Which film came out first, The Glass Orchard or Night at Harrow?")
        >>> q.options, q.wants, q.chain
        (('The Glass Orchard', 'Night at Harrow'), 'min', ('release',))
    """
    words = list(_WORD.finditer(question))
    first = words[0].group(0).lower() if words else ""
    m = _CHOICE.search(question)
    options = (m.group(1).strip(), m.group(2).strip()) if m else ()
    low = question.lower()
    if options:
        wh = "choice"
    elif first in _AUX:
        wh = "yesno"
    elif first in ("who", "whom", "whose"):
        wh = "who"
    elif first in ("where", "when", "what", "which", "how"):
        wh = first
    else:
        wh = "other"
    if re.search(r"\b(which|what) year\b", low):
        wh = "when" if wh not in ("choice", "yesno") else wh
    elif wh == "other" and re.search(r"\bwhich\b", low):
        wh = "which"
    # Entities: capitalised spans (the question's first word excluded), as (start, end, text).
    spans: list[tuple[int, int, str]] = []
    for mm in _CAPS.finditer(question):
        text = mm.group(0)
        start = mm.start()
        stripped = _strip_caps(text)
        if not stripped:
            continue
        start += len(text) - len(stripped)
        spans.append((start, start + len(stripped), stripped))
    entities = tuple(dict.fromkeys(_key(t) for _, _, t in spans if _key(t)))
    entity_texts = tuple(dict.fromkeys(t for _, _, t in spans if _key(t)))
    # Relation units with positions; kinship words expand to chains.
    units: list[tuple[int, tuple[str, ...], str]] = []
    inside = [(s, e) for s, e, _ in spans]
    for w in words:
        if any(s <= w.start() < e for s, e in inside):
            continue
        lw = w.group(0).lower()
        base = lw[6:] if lw.startswith("great-") else lw
        greats = 0
        while lw.startswith("great-" * (greats + 1)):
            greats += 1
        base = lw[6 * greats:]
        if base in _KINSHIP:
            chain_unit = ("father",) * greats + _KINSHIP[base]
            units.append((w.start(), chain_unit, lw))
            continue
        found = _concepts_of(lw, 0)
        if found:
            units.append((w.start(), (found[0],), lw))
    # The chain: relations before the (last) entity read outwards from it, then those after it;
    # "the city where X is located" puts the innermost relation after the entity.
    chain: list[str] = []
    words_of: dict[str, str] = {}
    if spans:
        anchor_start, anchor_end = spans[-1][0], spans[-1][1]
        before = [u for u in units if u[0] < anchor_start]
        after = [u for u in units if u[0] >= anchor_end]
        prev = question[:anchor_start].rstrip().lower()
        nested = prev.endswith(" where") and after
        seq: list[tuple[int, tuple[str, ...], str]] = []
        if nested:
            seq.append(after[0])
            after = after[1:]
        seq += list(reversed(before)) + after
        # Options of a comparison both sit at the end; the compared relation comes last.
        for _, unit, word in seq:
            for c in unit:
                chain.append(c)
                words_of.setdefault(c, word)
    else:
        for _, unit, word in units:
            for c in unit:
                chain.append(c)
                words_of.setdefault(c, word)
    if options:
        # In "Who was born first, the director of A or B?" the compared relation is "born" and
        # the options may carry their own bridge ("the director of A"); keep the compared one last.
        compared = [c for pos, unit, _ in units if pos < question.find(options[0]) for c in unit]
        inner = [c for pos, unit, _ in units if pos >= question.find(options[0]) for c in unit]
        chain = inner + compared[-1:] if compared else inner
    tokens = {w.group(0).lower() for w in words}
    wants = "min" if tokens & _WANTS_MIN else ("max" if tokens & _WANTS_MAX else "")
    return QuestionInfo(text=question, wh=wh, entities=entities, entity_texts=entity_texts,
                        chain=tuple(chain), words=words_of, options=options, wants=wants)


def extract_spans(text: str) -> list[tuple[str, str, int]]:
    """Candidate answers in one document text: ``(span, kind, sentence index)``.

    Kinds: ``entity`` (capitalised span), ``year``, ``number``.

    Example:
        >>> extract_spans("Maren Oskdal (born 1931) is an engineer. She was born in Cardell.")
        [('Maren Oskdal', 'entity', 0), ('1931', 'year', 0), ('Cardell', 'entity', 1)]
    """
    out: list[tuple[str, str, int]] = []
    for si, sent in enumerate(_SENT.split(text)):
        out.extend((s, k, si) for s, k in _sentence_spans(sent))
    return out


def _sentence_spans(sent: str) -> list[tuple[str, str]]:
    found: list[tuple[int, str, str]] = []
    for m in _CAPS.finditer(sent):
        stripped = _strip_caps(m.group(0))
        if stripped:
            found.append((m.end() - len(stripped), stripped, "entity"))
    years = set()
    for m in _YEAR.finditer(sent):
        years.add(m.start())
        found.append((m.start(), m.group(0), "year"))
    for m in _NUMBER.finditer(sent):
        if m.start() not in years:
            found.append((m.start(), m.group(0), "number"))
    return [(span, kind) for _, span, kind in sorted(found, key=lambda t: t[0])]


@dataclass
class _Doc:
    """A retrieved document, parsed once."""

    passage: Passage
    key: str
    search: int
    rank: int
    sentences: tuple[tuple[frozenset[str], tuple[tuple[str, str, str], ...]], ...]
    depth: int = 0


@functools.lru_cache(maxsize=32768)
def _parse_text(text: str) -> tuple[tuple[frozenset[str], tuple[tuple[str, str, str], ...]], ...]:
    # Pure and keyed by the text: documents come back in many episodes, parse each once.
    return tuple((sentence_concepts(sent), tuple((s, k, _key(s)) for s, k in _sentence_spans(sent)))
                 for sent in _SENT.split(text))


@functools.lru_cache(maxsize=32768)
def _doc_words(contents: str) -> tuple[str, ...]:
    return tuple(set(_WORD.findall(contents.lower())))


def _parse_doc(passage: Passage, search: int, rank: int) -> _Doc:
    return _Doc(passage, _key(passage.title), search, rank, _parse_text(passage.text))


@dataclass
class Candidate:
    """One candidate answer / hop target, with the evidence gathered about it so far.

    ``level`` is the deepest chain position at which it was found in a sentence expressing the
    relation the chain expects there (0: never); ``final`` means ``level == len(chain)``.
    """

    text: str
    kind: str
    key: str
    order: int = 0
    first_search: int = 99
    last_search: int = -1
    best_rank: int = 99
    count: int = 0
    level: int = 0
    depth: int = 0
    match_any: bool = False
    value: float | None = None
    value_min: bool = False
    value_max: bool = False
    support: float = 0.0
    resolved_from: str = field(default="", repr=False)


class FeaturizedEnv(gym.Env[np.ndarray, np.int64]):
    """A hopgym text env seen through numeric features and a discrete candidate-action list.

    ## Description
    Wraps a hopgym text env (``gym.make("hopgym/…")``, reward wrappers included) and steps it with
    structured actions chosen from a per-state candidate list, so that MLP policies from
    Stable-Baselines3 (PPO, A2C, DQN) or sb3-contrib (MaskablePPO) can learn to search, route and
    answer. Rewards, termination, truncation and ``info`` (``reward_terms`` included) come from
    the text env unchanged; ``info`` also gets ``action_mask``, ``candidates`` and
    ``featurized_action`` (what the chosen index meant).

    ## Action Space
    ``Discrete(2K + S + 1)`` with ``K = max_candidates`` and ``S`` sources: ``0`` search with the
    question; ``1..K`` search for candidate ``i`` plus the relation to follow from it;
    ``K+1..K+S`` route to source ``j``; ``K+S+1..2K+S`` answer with candidate ``i``.
    :meth:`action_masks` marks the sensible choices; an index without a candidate is an invalid
    turn of the text env (never an exception).

    ## Observation Space
    ``Box(0, 1)`` of float32 (``[-1, 1]`` for the embedding block): hashed bag of words of the
    question and of the documents shown at the last step (``hash_dim`` each, binary), global
    features (:meth:`feature_names`: step, budget, source, search history, question type, chain
    progress, comparison evidence), :data:`SLOT_FEATURES` for each of the ``K`` candidate slots
    and, with ``embedder``, sentence embeddings of the question and of the last documents.

    ## Rewards
    The wrapped env's (see :mod:`hopgym.rewards`); :func:`make_featurized` applies
    :data:`DEFAULT_REWARD`.

    ## Starting State
    The wrapped env's: a question chosen by its ``np_random`` (seeded through ``reset(seed=…)``);
    ``options`` (``{"question_id": …}`` / ``{"index": i}``) pass through.

    ## Episode End
    The wrapped env's: an answer terminates, the step budget truncates.

    ## Arguments
    - ``env``: a hopgym text env (its ``unwrapped`` is a :class:`MultiHopQAEnv`).
    - ``max_candidates``: candidate slots ``K``.
    - ``hash_dim``: size of each hashed bag of words.
    - ``embedder``: ``None`` (no dense features), ``"default"`` (the packaged all-MiniLM-L6-v2,
      needs the ``dense`` extra), ``"hashing-<dim>"`` or a sentence-transformers model path.
    - ``render_mode``: ``None`` or ``"ansi"`` (the transcript plus the candidate actions).

    >>> import gymnasium as gym, hopgym
    >>> env = FeaturizedEnv(gym.make("hopgym/Tiny-v0", reward=None))
    >>> obs, info = env.reset(seed=0)
    >>> obs.shape == env.observation_space.shape, bool(env.action_masks()[0])
    (True, True)

    ## Version History
    - v0: initial release.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        env: gym.Env,
        *,
        max_candidates: int = 8,
        hash_dim: int = 64,
        embedder: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        base = env.unwrapped
        if not hasattr(base, "task") or not hasattr(base, "source_names"):
            raise TypeError("FeaturizedEnv wraps a hopgym text env (gym.make('hopgym/…')), got "
                            f"{type(base).__name__}")
        if not isinstance(max_candidates, int) or max_candidates < 1:
            raise ValueError(f"max_candidates must be an int >= 1, got {max_candidates!r}")
        if not isinstance(hash_dim, int) or hash_dim < 1:
            raise ValueError(f"hash_dim must be an int >= 1, got {hash_dim!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.env = env
        self.render_mode = render_mode
        self.max_candidates = max_candidates
        self.hash_dim = hash_dim
        self.sources: tuple[str, ...] = tuple(base.source_names)
        self.max_turns = int(base.max_turns)
        self.top_k = int(getattr(base, "top_k", 3))
        self._embedder: Any = None
        self._emb_cache: dict[str, np.ndarray] = {}
        emb_dim = 0
        if embedder is not None:
            from hopgym.corpora.dense import make_embedder

            self._embedder = make_embedder(embedder)
            emb_dim = int(self._embedder.dim)
        self._emb_dim = emb_dim
        k, s = max_candidates, len(self.sources)
        self._global_names = _global_names(self.sources)
        self.n_global = len(self._global_names)
        self.n_actions = 2 * k + s + 1
        dim = 2 * hash_dim + self.n_global + k * _F + 2 * emb_dim
        low = np.zeros(dim, dtype=np.float32)
        low[dim - 2 * emb_dim:] = -1.0
        self.observation_space = spaces.Box(low=low, high=np.ones(dim, dtype=np.float32),
                                            dtype=np.float32)
        self.action_space = spaces.Discrete(self.n_actions)
        self._low = low
        self._hash_cache: dict[str, int] = {}
        self._clear()

    # ------------------------------------------------------------------ layout
    def slot(self, kind: str, index: int = 0) -> int:
        """The action index of ``("search_question"|"search"|"route"|"answer", i)``.

        Example:
            >>> import gymnasium as gym, hopgym
            >>> env = FeaturizedEnv(gym.make("hopgym/Tiny-v0", reward=None), max_candidates=4)
            >>> [env.slot("search_question"), env.slot("search", 0), env.slot("route", 0),
            ...  env.slot("answer", 0)]
            [0, 1, 5, 6]
        """
        k, s = self.max_candidates, len(self.sources)
        if kind == "search_question":
            return 0
        if kind not in ("search", "route", "answer"):
            raise ValueError(f"unknown slot kind {kind!r}; use search_question, search, route, "
                             "answer")
        bound = s if kind == "route" else k
        if not 0 <= index < bound:
            raise IndexError(f"{kind} slot {index} out of range [0, {bound})")
        if kind == "search":
            return 1 + index
        if kind == "route":
            return 1 + k + index
        return 1 + k + s + index

    def feature_names(self) -> list[str]:
        """A name for every observation dimension."""
        names = [f"q_hash_{i}" for i in range(self.hash_dim)]
        names += [f"doc_hash_{i}" for i in range(self.hash_dim)]
        names += list(self._global_names)
        names += [f"slot{i}_{f}" for i in range(self.max_candidates) for f in SLOT_FEATURES]
        names += [f"q_emb_{i}" for i in range(self._emb_dim)]
        names += [f"doc_emb_{i}" for i in range(self._emb_dim)]
        return names

    @property
    def task(self) -> Any:
        """The wrapped env's :class:`~hopgym.corpora.sources.QATask` (read by ``evaluate``)."""
        return self.env.unwrapped.task

    @property
    def sample(self) -> Any:
        """The gold sample of the current episode (never part of the observation)."""
        return self.env.unwrapped.sample

    @property
    def transcript(self) -> list[dict[str, str]]:
        """The wrapped env's transcript."""
        return self.env.unwrapped.transcript

    # ------------------------------------------------------------------ state
    def _clear(self) -> None:
        self.question = read_question("")
        self._q_hash: list[int] = []
        self.turn = 0
        self.source = self.sources[0]
        self.searches = 0
        self.searches_by_source = dict.fromkeys(self.sources, 0)
        self.issued: set[str] = set()
        self.queried_keys: set[str] = set()
        self.docs: list[_Doc] = []
        self.doc_keys: set[str] = set()
        self.cands: dict[str, Candidate] = {}
        self.last_docs: list[Passage] = []
        self.last_kind = "reset"
        self.last_new = 0
        self.last_relevant = False
        self.misses = 0
        self.last_empty = False
        self.last_error = False
        self.slots: list[Candidate] = []
        self._mask = np.zeros(self.n_actions, dtype=bool)
        self._mask[0] = True
        self.max_depth = 0
        self.same_yes = self.same_no = False
        self._counter = 0

    def _cand(self, text: str, kind: str, key: str | None = None) -> Candidate:
        key = _key(text) if key is None else key
        cand = self.cands.get(key)
        if cand is None:
            self._counter += 1
            cand = self.cands[key] = Candidate(text, kind, key, order=self._counter)
        return cand

    def _start_question(self, question: str) -> None:
        q = self.question = read_question(question)
        self._q_hash = sorted({_hash(w, self.hash_dim, self._hash_cache)
                               for w in _WORD.findall(question.lower())})
        for opt in q.options:
            self._cand(opt, "option")
        if q.wh == "yesno":
            self._cand("yes", "yesno")
            self._cand("no", "yesno")
        if len(q.entity_texts) > 1 or q.wh == "yesno":
            for text in q.entity_texts:
                if _key(text) not in self.cands:
                    self._cand(text, "qentity")

    def _add_docs(self, docs: Sequence[Passage]) -> None:
        for rank, p in enumerate(docs):
            d = _parse_doc(p, self.searches, rank)
            self.docs.append(d)
            self.doc_keys.add(d.key)

    def _option_target(self, option: str) -> tuple[str, str | None]:
        """``"the director of A"``: (key of A, ``"direct"``); a plain option: (its key, None)."""
        m = re.match(r"(?i)the\s+(\w[\w-]*)\s+of\s+(.+)$", option)
        if m:
            found = _concepts_of(m.group(1).lower(), 0)
            if found:
                return _key(m.group(2)), found[0]
        return _key(option), None

    def _analyse(self) -> None:
        """Recompute document depths and candidate evidence from every document seen."""
        q = self.question
        chain = q.chain
        n = len(chain)
        qkeys = set(q.entities) | {self._option_target(opt)[0] for opt in q.options}
        for c in self.cands.values():
            if c.kind not in ("option", "yesno", "qentity"):
                c.kind = "entity" if c.kind == "title" else c.kind
            c.count, c.level, c.depth, c.match_any = 0, 0, 0, False
            c.last_search, c.first_search, c.best_rank = -1, 99, 99
        for d in self.docs:
            d.depth = 1 if d.key in qkeys else 0
        # Depths propagate outwards: a document about a candidate found at level L has depth L+1.
        levels: dict[str, int] = {}
        for _ in range(max(n, 1) + 1):
            changed = False
            for d in self.docs:
                if d.depth == 0 and levels.get(d.key, 0) > 0:
                    d.depth = levels[d.key] + 1
                    changed = True
            for d in self.docs:
                if d.depth <= 0:
                    continue
                want = chain[d.depth - 1] if d.depth <= n else None
                for concepts, spans in d.sentences:
                    if want is not None and want in concepts:
                        for _, kind, key in spans:
                            if key and key != d.key and key not in qkeys and kind == "entity":
                                if levels.get(key, 0) < d.depth:
                                    levels[key] = d.depth
                                    changed = True
            if not changed:
                break
        self.max_depth = max((d.depth for d in self.docs), default=0)
        chain_set = set(chain)
        for d in self.docs:
            want = chain[d.depth - 1] if 1 <= d.depth <= n else None
            title = None
            if d.key and (d.key not in qkeys or d.key in self.cands):
                title = self._cand(d.passage.title, "title", d.key)
            if title is not None and title.kind == "entity":
                title.kind = "title"
            for concepts, spans in d.sentences:
                for text, kind, key in spans:
                    if not key or key == d.key:
                        continue
                    if key in qkeys and key not in self.cands:
                        continue  # a question entity is not an answer
                    c = self._cand(text, kind, key)
                    c.count += 1
                    c.last_search = max(c.last_search, d.search)
                    c.first_search = min(c.first_search, d.search)
                    c.best_rank = min(c.best_rank, d.rank)
                    c.depth = max(c.depth, d.depth)
                    c.match_any |= bool(concepts & chain_set)
                    if (want is not None and want in concepts and d.depth > c.level
                            and (kind in ("entity", "title") or d.depth == n)):
                        # Years and numbers end chains; only entities lead on.
                        c.level = d.depth
            if title is not None:
                title.last_search = max(title.last_search, d.search)
                title.first_search = min(title.first_search, d.search)
                title.best_rank = min(title.best_rank, d.rank)
                title.count += 1
        for key, c in self.cands.items():
            if c.kind == "entity" and key in self.doc_keys:
                c.kind = "title"
        self._analyse_comparison()

    def _values(self, key: str, concept: str | None, want_number: bool) -> float | None:
        for d in self.docs:
            if d.key != key:
                continue
            for concepts, spans in d.sentences:
                if concept is not None and concept not in concepts:
                    continue
                for text, kind, _ in spans:
                    if kind == ("number" if want_number else "year"):
                        try:
                            return float(text.replace(",", ""))
                        except ValueError:
                            continue
        return None

    def _analyse_comparison(self) -> None:
        q = self.question
        compared = q.chain[-1] if q.chain else None
        self.same_yes = self.same_no = False
        for c in self.cands.values():
            c.value, c.value_min, c.value_max, c.support = None, False, False, 0.0
        if q.options:
            want_number = compared == "pop"
            vals: list[tuple[Candidate, float]] = []
            for opt in q.options:
                c = self.cands.get(_key(opt))
                if c is None:
                    continue
                target, concept = self._option_target(opt)
                key = target
                if concept is not None:
                    # Resolve "the director of A" to the director named in A's document.
                    resolved = self._resolve(target, concept)
                    c.text = resolved[0] if resolved else opt
                    c.resolved_from = opt if resolved else ""
                    key = resolved[1] if resolved else ""
                c.value = self._values(key, compared, want_number) if key else None
                if c.value is not None:
                    vals.append((c, c.value))
            if len(vals) == 2 and vals[0][1] != vals[1][1]:
                lo = min(vals, key=lambda t: t[1])[0]
                hi = max(vals, key=lambda t: t[1])[0]
                lo.value_min, hi.value_max = True, True
        if q.wh == "yesno" and compared is not None:
            sets = []
            for d in self.docs:
                if d.depth < 1:
                    continue
                vals_d = {key for concepts, spans in d.sentences if compared in concepts
                          for _, kind, key in spans if kind == "entity" and key != d.key}
                if vals_d:
                    sets.append(vals_d)
            if len(sets) >= 2:
                shared = any(sets[i] & sets[j] for i in range(len(sets))
                             for j in range(i + 1, len(sets)))
                self.same_yes, self.same_no = shared, not shared
            yes, no = self.cands.get("yes"), self.cands.get("no")
            if yes is not None:
                yes.support = float(self.same_yes)
            if no is not None:
                no.support = float(self.same_no)

    def _resolve(self, key: str, concept: str) -> tuple[str, str] | None:
        for d in self.docs:
            if d.key != key:
                continue
            for concepts, spans in d.sentences:
                if concept in concepts:
                    for text, kind, k in spans:
                        if kind == "entity" and k != d.key:
                            return text, k
        return None

    def _answer_kinds(self) -> tuple[str, ...]:
        """The candidate kinds that can answer the question (years for "when", …)."""
        q = self.question
        if q.wh == "yesno":
            return ("yesno",)
        if q.wh == "choice":
            return ("option",)
        if q.wh == "when":
            return ("year",)
        if q.chain and q.chain[-1] == "pop" or q.wh == "how":
            return ("number",)
        return ("entity", "title")

    def _build_slots(self) -> None:
        fixed = [c for c in self.cands.values() if c.kind in ("option", "yesno")]
        q_ents = [c for c in self.cands.values() if c.kind == "qentity"]
        rest = [c for c in self.cands.values()
                if c.kind not in ("option", "yesno", "qentity") and c.count > 0]
        # Deepest chain evidence first, then the answer type the question asks for, the newest
        # documents, document rank, reading order.
        want = self._answer_kinds()
        rest.sort(key=lambda c: (-c.level, c.kind not in want, -c.last_search,
                                 -int(c.match_any), c.best_rank, c.order))
        self.slots = (fixed + q_ents + rest)[: self.max_candidates]

    # ------------------------------------------------------------------ features
    def _embed(self, text: str, kind: str) -> np.ndarray:
        vec = self._emb_cache.get(text)
        if vec is None:
            if len(self._emb_cache) > 50_000:
                self._emb_cache.clear()
            vec = self._emb_cache[text] = self._embedder.encode([text], kind=kind)[0]
        return vec

    def _features(self) -> np.ndarray:
        k, h = self.max_candidates, self.hash_dim
        out = np.zeros(self.observation_space.shape, dtype=np.float32)
        cache = self._hash_cache
        out[self._q_hash] = 1.0
        idx = [h + _hash(w, h, cache) for doc in self.last_docs for w in _doc_words(doc.contents)]
        if idx:
            out[idx] = 1.0
        q = self.question
        n = max(len(q.chain), 1)
        budget = float(self.max_turns)
        final = any(c.level >= len(q.chain) > 0 for c in self.slots)
        opts = [c for c in self.slots if c.kind == "option"]
        glob = [self.turn / budget, max(self.max_turns - self.turn, 0) / budget,
                min(self.searches / budget, 1.0),
                min(len(self.docs) / (budget * self.top_k), 1.0),
                min(self.last_new / self.top_k, 1.0), float(self.last_empty),
                float(self.last_error), float(self.last_relevant), min(self.misses / 3.0, 1.0)]
        glob += [float(self.last_kind == t) for t in
                 ("reset", "think", "search", "route", "answer", "invalid")]
        glob += [float(q.wh == w) for w in _WH]
        glob += [min(len(q.chain) / 4.0, 1.0), min(self.max_depth / n, 1.0), float(final),
                 min(len(q.entities) / 3.0, 1.0),
                 sum(e in self.doc_keys for e in q.entities) / max(len(q.entities), 1),
                 len(self.slots) / k, float(q.wants == "min"), float(q.wants == "max"),
                 sum(c.value is not None for c in opts) / 2.0, float(self.same_yes),
                 float(self.same_no)]
        glob += [float(self.source == s) for s in self.sources]
        glob += [min(self.searches_by_source.get(s, 0) / budget, 1.0) for s in self.sources]
        g = 2 * h
        out[g:g + self.n_global] = glob
        base = g + self.n_global
        q_words = {w for e in q.entities for w in e.split()}
        last = self.searches
        want = self._answer_kinds()
        rows: list[float] = []
        for c in self.slots:
            words = set(c.key.split())
            rows += [1.0] + [float(c.kind == kind) for kind in _KINDS] + [
                len(words & q_words) / max(len(words), 1),
                1.0 / (1 + last - c.last_search) if c.last_search >= 0 else 0.0,
                1.0 / (1 + c.best_rank) if c.best_rank < 99 else 0.0,
                min(c.count / 5.0, 1.0),
                min(c.level / n, 1.0), float(c.level >= len(q.chain) > 0), float(c.match_any),
                min(c.depth / n, 1.0), float(c.key in self.queried_keys),
                float(_key(c.text) in self.doc_keys),
                float(c.last_search == last and last > 0),
                float(c.value is not None), float(c.value_min), float(c.value_max), c.support,
                float(c.kind in want),
            ]
        out[base:base + len(rows)] = rows
        if self._embedder is not None:
            e = self._emb_dim
            start = base + k * _F
            out[start:start + e] = self._embed(q.text, "query")
            if self.last_docs:
                vecs = np.stack([self._embed(d.contents, "passage") for d in self.last_docs])
                mean = vecs.mean(axis=0)
                norm = float(np.linalg.norm(mean))
                out[start + e:start + 2 * e] = mean / norm if norm > 0 else mean
        np.clip(out, self._low, 1.0, out=out)
        return out

    # ------------------------------------------------------------------ actions
    def hop_query(self, cand: Candidate) -> str:
        """The search query for a candidate slot: the candidate plus the relation to follow next.

        A candidate found at chain level ``L`` is searched with the question's word for relation
        ``L + 1``; an option or question entity with the compared relation (or its own bridge).
        """
        q = self.question
        chain = q.chain
        if cand.kind == "option":
            m = re.match(r"(?i)the\s+(\w[\w-]*)\s+of\s+(.+)$", cand.text)
            if m and not cand.resolved_from and _concepts_of(m.group(1).lower(), 0):
                return f"{m.group(2)} {m.group(1)}"  # find A's document first
            rel = q.words.get(chain[-1], "") if chain else ""
            return " ".join(x for x in (cand.text, rel) if x)
        if cand.kind == "qentity":
            rel = q.words.get(chain[0], "") if chain else ""
            return " ".join(x for x in (cand.text, rel) if x)
        if 0 < cand.level < len(chain):
            return f"{cand.text} {q.words.get(chain[cand.level], '')}".strip()
        return " ".join([cand.text, *q.relation_words])

    def action_masks(self) -> np.ndarray:
        """Boolean mask over the actions: ``True`` where the choice is sensible now.

        Search slots need a candidate (not yes/no) and a query not issued before; route slots need
        another source; answer slots need a candidate. If nothing else is left, searching the
        question again stays allowed (de-duplication then shows the next documents).
        """
        return self._mask.copy()

    def _compute_mask(self) -> np.ndarray:
        mask = np.zeros(self.n_actions, dtype=bool)
        mask[0] = _key(self.question.text) not in self.issued
        for i, c in enumerate(self.slots):
            if c.kind != "yesno":
                mask[self.slot("search", i)] = _key(self.hop_query(c)) not in self.issued
            mask[self.slot("answer", i)] = True
        if len(self.sources) > 1:
            for j, s in enumerate(self.sources):
                mask[self.slot("route", j)] = s != self.source
        if not mask.any():
            mask[0] = True
        return mask

    def describe_actions(self) -> list[str]:
        """A line per action index saying what it does now (``""`` for empty slots)."""
        k = self.max_candidates
        out = [f"search: {self.question.text}"]
        out += [f"search: {self.hop_query(self.slots[i])}" if i < len(self.slots)
                and self.slots[i].kind != "yesno" else "" for i in range(k)]
        out += [f"route: {s}" for s in self.sources]
        out += [f"answer: {self.slots[i].text}" if i < len(self.slots) else "" for i in range(k)]
        return out

    def decode(self, action: Any) -> Action | None:
        """The structured action an index stands for now, or ``None`` for an empty slot."""
        try:
            a = int(action)
        except (TypeError, ValueError, OverflowError):
            return None
        if isinstance(action, (float, np.floating)) and a != action:
            return None
        k, s = self.max_candidates, len(self.sources)
        if a == 0:
            return Search(self.question.text)
        if 1 <= a <= k:
            i = a - 1
            if i < len(self.slots) and self.slots[i].kind != "yesno":
                return Search(self.hop_query(self.slots[i]))
            return None
        if k < a <= k + s:
            return Route(self.sources[a - k - 1])
        if k + s < a <= 2 * k + s:
            i = a - k - s - 1
            return Answer(self.slots[i].text) if i < len(self.slots) else None
        return None

    # ------------------------------------------------------------------ API
    def _extra_info(self, info: dict[str, Any]) -> dict[str, Any]:
        info = dict(info)
        self._mask = self._compute_mask()
        info["action_mask"] = self._mask.copy()
        info["candidates"] = tuple(c.text for c in self.slots)
        return info

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        _, info = self.env.reset(seed=seed, options=options)
        self._clear()
        self._start_question(str(info.get("question", "")))
        self.source = str(info.get("source", self.sources[0]))
        docs = list(info.get("documents") or [])
        if docs:
            self._add_docs(docs)
            self.last_docs = docs
        self._analyse()
        self._build_slots()
        return self._features(), self._extra_info(info)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        act = self.decode(action)
        if act is None:
            return self.step_text(f"(featurized action {action!r}: no candidate in this slot)",
                                  description=f"invalid: {action!r}")
        a = int(action)
        hop = self.slots[a - 1].key if 1 <= a <= self.max_candidates else None
        return self.step_text(act, description=self.describe_actions()[a], hop_key=hop)

    def step_text(self, action: Action | str, *, description: str = "",
                  hop_key: str | None = None
                  ) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Step the wrapped env with a structured action or raw text, keeping the features in sync.

        :meth:`step` calls it with the action a candidate index stands for; the multi-agent env
        uses it for team moves (a ``Think`` while both agents wait, an invalid turn).
        """
        if hop_key is not None:
            self.queried_keys.add(hop_key)
        _, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        info["featurized_action"] = description or (
            action if isinstance(action, str) else repr(action))
        self.turn = int(info.get("turn", self.turn + 1))
        self.last_kind = str(info.get("action_type", "invalid"))
        self.source = str(info.get("source", self.source))
        self.searches = int(info.get("searches", self.searches))
        self.searches_by_source.update(info.get("searches_by_source") or {})
        self.last_new, self.last_empty, self.last_error = 0, False, False
        if self.last_kind == "search":
            self.issued.add(_key(info.get("query") or ""))
            docs = list(info.get("documents") or [])
            self.last_new = len(docs)
            self.last_empty = not docs
            self.last_error = info.get("retrieval_error") is not None
            before = {id(d) for d in self.docs}
            if docs:
                self.last_docs = docs
                self._add_docs(docs)
            self._analyse()
            self.last_relevant = any(d.depth > 0 for d in self.docs if id(d) not in before)
            self.misses = 0 if self.last_relevant else self.misses + 1
        elif self.last_kind == "route":
            self.misses = 0
        self._build_slots()
        return (self._features(), float(reward), bool(terminated), bool(truncated),
                self._extra_info(info))

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        text = "".join(m["content"] if m["role"] == "user" else m["content"] + "\n"
                       for m in self.transcript)
        lines = [f"  [{i}] {d}" for i, d in enumerate(self.describe_actions()) if d]
        return text + "Actions:\n" + "\n".join(lines) + "\n"

    def close(self) -> None:
        self.env.close()


def _global_names(sources: Sequence[str]) -> list[str]:
    names = ["turn", "turns_left", "searches", "docs_seen", "last_new", "last_empty",
             "last_error", "last_relevant", "misses"]
    names += [f"last_{t}" for t in ("reset", "think", "search", "route", "answer", "invalid")]
    names += [f"wh_{w}" for w in _WH]
    names += ["chain_length", "depth_reached", "final_found", "n_entities", "entities_covered",
              "n_candidates", "wants_min", "wants_max", "option_values", "same_yes", "same_no"]
    names += [f"source_{s}" for s in sources] + [f"searches_{s}" for s in sources]
    return names


def make_featurized(
    *,
    base_id: str = "hopgym/Synthetic-v0",
    base_kwargs: Mapping[str, Any] | None = None,
    reward: str | None = DEFAULT_REWARD,
    max_turns: int = 6,
    top_k: int = 3,
    max_candidates: int = 8,
    hash_dim: int = 64,
    embedder: str | None = None,
    render_mode: str | None = None,
) -> FeaturizedEnv:
    """``FeaturizedEnv(gym.make(base_id, reward=…, max_turns=…, top_k=…, **base_kwargs))``.

    The entry point of ``hopgym/SyntheticFeaturized-v0``.

    Args:
        base_id: the text env to featurize (any hopgym id).
        base_kwargs: further keyword arguments for the text env (``hops=``, ``seed=``, …).
        reward: reward preset name (:mod:`hopgym.rewards.presets`) or ``None`` (reward 0).
        max_turns: step budget.
        top_k: documents per search.
        max_candidates, hash_dim, embedder, render_mode: see :class:`FeaturizedEnv`.

    Example:
        >>> env = make_featurized(base_id="hopgym/Tiny-v0", reward=None, max_candidates=4)
        >>> env.action_space
        Discrete(10)
    """
    kwargs = dict(base_kwargs or {})
    for name in ("reward", "max_turns", "top_k"):
        if name in kwargs:
            raise ValueError(f"pass {name}= to make_featurized directly, not in base_kwargs")
    env = gym.make(base_id, reward=reward, max_turns=max_turns, top_k=top_k, **kwargs)
    return FeaturizedEnv(env, max_candidates=max_candidates, hash_dim=hash_dim,
                         embedder=embedder, render_mode=render_mode)
