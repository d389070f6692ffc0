"""Reading multi-hop questions: :func:`read_question`, the one question reader of hopgym.

Classes: :class:`QuestionInfo`, :class:`Plan`, :class:`Side`.
Functions: :func:`read_question`, :func:`parse_question`, :func:`concepts_of`,
:func:`entity_key`, :func:`strip_name`.

:func:`read_question` reads a question two ways, into one :class:`QuestionInfo`:

- **by a relation lexicon**, for any English multi-hop question (HotpotQA's as well as the
  synthetic world's): its type (``wh``), the names it mentions (``entities``), the options of a
  choice question, which extreme a comparison wants, and the *chain* of relation concepts to
  follow, innermost first ("Where did the director of X study?" -> ``direct, study``). The
  concepts and their cue words are :data:`CONCEPTS`; kinship words expand to chains ("mother" =
  the spouse of the father). This reading is approximate: the featurized env
  (:mod:`hopgym.envs.featurized`) turns it into features for a policy to learn from.
- **by the synthetic world's templates**, exactly: :attr:`QuestionInfo.plan` (:func:`parse_question`)
  matches the question against the phrase tables the world writes its questions with
  (:mod:`hopgym.corpora.synthetic`) and returns a :class:`Plan` (the named entities, the synthetic
  relations applied to each, what to compare), or ``None`` for a question in other words. The
  iterative agent (:mod:`hopgym.agents.iterative`) follows it hop by hop.

The two readings stay separate on purpose: the lexicon reads questions no template covers, and the
templates read synthetic questions without the lexicon's guesses (on a 400-question world with 1-4
hops the lexicon's chain differs from the exact one for about 7% of chain questions, and it drops a
leading "The" from film titles).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "CONCEPTS",
    "QuestionInfo",
    "Plan",
    "Side",
    "read_question",
    "parse_question",
    "concepts_of",
    "entity_key",
    "strip_name",
    "WORD",
    "NAME",
]

#: A word: starts with a letter or digit; apostrophes and hyphens inside.
WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
#: A name: capitalised words, possibly joined by a few lower-case particles ("University of
#: Lorn", "Night at Harrow Pier").
NAME = re.compile(
    r"[A-Z][\w'-]*(?:\s+(?:(?:of|the|de|del|da|von|van|der|du|la|le|at|on|upon)\s+)*[A-Z][\w'-]*)*"
)
_CHOICE = re.compile(r",\s*(.+?)\s+or\s+(.+?)\?*\s*$")
# Capitalised words that open sentences or questions without naming anything.
_CAP_STOP = frozenset(
    """a an the he she it its his her they their them this that these those in on at after
    before during since both who whom whose which what where when how is was are were did do does
    has have had born there here then also not notable directed""".split()
)
_AUX = frozenset("is was are were did do does has have had can could".split())
_WANTS_MIN = frozenset("first earlier earliest older oldest fewer fewest smaller smallest less".split())
_WANTS_MAX = frozenset(
    "later latest recently recent younger youngest larger largest more most bigger biggest".split()
)

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
    "pop": (
        ("population", "inhabitant", "live", "populous"),
        ("population", "inhabitant", "live", "home", "populous"),
    ),
}
# Kinship words as relation chains, innermost first ("mother of X" = spouse of the father of X).
_KINSHIP: dict[str, tuple[str, ...]] = {
    "grandfather": ("father", "father"),
    "grandmother": ("father", "father", "spouse"),
    "mother": ("father", "spouse"),
    "father-in-law": ("spouse", "father"),
    "mother-in-law": ("spouse", "father", "spouse"),
    "grandfather-in-law": ("spouse", "father", "father"),
}

# A relation unit of a question: (position, concepts innermost first, the word that cued it).
_Unit = tuple[int, tuple[str, ...], str]
# A name in a question: (start, end, text).
_Span = tuple[int, int, str]


@functools.lru_cache(maxsize=65536)
def entity_key(text: str) -> str:
    """The identity of a name: lower case, articles and punctuation dropped.

    Example:
        >>> entity_key("The Glass Orchard"), entity_key("Maren Oskdal's")
        ('glass orchard', "maren oskdal's")
    """
    return " ".join(w for w in WORD.findall(text.lower()) if w not in ("the", "a", "an"))


@functools.lru_cache(maxsize=65536)
def concepts_of(word: str, side: int) -> tuple[str, ...]:
    """The :data:`CONCEPTS` a lower-case word cues: ``side`` 0 in questions, 1 in documents.

    Example:
        >>> concepts_of("founded", 0), concepts_of("studied", 1)
        (('found',), ('study',))
    """
    return tuple(name for name, cues in CONCEPTS.items() if word.startswith(cues[side]))


def strip_name(span: str) -> str:
    """A :data:`NAME` match without the capitalised function words that open it ("In Lorn")."""
    parts = span.split()
    while parts and parts[0].lower() in _CAP_STOP:
        parts = parts[1:]
    return " ".join(parts)


# --------------------------------------------------------------------------- exact reading
@dataclass
class Side:
    """An entity named by a noun phrase: a base name and the relations applied to it, innermost
    first ("the birthplace of the founder of X" -> ``Side("X", ["founder", "birthplace"])``)."""

    name: str
    relations: list[str] = field(default_factory=list)


@dataclass
class Plan:
    """What a synthetic-world question asks, read exactly off its template.

    ``kind`` is ``chain`` (resolve ``sides[0]`` then read ``target``), ``compare`` (read ``target``
    for both sides; ``mode`` first/last/max/min picks one, ``same`` answers yes/no). With
    ``answer_topic`` a comparison answers the side's base name, else the resolved entity.
    Relations are the synthetic world's (:data:`hopgym.corpora.synthetic.RELATION_SENTENCES`).
    """

    kind: str
    sides: list[Side]
    target: str
    mode: str = ""
    answer_topic: bool = False


def _template_regex(template: str) -> re.Pattern[str]:
    """A question template as a regex: ``{}`` -> ``x``; ``{a}``/``{b}`` -> ``a``/``b``."""
    out = []
    for part in re.split(r"(\{\w*\})", template):
        if part == "{}":
            out.append("(?P<x>.+)")
        elif part == "{a}":
            out.append("(?P<a>.+?)")
        elif part == "{b}":
            out.append("(?P<b>.+)")
        else:
            out.append(re.escape(part))
    return re.compile("^" + "".join(out) + "$")


@dataclass(frozen=True)
class _Templates:
    """The synthetic world's question phrasings as regexes, compiled once on first use."""

    noun_phrases: list[tuple[str, re.Pattern[str]]]
    questions: list[tuple[str, re.Pattern[str]]]
    inferences: list[tuple[tuple[str, ...], re.Pattern[str]]]
    comparisons: list[tuple[str, str, re.Pattern[str]]]
    bridge_comparisons: list[tuple[str, str, str, int, re.Pattern[str]]]


@functools.cache
def _templates() -> _Templates:
    from hopgym.corpora.synthetic import (
        BRIDGE_COMPARISONS,
        COMPARISONS,
        INFERENCES,
        NOUN_PHRASES,
        QUESTIONS,
    )

    return _Templates(
        noun_phrases=[(rel, _template_regex(t)) for rel, ts in NOUN_PHRASES.items() for t in ts],
        questions=[(rel, _template_regex(t)) for rel, ts in QUESTIONS.items() for t in ts],
        inferences=[(rels, _template_regex(t)) for rels, t in INFERENCES.items()],
        comparisons=[(attr, mode, _template_regex(t)) for (attr, mode), (t, _) in COMPARISONS.items()],
        bridge_comparisons=[
            (bridge, attr, mode, hops, _template_regex(t))
            for (bridge, attr, mode, hops), (t, _) in BRIDGE_COMPARISONS.items()
        ],
    )


def _parse_np(text: str) -> Side:
    for rel, rx in _templates().noun_phrases:
        m = rx.match(text)
        if m:
            inner = _parse_np(m.group("x"))
            inner.relations.append(rel)
            return inner
    return Side(text.strip())


def parse_question(question: str) -> Plan | None:
    """Read a synthetic-world question exactly into a :class:`Plan`; ``None`` if no template fits.

    Each call returns new objects (a caller may change them).

    Example:
        >>> p = parse_question("Where was the founder of Qelvor Dynamics born?")
        >>> p.kind, p.sides[0], p.target
        ('chain', Side(name='Qelvor Dynamics', relations=['founder']), 'birthplace')
        >>> parse_question("Which was founded first, A Labs or B Works?").mode
        'first'
    """
    q = question.strip()
    t = _templates()
    for bridge, attr, mode, hops, rx in t.bridge_comparisons:
        m = rx.match(q)
        if m:
            a, b = m.group("a"), m.group("b")
            if hops == 4:
                return Plan("compare", [Side(a, [bridge]), Side(b, [bridge])], attr, mode, answer_topic=True)
            return Plan("compare", [Side(a, [bridge]), _parse_np(b)], attr, mode)
    for attr, mode, rx in t.comparisons:
        m = rx.match(q)
        if m:
            return Plan("compare", [_parse_np(m.group("a")), _parse_np(m.group("b"))], attr, mode)
    for rels, rx in t.inferences:
        m = rx.match(q)
        if m:
            side = _parse_np(m.group("x"))
            return Plan("chain", [Side(side.name, side.relations + list(rels[:-1]))], rels[-1])
    for rel, rx in t.questions:
        m = rx.match(q)
        if m:
            return Plan("chain", [_parse_np(m.group("x"))], rel)
    return None


# --------------------------------------------------------------------------- the reader
@dataclass(frozen=True)
class QuestionInfo:
    """What :func:`read_question` reads off a question.

    Attributes:
        text: the question.
        wh: its type, one of ``who where when what which how yesno choice other``.
        entities: :func:`entity_key` of the names it mentions, in order.
        entity_texts: those names as written.
        chain: relation concepts (:data:`CONCEPTS`) to follow, innermost first.
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

    @property
    def plan(self) -> Plan | None:
        """The exact reading by the synthetic world's templates (:func:`parse_question`), or
        ``None`` when the question is not in their words. A new :class:`Plan` on every access.

        Example:
            >>> p = read_question("Who is the mother of Kewo Gaya?").plan
            >>> p.kind, p.sides, p.target
            ('chain', [Side(name='Kewo Gaya', relations=['father'])], 'spouse')
        """
        return parse_question(self.text)


def _question_type(question: str, first: str, options: tuple[str, ...]) -> str:
    """``wh``: from the options, the first word and "which/what year"."""
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
    low = question.lower()
    if re.search(r"\b(which|what) year\b", low):
        wh = "when" if wh not in ("choice", "yesno") else wh
    elif wh == "other" and re.search(r"\bwhich\b", low):
        wh = "which"
    return wh


def _name_spans(question: str) -> list[_Span]:
    """The names a question mentions, without the function words that open them."""
    spans: list[_Span] = []
    for m in NAME.finditer(question):
        text = m.group(0)
        stripped = strip_name(text)
        if not stripped:
            continue
        start = m.start() + len(text) - len(stripped)
        spans.append((start, start + len(stripped), stripped))
    return spans


def _relation_units(words: list[re.Match[str]], spans: list[_Span]) -> list[_Unit]:
    """The relation words outside names; kinship words ("great-grandmother") expand to chains."""
    units: list[_Unit] = []
    inside = [(s, e) for s, e, _ in spans]
    for w in words:
        if any(s <= w.start() < e for s, e in inside):
            continue
        lw = w.group(0).lower()
        greats = 0
        while lw.startswith("great-" * (greats + 1)):
            greats += 1
        base = lw[6 * greats :]
        if base in _KINSHIP:
            units.append((w.start(), ("father",) * greats + _KINSHIP[base], lw))
            continue
        found = concepts_of(lw, 0)
        if found:
            units.append((w.start(), (found[0],), lw))
    return units


def _chain(
    question: str, spans: list[_Span], units: list[_Unit], options: tuple[str, ...]
) -> tuple[list[str], dict[str, str]]:
    """The relation chain, innermost first, and the question word of each concept.

    Relations before the (last) name read outwards from it, then those after it; "the city where
    X is located" puts the innermost relation after the name.
    """
    seq = units
    if spans:
        anchor_start, anchor_end = spans[-1][0], spans[-1][1]
        before = [u for u in units if u[0] < anchor_start]
        after = [u for u in units if u[0] >= anchor_end]
        prev = question[:anchor_start].rstrip().lower()
        nested = prev.endswith(" where") and after
        seq = []
        if nested:
            seq.append(after[0])
            after = after[1:]
        seq += list(reversed(before)) + after
    chain: list[str] = []
    words_of: dict[str, str] = {}
    for _, unit, word in seq:
        for c in unit:
            chain.append(c)
            words_of.setdefault(c, word)
    if options:
        # In "Who was born first, the director of A or B?" the compared relation is "born" and
        # the options may carry their own bridge ("the director of A"); keep the compared one last.
        at = question.find(options[0])
        compared = [c for pos, unit, _ in units if pos < at for c in unit]
        inner = [c for pos, unit, _ in units if pos >= at for c in unit]
        chain = inner + compared[-1:] if compared else inner
    return chain, words_of


@functools.lru_cache(maxsize=4096)
def read_question(question: str) -> QuestionInfo:
    """Read a question into a :class:`QuestionInfo` (see the module docstring).

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
        >>> q.plan.kind, [side.name for side in q.plan.sides], q.plan.mode
        ('compare', ['The Glass Orchard', 'Night at Harrow'], 'first')
    """
    words = list(WORD.finditer(question))
    first = words[0].group(0).lower() if words else ""
    m = _CHOICE.search(question)
    options = (m.group(1).strip(), m.group(2).strip()) if m else ()
    spans = _name_spans(question)
    entities = tuple(dict.fromkeys(entity_key(t) for _, _, t in spans if entity_key(t)))
    entity_texts = tuple(dict.fromkeys(t for _, _, t in spans if entity_key(t)))
    chain, words_of = _chain(question, spans, _relation_units(words, spans), options)
    tokens = {w.group(0).lower() for w in words}
    wants = "min" if tokens & _WANTS_MIN else ("max" if tokens & _WANTS_MAX else "")
    return QuestionInfo(
        text=question,
        wh=_question_type(question, first, options),
        entities=entities,
        entity_texts=entity_texts,
        chain=tuple(chain),
        words=words_of,
        options=options,
        wants=wants,
    )
