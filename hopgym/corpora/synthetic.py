"""The procedural synthetic multi-hop world: hopgym's embedded default corpus.

Classes and functions: :class:`WorldConfig`, :class:`SyntheticWorld`, :func:`generate_world`,
:func:`build_task`, :class:`SyntheticTask`, :func:`export_flashrag`; the phrasing tables
(:data:`SENTENCES`, :data:`NOUN_PHRASES`, :data:`QUESTIONS`, :data:`COMPARISONS`,
:data:`BRIDGE_COMPARISONS`, :data:`INFERENCES`, :data:`RELATION_SENTENCES`) that the world writes
with and that the rule-based :class:`~hopgym.agents.iterative.IterativeAgent` reads with.

The world is fictional, so no model can answer from memory. It has countries, cities, people,
companies, films and universities with generated, regionally flavoured names; relations (born in,
father, spouse, studied at, founded by, headquartered in, directed by, located in, capital of) and
attributes (years, populations). Every entity has one Wikipedia-like document (title = name, a few
sentences in varied phrasings, optionally split into passages). Questions have 1-4 hops:

- ``bridge``: a chain of relations ending in an entity ("Where was the founder of X born?").
- ``compositional``: a chain of relations ending in an attribute ("When was the director of X
  born?").
- ``comparison``: two entities compared on an attribute ("Which was founded first, X or Y?") or
  tested for a shared value ("Were X and Y born in the same city?"); always 2 hops.
- ``bridge_comparison``: a comparison after a bridge on one or both sides ("Which film has the
  director who was born first, A or B?"); 3 or 4 hops.
- ``inference``: kinship composed from father and spouse links ("Who is the paternal grandfather
  of X?"); 2-4 hops.

Difficulty comes from confusable names (a share ``distractors`` of entities get a near-namesake:
"Qelvor Dynamics" / "Qelvor Dynamics Group" / "Qelvar Dynamics", with a "Not to be confused with"
note), shared surnames in families, shared attribute values, documents that mention other entities
(a founder's page names the company, a city's page its notable people) and, on the web source,
mirror pages.

Routing: with ``sources=("local", "web")`` the documents are split by region. Each region (a
culture with its own name phonology and its countries) is either covered by the cheap ``local``
corpus or not; ``web`` holds everything plus noisy mirror pages and costs more. Whether a question
needs the web is therefore predictable from how its names sound and from the local source's
description, which lists the covered countries; chains that cross regions need a route mid-way.

Held-out split: a seeded share ``test_fraction`` of people, companies, films, universities and
cities are *test entities*. A train question's supporting documents never describe a test
entity; a test question starts from a test entity. Test questions therefore ask about entities
whose facts no train question needs (countries are shared by both).

Determinism: the same config gives byte-identical passages and questions (NumPy generators seeded
from ``config.seed`` through independent ``SeedSequence`` streams, so, for example, changing
``n_questions`` leaves the corpus unchanged).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from hopgym.corpora._names import (
    CITY_PREFIXES,
    COMPANY_EXTENSIONS,
    COMPANY_SUFFIXES,
    CULTURES,
    FIELDS,
    FILM_GENRES,
    MIRROR_SITES,
    OCCUPATIONS,
    NameMaker,
)
from hopgym.corpora.sources import QATask, Source
from hopgym.corpora.types import Hop, Passage, QASample

__all__ = [
    "KINDS",
    "WorldConfig",
    "SyntheticWorld",
    "SyntheticTask",
    "generate_world",
    "build_task",
    "export_flashrag",
    "SENTENCES",
    "NOUN_PHRASES",
    "QUESTIONS",
    "COMPARISONS",
    "BRIDGE_COMPARISONS",
    "INFERENCES",
    "RELATION_SENTENCES",
    "RELATIONS",
    "ATTRIBUTES",
    "QUERY_WORDS",
    "SUB_QUESTIONS",
]

KINDS = ("bridge", "compositional", "comparison", "bridge_comparison", "inference")
_KIND_HOPS = {
    "bridge": (1, 2, 3, 4),
    "compositional": (1, 2, 3, 4),
    "comparison": (2,),
    "bridge_comparison": (3, 4),
    "inference": (2, 3, 4),
}
_SOURCE_SETS = (("local",), ("local", "web"))

# Entity types (codes in the internal arrays).
COUNTRY, CITY, PERSON, COMPANY, FILM, UNIVERSITY = range(6)
TYPE_NAMES = ("country", "city", "person", "company", "film", "university")

# ---------------------------------------------------------------------------------------------
# Phrasing tables. Fields: {s} subject name; {He} {he} {His} {his} {child} pronouns; the rest are
# entity names, years or numbers. Entity names never contain "." or ",", so a sentence can be
# matched back with a regex built from its template (see hopgym.agents.iterative).
# ---------------------------------------------------------------------------------------------
SENTENCES: dict[str, tuple[str, ...]] = {
    "hatnote": ("Not to be confused with {other}.",),
    "person.intro": ("{s} (born {year}) is {a_occ}.",
                     "{s} is {a_occ}, born in {year}.",
                     "{s} is {a_occ} who was born in {year}."),
    "person.birthplace": ("{He} was born in {city}.",
                          "{s} was born in the city of {city}.",
                          "{His} birthplace is {city}."),
    "person.father": ("{He} is the {child} of {father}.",
                      "{His} father is {father}.",
                      "{s} was raised by {his} father {father}."),
    "person.spouse": ("{He} is married to {spouse}.",
                      "{His} spouse is {spouse}.",
                      "{s} married {spouse}."),
    "person.alma": ("{He} studied at {univ}.",
                    "{He} graduated from {univ}.",
                    "{s} is a graduate of {univ}."),
    "person.founded": ("{He} founded {company} in {year}.",),
    "person.directed": ("{His} films as director include {films}.",),
    "person.children": ("{His} children include {kids}.",),
    "person.siblings": ("{He} is the {sibling} of {sibs}.",),
    "person.field": ("{He} is known for {his} work in {field}.",),
    "company.intro": ("{s} is {a_industry} company headquartered in {city}.",
                      "{s} is {a_industry} firm based in {city}.",
                      "{s} is {a_industry} company with its headquarters in {city}."),
    "company.founded": ("It was founded in {year} by {founder}.",
                        "The company was established by {founder} in {year}.",
                        "{founder} founded {s} in {year}."),
    "company.size": ("It employs about {n} people.",),
    "company.ceo": ("Its chief executive is {person}.",),
    "film.main": ("{s} is a {year} {genre} film directed by {director}.",
                  "{s} is {a_genre} film directed by {director} and released in {year}.",
                  "Directed by {director}, {s} is {a_genre} film from {year}."),
    "film.cast": ("It stars {a} and {b}.",),
    "film.producer": ("The film was produced by {company}.",),
    "film.location": ("It was shot in {city}.",),
    "city.main": ("{s} is a city in {country}.",
                  "{s} is a town located in {country}.",
                  "{s} lies in {country}."),
    "city.founded": ("It was founded in {year}.",
                     "The city was established in {year}.",
                     "{s} was founded in {year}."),
    "city.population": ("It has a population of {pop}.",
                        "About {pop} people live in {s}.",
                        "{s} has {pop} inhabitants."),
    "city.capital": ("It is the capital of {country}.",),
    "city.people": ("Notable people born in {s} include {a} and {b}.",),
    "country.main": ("{s} is a country whose capital is {capital}.",
                     "The capital of {s} is {capital}.",
                     "{capital} is the capital city of {s}."),
    "country.population": ("It has a population of {pop}.",
                           "{s} is home to {pop} people.",
                           "About {pop} people live in {s}."),
    "country.independence": ("It became independent in {year}.",),
    "country.cities": ("Its largest cities include {a} and {b}.",),
    "university.main": ("{s} is a public university in {city}.",
                        "{s} is a university located in {city}.",
                        "{s} is a research university based in {city}."),
    "university.founded": ("It was founded in {year}.",
                           "The university was established in {year}.",
                           "{s} was founded in {year}."),
    "university.alumni": ("Its alumni include {a} and {b}.",),
    "university.field": ("It is known for its programmes in {field}.",),
}

# relation -> (source type, target type)
RELATIONS: dict[str, tuple[int, int]] = {
    "director": (FILM, PERSON),
    "founder": (COMPANY, PERSON),
    "hq": (COMPANY, CITY),
    "univ_city": (UNIVERSITY, CITY),
    "birthplace": (PERSON, CITY),
    "father": (PERSON, PERSON),
    "spouse": (PERSON, PERSON),
    "alma": (PERSON, UNIVERSITY),
    "country": (CITY, COUNTRY),
    "capital": (COUNTRY, CITY),
}
# attribute -> types that have it
ATTRIBUTES: dict[str, tuple[int, ...]] = {
    "birth_year": (PERSON,),
    "founded": (COMPANY, UNIVERSITY, CITY),
    "released": (FILM,),
    "population": (CITY, COUNTRY),
}

# (relation or attribute) -> [(sentence key, field holding the value)]: where each fact is written.
RELATION_SENTENCES: dict[str, tuple[tuple[str, str], ...]] = {
    "director": (("film.main", "director"),),
    "founder": (("company.founded", "founder"),),
    "hq": (("company.intro", "city"),),
    "univ_city": (("university.main", "city"),),
    "birthplace": (("person.birthplace", "city"),),
    "father": (("person.father", "father"),),
    "spouse": (("person.spouse", "spouse"),),
    "alma": (("person.alma", "univ"),),
    "country": (("city.main", "country"),),
    "capital": (("country.main", "capital"),),
    "birth_year": (("person.intro", "year"),),
    "founded": (("company.founded", "year"), ("university.founded", "year"),
                ("city.founded", "year")),
    "released": (("film.main", "year"),),
    "population": (("city.population", "pop"), ("country.population", "pop")),
}
_FACT_KEY = {  # (type, relation/attribute) -> sentence key
    (t, rel): key
    for rel, pairs in RELATION_SENTENCES.items()
    for key, _ in pairs
    for t in range(6)
    if key.split(".")[0] == TYPE_NAMES[t]
}

# Noun phrases for the entity a relation leads to: "the founder of {}".
NOUN_PHRASES: dict[str, tuple[str, ...]] = {
    "director": ("the director of {}",),
    "founder": ("the founder of {}",),
    "hq": ("the city where {} is headquartered", "the headquarters city of {}"),
    "univ_city": ("the city where {} is located",),
    "birthplace": ("the birthplace of {}", "the city where {} was born"),
    "father": ("the father of {}",),
    "spouse": ("the spouse of {}",),
    "alma": ("the university attended by {}", "the alma mater of {}"),
    "country": ("the country where {} lies", "the country of {}"),
    "capital": ("the capital of {}",),
}
# Questions whose answer is the last relation's target or the attribute's value.
QUESTIONS: dict[str, tuple[str, ...]] = {
    "director": ("Who directed {}?", "Who is the director of {}?"),
    "founder": ("Who founded {}?", "Who is the founder of {}?"),
    "hq": ("Where is {} headquartered?", "In which city is {} headquartered?"),
    "univ_city": ("Where is {} located?", "In which city is {} located?"),
    "birthplace": ("Where was {} born?", "In which city was {} born?"),
    "father": ("Who is the father of {}?", "Who was the father of {}?"),
    "spouse": ("Who is the spouse of {}?", "Whom did {} marry?"),
    "alma": ("Where did {} study?", "Which university did {} attend?"),
    "country": ("In which country is {}?", "Which country is {} in?"),
    "capital": ("What is the capital of {}?",),
    "birth_year": ("When was {} born?", "In what year was {} born?"),
    "founded": ("When was {} founded?", "In which year was {} established?"),
    "released": ("When was {} released?", "In which year did {} come out?"),
    "population": ("What is the population of {}?", "How many people live in {}?"),
}
# The single sub-question an oracle decomposition uses per hop.
SUB_QUESTIONS: dict[str, str] = {rel: qs[0] for rel, qs in QUESTIONS.items()}
# The oracle's search keyword per (sentence key, relation), one per template of that sentence:
# a hop's query is "<entity name> <keyword of the phrasing its document uses>".
QUERY_WORDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("person.intro", "birth_year"): ("born", "born", "born"),
    ("person.birthplace", "birthplace"): ("born", "born", "birthplace"),
    ("person.father", "father"): ("{child}", "father", "father"),
    ("person.spouse", "spouse"): ("married", "spouse", "married"),
    ("person.alma", "alma"): ("studied", "graduated", "graduate"),
    ("company.intro", "hq"): ("headquartered", "based", "headquarters"),
    ("company.founded", "founder"): ("founded", "established", "founded"),
    ("company.founded", "founded"): ("founded", "established", "founded"),
    ("film.main", "director"): ("directed", "directed", "directed"),
    ("film.main", "released"): ("film", "released", "film"),
    ("city.main", "country"): ("city", "town", "lies"),
    ("city.founded", "founded"): ("founded", "established", "founded"),
    ("city.population", "population"): ("population", "live", "inhabitants"),
    ("country.main", "capital"): ("capital", "capital", "capital"),
    ("country.population", "population"): ("population", "home", "live"),
    ("university.main", "univ_city"): ("university", "located", "based"),
    ("university.founded", "founded"): ("founded", "established", "founded"),
}
# Comparisons: (attribute or relation, mode) -> template. mode: first/last (years), max/min
# (numbers), same (shared relation target -> yes/no).
COMPARISONS: dict[tuple[str, str], tuple[str, int]] = {
    # template, entity type compared
    ("founded", "first"): ("Which was founded first, {a} or {b}?", COMPANY),
    ("founded", "last"): ("Which was founded more recently, {a} or {b}?", COMPANY),
    ("birth_year", "first"): ("Who was born first, {a} or {b}?", PERSON),
    ("birth_year", "last"): ("Who was born later, {a} or {b}?", PERSON),
    ("released", "first"): ("Which film came out first, {a} or {b}?", FILM),
    ("released", "last"): ("Which film was released more recently, {a} or {b}?", FILM),
    ("population", "max"): ("Which city has the larger population, {a} or {b}?", CITY),
    ("population", "min"): ("Which city has fewer inhabitants, {a} or {b}?", CITY),
    ("birthplace", "same"): ("Were {a} and {b} born in the same city?", PERSON),
    ("hq", "same"): ("Are {a} and {b} headquartered in the same city?", COMPANY),
    ("country", "same"): ("Are {a} and {b} in the same country?", CITY),
}
# Bridge comparisons: (bridge relation, compared attribute/relation, mode, hops) -> template.
# With 4 hops both sides go through the bridge and the answer names a side ({a} or {b}); with 3
# hops only the left side does and the answer is a person (the bridge entity or {b}) or yes/no.
BRIDGE_COMPARISONS: dict[tuple[str, str, str, int], tuple[str, int]] = {
    ("director", "birth_year", "first", 4):
        ("Which film has the director who was born first, {a} or {b}?", FILM),
    ("director", "birth_year", "last", 4):
        ("Which film has the director who was born later, {a} or {b}?", FILM),
    ("founder", "birth_year", "first", 4):
        ("Which company has the founder who was born first, {a} or {b}?", COMPANY),
    ("founder", "birthplace", "same", 4):
        ("Were the founders of {a} and {b} born in the same city?", COMPANY),
    ("director", "birthplace", "same", 4):
        ("Were the directors of {a} and {b} born in the same city?", FILM),
    ("director", "birth_year", "first", 3):
        ("Who was born first, the director of {a} or {b}?", FILM),
    ("founder", "birth_year", "first", 3):
        ("Who was born first, the founder of {a} or {b}?", COMPANY),
    ("director", "birthplace", "same", 3):
        ("Was the director of {a} born in the same city as {b}?", FILM),
    ("founder", "birthplace", "same", 3):
        ("Was the founder of {a} born in the same city as {b}?", COMPANY),
}
# Inference: kinship relation names for chains of father/spouse links.
INFERENCES: dict[tuple[str, ...], str] = {
    ("father", "father"): "Who is the paternal grandfather of {}?",
    ("father", "spouse"): "Who is the mother of {}?",
    ("spouse", "father"): "Who is the father-in-law of {}?",
    ("father", "father", "father"): "Who is the paternal great-grandfather of {}?",
    ("father", "father", "spouse"): "Who is the paternal grandmother of {}?",
    ("spouse", "father", "father"): "Who is the grandfather-in-law of {}?",
    ("father", "father", "father", "father"): "Who is the paternal great-great-grandfather of {}?",
    ("father", "father", "father", "spouse"): "Who is the paternal great-grandmother of {}?",
}

_LOCAL_COST, _WEB_COST = 0.0, 1.0
_FATHER_SHARE = 0.4  # share of men who father children


# ---------------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------------
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
        ValueError: hops must be ints in 1..4, got (5,)
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
            return ValueError(msg)

        def is_int(x: object) -> bool:
            return isinstance(x, (int, np.integer)) and not isinstance(x, bool)

        def is_num(x: object) -> bool:
            return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)

        hops = (self.hops,) if is_int(self.hops) else self.hops
        try:
            if isinstance(hops, str) or not all(is_int(h) for h in hops):  # type: ignore
                raise TypeError
            hops = tuple(sorted({int(h) for h in hops}))  # type: ignore[union-attr]
        except TypeError:
            raise bad(f"hops must be an int or a tuple of ints in 1..4, got {self.hops!r}"
                      ) from None
        if not hops or any(h < 1 or h > 4 for h in hops):
            raise bad(f"hops must be ints in 1..4, got {hops!r}")
        kinds = (self.kinds,) if isinstance(self.kinds, str) else tuple(self.kinds)
        unknown = [k for k in kinds if k not in KINDS]
        if not kinds or unknown:
            raise bad(f"kinds must be a non-empty subset of {KINDS}, got unknown {unknown!r}")
        kinds = tuple(k for k in KINDS if k in kinds)  # canonical order
        if not any(h in _KIND_HOPS[k] for k in kinds for h in hops):
            allowed = {k: _KIND_HOPS[k] for k in kinds}
            raise bad(f"no question kind in {kinds} has a hop count in {hops}: allowed hops "
                      f"per kind are {allowed}")
        object.__setattr__(self, "hops", hops)
        object.__setattr__(self, "kinds", kinds)
        if not is_int(self.seed) or self.seed < 0:
            raise bad(f"seed must be an int >= 0, got {self.seed!r}")
        if not is_int(self.n_entities) or not 100 <= self.n_entities <= 5_000_000:
            raise bad(f"n_entities must be an int in 100..5,000,000, got {self.n_entities!r}")
        if not is_int(self.n_questions) or self.n_questions < 1:
            raise bad(f"n_questions must be an int >= 1, got {self.n_questions!r}")
        for name, lo, hi in (("distractors", 0.0, 1.0), ("web_noise", 0.0, 1.0),
                             ("test_fraction", 0.0, 0.9)):
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
            raise ValueError(f"unknown WorldConfig argument(s) {unknown}; valid: {sorted(names)}")
        return cls(**kwargs)

    @property
    def kind_hops(self) -> tuple[tuple[str, int], ...]:
        """The (kind, hops) combinations questions are drawn from, uniformly."""
        return tuple((k, h) for k in self.kinds for h in self.hops if h in _KIND_HOPS[k])


# ---------------------------------------------------------------------------------------------
# The entity graph
# ---------------------------------------------------------------------------------------------
@dataclass
class _Graph:
    """Entities as parallel arrays indexed by an internal id (types in contiguous blocks)."""

    etype: np.ndarray
    culture: np.ndarray
    names: list[str]
    rel: dict[str, np.ndarray]
    year: np.ndarray
    pop: np.ndarray
    female: np.ndarray
    occupation: list[str]
    extra: dict[str, np.ndarray]  # misc ints: industry/genre codes, mentions, doc numbers ...
    confusable: np.ndarray  # id of the entity this one is a near-namesake of, or -1
    twin: np.ndarray  # a near-namesake in either direction (incl. "II" sons), or -1
    test: np.ndarray  # held-out test entity
    by_type: dict[int, np.ndarray]
    children: tuple[np.ndarray, np.ndarray]  # CSR (starts, items) over persons' father links
    founded_by: tuple[np.ndarray, np.ndarray]
    directed_by: tuple[np.ndarray, np.ndarray]
    born_in: tuple[np.ndarray, np.ndarray]
    alumni_of: tuple[np.ndarray, np.ndarray]
    cities_of: tuple[np.ndarray, np.ndarray]
    tmpl: np.ndarray  # per entity: packed template choices
    docnum: np.ndarray
    local: np.ndarray  # bool, covered by the local source
    covered_cultures: tuple[int, ...]

    def target(self, rel: str, i: int) -> int:
        return int(self.rel[rel][i])



def _csr(keys: np.ndarray, values: np.ndarray, n: int, order_by: np.ndarray | None = None
         ) -> tuple[np.ndarray, np.ndarray]:
    """Group ``values`` by ``keys`` (>= 0) into CSR arrays ``(starts, items)`` over ``n`` keys.

    Example:
        >>> starts, items = _csr(np.array([2, 0, 2, 1, -1]), np.arange(5), 3)
        >>> [items[starts[k]:starts[k + 1]].tolist() for k in range(3)]
        [[1], [3], [0, 2]]
    """
    ok = keys >= 0
    keys, values = keys[ok], values[ok]
    # np.lexsort sorts by its last key first: group by key, then by value (or ``order_by``).
    sort_key = (values, keys) if order_by is None else (order_by[ok], keys)
    order = np.lexsort(sort_key)
    keys, values = keys[order], values[order]
    starts = np.searchsorted(keys, np.arange(n + 1))
    return starts, values


def _counts(n: int) -> dict[int, int]:
    n_country = int(np.clip(round(n ** 0.5 / 3), 4, 300))
    n_city = max(2 * n_country, int(0.08 * n))
    n_univ = max(n_country, int(0.04 * n))
    n_company = max(8, int(0.13 * n))
    n_film = max(8, int(0.13 * n))
    n_person = n - n_country - n_city - n_univ - n_company - n_film
    return {COUNTRY: n_country, CITY: n_city, PERSON: n_person, COMPANY: n_company,
            FILM: n_film, UNIVERSITY: n_univ}


def _build_graph(cfg: WorldConfig, rng: np.random.Generator, split_rng: np.random.Generator,
                 route_rng: np.random.Generator) -> _Graph:
    n = cfg.n_entities
    counts = _counts(n)
    etype = np.concatenate([np.full(counts[t], t, dtype=np.int8) for t in range(6)])
    by_type: dict[int, np.ndarray] = {}
    start = 0
    for t in range(6):
        by_type[t] = np.arange(start, start + counts[t])
        start += counts[t]
    n_cult = min(len(CULTURES), counts[COUNTRY])
    culture = np.zeros(n, dtype=np.int16)
    rel = {r: np.full(n, -1, dtype=np.int64) for r in RELATIONS}
    year = np.zeros(n, dtype=np.int64)
    pop = np.zeros(n, dtype=np.int64)
    female = np.zeros(n, dtype=bool)
    extra = {k: np.full(n, -1, dtype=np.int64) for k in
             ("code", "ceo", "cast_a", "cast_b", "producer", "location", "employees", "field")}
    d = cfg.distractors

    # Countries and cities.
    countries, cities = by_type[COUNTRY], by_type[CITY]
    culture[countries] = np.arange(len(countries)) % n_cult
    ccountry = np.concatenate([countries, rng.choice(countries, len(cities) - len(countries))])
    rel["country"][cities] = ccountry
    culture[cities] = culture[ccountry]
    pop[cities] = np.round(np.exp(rng.normal(11.0, 1.1, len(cities)))).astype(np.int64) + 500
    year[cities] = rng.integers(700, 1950, len(cities))
    # The first city of each country is its capital (and a big one).
    rel["capital"][countries] = cities[: len(countries)]
    pop[cities[: len(countries)]] *= 4
    year[countries] = rng.integers(1200, 1995, len(countries))
    cities_of = _csr(rel["country"][cities], cities, n, order_by=-pop[cities])
    for c in countries:  # country population: its cities times a factor
        members = cities_of[1][cities_of[0][c]:cities_of[0][c + 1]]
        pop[c] = int(pop[members].sum() * 3 + 10_000)

    def same_culture(pool: np.ndarray, cult: np.ndarray, p_same: float) -> np.ndarray:
        """For each culture in ``cult``, a random member of ``pool`` of that culture (p_same)."""
        out = np.empty(len(cult), dtype=np.int64)
        cross = rng.random(len(cult)) >= p_same
        groups = {c: pool[culture[pool] == c] for c in range(n_cult)}
        draws = rng.random(len(cult))
        for j, c in enumerate(cult.tolist()):
            g = groups.get(c)
            if cross[j] or g is None or len(g) == 0:
                g = pool
            out[j] = g[int(draws[j] * len(g))]
        return out

    # People: birthplace (-> culture), birth year, gender, fathers, spouses.
    persons = by_type[PERSON]
    bcity = rng.choice(cities, len(persons))
    rel["birthplace"][persons] = bcity
    culture[persons] = culture[bcity]
    year[persons] = rng.integers(1800, 2006, len(persons))
    female[persons] = rng.random(len(persons)) < 0.5
    for c in range(n_cult):
        idx = persons[culture[persons] == c]
        idx = idx[np.argsort(year[idx], kind="stable")]
        males = idx[~female[idx]]
        # Fathers come from a share of the men, so families have several children (siblings
        # share a surname and name each other on their pages).
        sires = males[rng.random(len(males)) < _FATHER_SHARE]
        my = year[sires]
        lo = np.searchsorted(my, year[idx] - 45, "left")
        hi = np.searchsorted(my, year[idx] - 20, "right")
        has = (hi > lo) & (rng.random(len(idx)) < 0.85)
        pick = lo + np.floor(rng.random(len(idx)) * (hi - lo)).astype(np.int64)
        rel["father"][idx[has]] = sires[np.minimum(pick, len(sires) - 1)[has]]
        fem = idx[female[idx]]
        m_sel = males[rng.random(len(males)) < 0.65]
        f_sel = fem[rng.random(len(fem)) < 0.65]
        k = min(len(m_sel), len(f_sel))
        rel["spouse"][m_sel[:k]] = f_sel[:k]
        rel["spouse"][f_sel[:k]] = m_sel[:k]
    # Universities (needed before alma mater).
    univs = by_type[UNIVERSITY]
    ucity = rng.choice(cities, len(univs))
    rel["univ_city"][univs] = ucity
    culture[univs] = culture[ucity]
    year[univs] = rng.integers(1100, 1990, len(univs))
    studied = rng.random(len(persons)) < 0.7
    rel["alma"][persons[studied]] = same_culture(univs, culture[persons[studied]], 0.85)

    # Companies: founder from a pool of entrepreneurs, hq city mostly in the founder's region.
    companies = by_type[COMPANY]
    adults = persons[year[persons] <= 1990]
    founders_pool = rng.choice(adults, max(1, len(companies) // 2), replace=False) \
        if len(adults) >= max(1, len(companies) // 2) else adults
    comp_cult = rng.integers(0, n_cult, len(companies))
    culture[companies] = comp_cult
    rel["founder"][companies] = same_culture(founders_pool, comp_cult, 0.85)
    rel["hq"][companies] = same_culture(cities, comp_cult, 0.85)
    year[companies] = np.minimum(
        year[rel["founder"][companies]] + rng.integers(22, 60, len(companies)), 2024)
    extra["employees"][companies] = np.round(np.exp(rng.normal(6.5, 1.5, len(companies)))) + 5
    extra["ceo"][companies] = rng.choice(adults, len(companies))

    # Films: director from a pool of film makers.
    films = by_type[FILM]
    # Film makers are born after 1860, so that films date from the age of cinema.
    modern = adults[year[adults] >= 1860]
    modern = modern if len(modern) else adults
    directors_pool = rng.choice(modern, max(1, len(films) // 3), replace=False) \
        if len(modern) >= max(1, len(films) // 3) else modern
    film_cult = rng.integers(0, n_cult, len(films))
    culture[films] = film_cult
    rel["director"][films] = same_culture(directors_pool, film_cult, 0.85)
    year[films] = np.minimum(year[rel["director"][films]] + rng.integers(25, 60, len(films)), 2024)
    extra["code"][films] = rng.integers(0, len(FILM_GENRES), len(films))
    extra["producer"][films] = rng.choice(companies, len(films))
    extra["location"][films] = same_culture(cities, film_cult, 0.85)
    extra["field"][:] = rng.integers(0, len(FIELDS), n)

    # Occupations.
    occ_draw = rng.integers(0, len(OCCUPATIONS), n).tolist()
    occupation = [""] * n
    for p in persons.tolist():
        occupation[p] = OCCUPATIONS[occ_draw[p]]
    for p in set(rel["founder"][companies].tolist()):
        occupation[p] = "businessman" if not female[p] else "businesswoman"
    for p in set(rel["director"][films].tolist()):
        occupation[p] = "film director"
    actors = persons[np.array([occupation[p] == "actor" for p in persons.tolist()], dtype=bool)]
    if len(actors) >= 2:
        extra["cast_a"][films] = same_culture(actors, film_cult, 0.85)
        extra["cast_b"][films] = same_culture(actors, film_cult, 0.85)

    # Names, in dependency order (fathers before children, cities before universities).
    maker = NameMaker(rng)
    names = [""] * n
    taken: set[str] = set()
    confusable = np.full(n, -1, dtype=np.int64)

    def claim(i: int, name: str) -> bool:
        if name in taken or " or " in name or "," in name:
            return False
        taken.add(name)
        names[i] = name
        return True

    def fresh(i: int, make: Any) -> None:
        """Claim a new name from ``make()``, with longer words after repeated collisions."""
        for attempt in range(10_000):
            maker.extra = attempt // 20
            if claim(i, make()):
                maker.extra = 0
                return
        raise RuntimeError("name space exhausted")  # pragma: no cover - 10k collisions

    has_variant = np.zeros(n, dtype=bool)
    namesake = np.full(n, -1, dtype=np.int64)  # sons named after their fathers

    def variant(i: int, pool: list[int], j: int, make_variant: Any, p: float) -> bool:
        """With probability ``p``, name ``i`` after an earlier entity of ``pool`` (confusable).

        Each original gets at most one near-namesake, and near-namesakes get none, so a name
        has at most one confusable sibling.
        """
        if j == 0 or maker.u() >= p:
            return False
        other = pool[int(maker.u() * j)]
        if has_variant[other] or confusable[other] >= 0:
            return False
        if claim(i, make_variant(names[other])):
            confusable[i] = other
            has_variant[other] = True
            return True
        return False

    def city_variant(name: str) -> str:
        if maker.u() < 0.6:
            return f"{maker.pick(CITY_PREFIXES)} {name}"
        return maker.vowel_variant(name)

    for c in countries.tolist():
        fresh(c, lambda c=c: maker.country(int(culture[c])))
    city_list = cities.tolist()
    for j, c in enumerate(city_list):
        if not variant(c, city_list, j, city_variant, d * 0.5):
            fresh(c, lambda c=c: maker.city(int(culture[c])))
    # People: given names from a small regional pool, surnames inherited from fathers.
    given_pool: dict[tuple[int, bool], list[str]] = {}
    fam_pool: dict[int, list[str]] = {}
    n_per_cult = max(1, len(persons) // n_cult)
    for c in range(n_cult):
        for fem in (False, True):
            given_pool[c, fem] = [maker.given(c, fem)
                                  for _ in range(max(12, min(600, n_per_cult // 25)))]
        fam_pool[c] = list(dict.fromkeys(maker.family(c) for _ in range(max(8, n_per_cult // 4))))
    family = [""] * n
    fathers = rel["father"].tolist()
    for p in persons[np.argsort(year[persons], kind="stable")].tolist():
        cu = int(culture[p])
        fem = bool(female[p])
        f = fathers[p]
        if f >= 0:
            fam = family[f]
        else:
            fam = maker.pick(fam_pool[cu])
            if maker.u() < d * 0.3:
                fam = maker.vowel_variant(fam)
        family[p] = fam
        # A share of sons are named after their fathers ("Kiro Lant" -> "Kiro Lant II"), so a
        # search for the father also finds the son, whose page names the father.
        if f >= 0 and not fem and maker.u() < d * 0.9 and not names[f].endswith(" III"):
            if claim(p, names[f][:-3] + " III" if names[f].endswith(" II") else names[f] + " II"):
                namesake[p] = f
                continue
        pool = given_pool[cu, fem]
        fresh(p, lambda fam=fam, pool=pool, cu=cu, fem=fem: f"{maker.pick(pool)} {fam}"
              if maker.extra == 0 else f"{maker.given(cu, fem)} {fam}")
    # Universities: mostly named after their city, so "University of X" is confusable with X.
    for u in univs.tolist():
        cname = names[int(rel["univ_city"][u])]
        cu = int(culture[u])
        for form in (f"University of {cname}", f"{cname} Institute of Technology",
                     f"{cname} State University"):
            if claim(u, form):
                break
        else:
            fresh(u, lambda cu=cu: f"{maker.family(cu)} College" if maker.u() < 0.5
                  else f"{maker.stem(cu)} University")
    # Companies: "Stem Suffix"; confusables extend the name, swap the suffix or respell the stem.
    suffixes = tuple(COMPANY_SUFFIXES)
    comp_list = companies.tolist()

    def company_variant(name: str) -> str:
        stem, suf = name.split(" ", 1)
        r = maker.u()
        if r < 0.7:
            return f"{stem} {suf.split(' ')[0]} {maker.pick(COMPANY_EXTENSIONS)}"
        if r < 0.85:
            return f"{stem} {maker.pick(suffixes)}"
        return f"{maker.vowel_variant(stem)} {suf}"

    for j, c in enumerate(comp_list):
        if not variant(c, comp_list, j, company_variant, d):
            fresh(c, lambda c=c: f"{maker.stem(int(culture[c]))} {maker.pick(suffixes)}")
        extra["code"][c] = suffixes.index(names[c].split(" ")[1])
    # Films: confusables are sequels ("X II") or respellings of one word.
    film_list = films.tolist()

    def film_variant(name: str) -> str:
        if maker.u() < 0.7:
            return f"{name[:-3]} III" if name.endswith(" II") else f"{name} II"
        words = name.split(" ")
        k = int(maker.u() * len(words))
        if words[k] in ("The", "of", "II", "III"):
            k = 1 if words[0] == "The" else 0
        words[k] = maker.vowel_variant(words[k])
        return " ".join(words)

    for j, f in enumerate(film_list):
        if not variant(f, film_list, j, film_variant, d):
            fresh(f, lambda f=f: maker.film_title(int(culture[f])))

    # Held-out test entities and routing coverage.
    test = np.zeros(n, dtype=bool)
    if cfg.test_fraction > 0:
        test[:] = split_rng.random(n) < cfg.test_fraction
        test[countries] = False
    covered: tuple[int, ...]
    if len(cfg.sources) == 1 or cfg.local_coverage >= 1.0:
        covered = tuple(range(n_cult))
    else:
        k = int(np.clip(round(cfg.local_coverage * n_cult), 1, n_cult - 1))
        covered = tuple(sorted(route_rng.permutation(n_cult)[:k].tolist()))
    local = np.isin(culture, np.array(covered))

    # Each entity's closest namesake (either direction), for hard comparison pairs.
    twin = np.full(n, -1, dtype=np.int64)
    for arr in (confusable, namesake):
        src = np.nonzero(arr >= 0)[0]
        twin[src] = arr[src]
        twin[arr[src]] = src

    # Template choices (base-variety digits) and doc numbers (shuffled so ids hide types).
    tmpl = rng.integers(0, cfg.phrasing_variety ** 8, n)
    docnum = rng.permutation(n)
    g = _Graph(
        etype=etype, culture=culture, names=names, rel=rel, year=year, pop=pop, female=female,
        occupation=occupation, extra=extra, confusable=confusable, twin=twin, test=test,
        by_type=by_type,
        children=_csr(rel["father"], np.arange(n), n),
        founded_by=_csr(rel["founder"], np.arange(n), n),
        directed_by=_csr(rel["director"], np.arange(n), n),
        born_in=_csr(rel["birthplace"], np.arange(n), n),
        alumni_of=_csr(rel["alma"], np.arange(n), n),
        cities_of=cities_of, tmpl=tmpl, docnum=docnum, local=local, covered_cultures=covered,
    )
    return g


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------
_SLOTS = {  # sentence key -> digit of the packed template choice
    "person.intro": 0, "person.birthplace": 1, "person.father": 2, "person.spouse": 3,
    "person.alma": 4, "company.intro": 0, "company.founded": 1, "film.main": 0, "city.main": 0,
    "city.founded": 1, "city.population": 2, "country.main": 0, "country.population": 1,
    "university.main": 0, "university.founded": 1,
}


def _a(noun: str) -> str:
    """``noun`` with its indefinite article."""
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _join(items: list[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


_PRONOUNS = ({"He": "He", "he": "he", "His": "His", "his": "his", "child": "son",
              "sibling": "brother"},
             {"He": "She", "he": "she", "His": "Her", "his": "her", "child": "daughter",
              "sibling": "sister"})


class _Writer:
    """Writes documents from the graph; a pure function of the entity id.

    Everything is converted to Python lists up front: a million documents are written one by one,
    and list indexing is several times faster than NumPy scalar access.
    """

    def __init__(self, g: _Graph, cfg: WorldConfig) -> None:
        self.g, self.v = g, cfg.phrasing_variety
        self.names = g.names
        self.etype = g.etype.tolist()
        self.year = g.year.tolist()
        self.pop = g.pop.tolist()
        self.female = g.female.tolist()
        self.tmpl = g.tmpl.tolist()
        self.rel = {k: v.tolist() for k, v in g.rel.items()}
        self.extra = {k: v.tolist() for k, v in g.extra.items()}
        self.confusable = g.confusable.tolist()
        self.industry = list(COMPANY_SUFFIXES.values())
        self.powers = [self.v ** k for k in range(8)]
        self.occupation = g.occupation

        def lists(table: tuple[np.ndarray, np.ndarray]) -> tuple[list[int], list[int]]:
            return table[0].tolist(), table[1].tolist()

        self.children = lists(g.children)
        self.founded_by = lists(g.founded_by)
        self.directed_by = lists(g.directed_by)
        self.born_in = lists(g.born_in)
        self.alumni_of = lists(g.alumni_of)
        self.cities_of = lists(g.cities_of)

    def choice(self, key: str, i: int) -> int:
        """Which template of sentence ``key`` entity ``i``'s document uses."""
        slot = _SLOTS.get(key)
        if slot is None or len(SENTENCES[key]) == 1:
            return 0
        return (self.tmpl[i] // self.powers[slot]) % self.v

    @staticmethod
    def _few(table: tuple[list[int], list[int]], i: int, n: int) -> list[int]:
        starts, items = table
        a = starts[i]
        return items[a:min(starts[i + 1], a + n)]

    def sentences(self, i: int) -> list[tuple[str, str]]:
        """``(sentence key, sentence)`` pairs of entity ``i``'s document, in order."""
        nm, t, S, rel = self.names, self.etype[i], SENTENCES, self.rel
        s = nm[i]
        tm, pw, v = self.tmpl[i], self.powers, self.v
        out: list[tuple[str, str]] = []
        other = self.confusable[i]
        if other >= 0:
            out.append(("hatnote", S["hatnote"][0].format(other=nm[other])))
        if t == PERSON:
            fem = self.female[i]
            pr = _PRONOUNS[fem]
            year = self.year[i]
            out.append(("person.intro", S["person.intro"][tm % v].format(
                s=s, a_occ=_a(self.occupation[i]), year=year, **pr)))
            out.append(("person.birthplace", S["person.birthplace"][(tm // pw[1]) % v].format(
                s=s, city=nm[rel["birthplace"][i]], **pr)))
            f = rel["father"][i]
            if f >= 0:
                out.append(("person.father", S["person.father"][(tm // pw[2]) % v].format(
                    s=s, father=nm[f], **pr)))
            sp = rel["spouse"][i]
            if sp >= 0:
                out.append(("person.spouse", S["person.spouse"][(tm // pw[3]) % v].format(
                    s=s, spouse=nm[sp], **pr)))
            u = rel["alma"][i]
            if u >= 0:
                out.append(("person.alma", S["person.alma"][(tm // pw[4]) % v].format(
                    s=s, univ=nm[u], **pr)))
            for c in self._few(self.founded_by, i, 1):
                out.append(("person.founded", S["person.founded"][0].format(
                    company=nm[c], year=self.year[c], **pr)))
            films = self._few(self.directed_by, i, 2)
            if films:
                out.append(("person.directed", S["person.directed"][0].format(
                    films=_join([nm[x] for x in films]), **pr)))
            if f >= 0:
                sibs = [x for x in self._few(self.children, f, 3) if x != i][:2]
                if sibs:
                    out.append(("person.siblings", S["person.siblings"][0].format(
                        sibs=_join([nm[x] for x in sibs]), **pr)))
            kids = self._few(self.children, i, 2)
            if kids:
                out.append(("person.children", S["person.children"][0].format(
                    kids=_join([nm[x] for x in kids]), **pr)))
            out.append(("person.field", S["person.field"][0].format(
                field=FIELDS[self.extra["field"][i]], **pr)))
        elif t == COMPANY:
            out.append(("company.intro", S["company.intro"][tm % v].format(
                s=s, a_industry=_a(self.industry[self.extra["code"][i]]),
                city=nm[rel["hq"][i]])))
            out.append(("company.founded", S["company.founded"][(tm // pw[1]) % v].format(
                s=s, year=self.year[i], founder=nm[rel["founder"][i]])))
            out.append(("company.size", S["company.size"][0].format(
                n=f"{self.extra['employees'][i]:,}")))
            out.append(("company.ceo", S["company.ceo"][0].format(
                person=nm[self.extra["ceo"][i]])))
        elif t == FILM:
            genre = FILM_GENRES[self.extra["code"][i]]
            out.append(("film.main", S["film.main"][tm % v].format(
                s=s, year=self.year[i], genre=genre, a_genre=_a(genre),
                director=nm[rel["director"][i]])))
            a, b = self.extra["cast_a"][i], self.extra["cast_b"][i]
            if a >= 0 and b >= 0 and a != b:
                out.append(("film.cast", S["film.cast"][0].format(a=nm[a], b=nm[b])))
            out.append(("film.producer", S["film.producer"][0].format(
                company=nm[self.extra["producer"][i]])))
            out.append(("film.location", S["film.location"][0].format(
                city=nm[self.extra["location"][i]])))
        elif t == CITY:
            country = rel["country"][i]
            out.append(("city.main", S["city.main"][tm % v].format(s=s, country=nm[country])))
            out.append(("city.founded", S["city.founded"][(tm // pw[1]) % v].format(
                s=s, year=self.year[i])))
            out.append(("city.population", S["city.population"][(tm // pw[2]) % v].format(
                s=s, pop=f"{self.pop[i]:,}")))
            if rel["capital"][country] == i:
                out.append(("city.capital", S["city.capital"][0].format(country=nm[country])))
            people = self._few(self.born_in, i, 2)
            if len(people) == 2:
                out.append(("city.people", S["city.people"][0].format(
                    s=s, a=nm[people[0]], b=nm[people[1]])))
        elif t == COUNTRY:
            out.append(("country.main", S["country.main"][tm % v].format(
                s=s, capital=nm[rel["capital"][i]])))
            out.append(("country.population", S["country.population"][(tm // pw[1]) % v].format(
                s=s, pop=f"{self.pop[i]:,}")))
            out.append(("country.independence", S["country.independence"][0].format(
                year=self.year[i])))
            big = self._few(self.cities_of, i, 2)
            if len(big) == 2:
                out.append(("country.cities", S["country.cities"][0].format(
                    a=nm[big[0]], b=nm[big[1]])))
        else:  # UNIVERSITY
            out.append(("university.main", S["university.main"][tm % v].format(
                s=s, city=nm[rel["univ_city"][i]])))
            out.append(("university.founded", S["university.founded"][(tm // pw[1]) % v].format(
                s=s, year=self.year[i])))
            alumni = self._few(self.alumni_of, i, 2)
            if len(alumni) == 2:
                out.append(("university.alumni", S["university.alumni"][0].format(
                    a=nm[alumni[0]], b=nm[alumni[1]])))
            out.append(("university.field", S["university.field"][0].format(
                field=FIELDS[self.extra["field"][i]])))
        return out


def _chunks(n_sent: int, ppd: int) -> list[int]:
    """Sentence counts per passage: ``n_sent`` split into ``ppd`` near-equal contiguous parts."""
    base, rem = divmod(n_sent, ppd)
    return [base + (1 if j < rem else 0) for j in range(ppd)]


# ---------------------------------------------------------------------------------------------
# The world
# ---------------------------------------------------------------------------------------------
class SyntheticWorld:
    """A generated world: passages, questions and the source split (see :func:`generate_world`).

    Attributes:
        config: the :class:`WorldConfig` it was generated from.
        passages: the complete corpus (every entity's passages), sorted by ``doc_id``.
        samples: the questions (train and test), ids ``syn-000000`` ...
        documents: ``doc_id -> Passage`` for every passage of every source (web mirrors too).

    Example:
        >>> world = generate_world(WorldConfig(n_entities=300, n_questions=20))
        >>> len(world.passages), len(world.samples)
        (300, 20)
        >>> s = world.samples[0]
        >>> all(world.documents[h.doc_id] for h in s.decomposition)
        True
    """

    def __init__(self, config: WorldConfig, passages: list[Passage], samples: list[QASample],
                 web_extra: list[Passage], local_ids: frozenset[str],
                 covered_countries: tuple[str, ...]) -> None:
        self.config = config
        self.passages = passages
        self.samples = samples
        self._web_extra = web_extra
        self._local_ids = local_ids
        self.covered_countries = covered_countries
        self.documents: dict[str, Passage] = {p.doc_id: p for p in passages}
        self.documents.update((p.doc_id, p) for p in web_extra)

    @property
    def source_names(self) -> tuple[str, ...]:
        """The configured sources, the default (``local``) first."""
        return self.config.sources

    def source_of(self, doc_id: str) -> str:
        """The cheapest source that holds ``doc_id`` (``local`` when it is there)."""
        if len(self.config.sources) == 1 or doc_id in self._local_ids:
            return "local"
        return "web"

    def source_passages(self, name: str) -> list[Passage]:
        """The passages indexed by source ``name``, sorted by ``doc_id``.

        With one source, ``local`` is the complete corpus. With two, ``local`` is the covered
        part and ``web`` is everything plus mirror pages.
        """
        if name not in self.config.sources:
            raise ValueError(f"unknown source {name!r}; this world has {self.config.sources}")
        if len(self.config.sources) == 1:
            return self.passages
        if name == "local":
            return [p for p in self.passages if p.doc_id in self._local_ids]
        return sorted(self.passages + self._web_extra, key=lambda p: p.doc_id)

    def split(self, name: str) -> list[QASample]:
        """Questions of split ``name`` (``train`` or ``test``; see the module docstring)."""
        if name not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {name!r}")
        return [s for s in self.samples if s.metadata["split"] == name]

    def source_description(self, name: str) -> str:
        """The one-line description an agent sees for source ``name``."""
        if name == "web":
            return ("the whole web: complete but noisy (mirror pages), "
                    f"cost {_WEB_COST:g} per search")
        if len(self.config.sources) == 1:
            return "an encyclopedia of the whole world"
        return ("a local encyclopedia, free but incomplete: it covers only "
                + ", ".join(self.covered_countries))

    def fingerprint(self) -> str:
        """SHA-256 over every passage of every source and every question (determinism checks)."""
        h = hashlib.sha256()
        for p in sorted(self.documents.values(), key=lambda p: p.doc_id):
            h.update(f"{p.doc_id}\x1f{p.title}\x1f{p.text}\x1e".encode())
        for name in self.config.sources:
            h.update(("|".join(p.doc_id for p in self.source_passages(name)) + "\x1d").encode())
        for s in self.samples:
            h.update(repr((s.id, s.question, s.answers, s.supporting_ids, s.hops, s.kind,
                           s.decomposition, sorted(s.metadata.items()))).encode())
        return h.hexdigest()


@functools.lru_cache(maxsize=4)
def generate_world(config: WorldConfig) -> SyntheticWorld:
    """Generate (or fetch from the process cache) the world for ``config``.

    Example:
        >>> w = generate_world(WorldConfig(n_entities=300, n_questions=10, seed=1))
        >>> w is generate_world(WorldConfig(n_entities=300, n_questions=10, seed=1))
        True
    """
    ss = np.random.SeedSequence([config.seed, 0x4B0B])
    s_graph, s_split, s_route, s_noise, s_questions = ss.spawn(5)
    g = _build_graph(config, np.random.default_rng(s_graph), np.random.default_rng(s_split),
                     np.random.default_rng(s_route))
    writer = _Writer(g, config)
    n = config.n_entities
    width = max(6, len(str(n - 1)))
    docnum = g.docnum.tolist()
    ppd = config.passages_per_doc
    names = g.names
    order = np.argsort(g.docnum).tolist()
    passages: list[Passage] = []
    for i in order:
        sents = [s for _, s in writer.sentences(i)]
        base = f"e{docnum[i]:0{width}d}"
        if ppd == 1:
            passages.append(Passage(base, names[i], " ".join(sents)))
        else:
            pos = 0
            for j, size in enumerate(_chunks(len(sents), ppd)):
                passages.append(Passage(f"{base}-p{j + 1}", names[i],
                                        " ".join(sents[pos:pos + size])))
                pos += size
    two = len(config.sources) == 2
    local_ids: frozenset[str] = frozenset()
    web_extra: list[Passage] = []
    covered_countries: tuple[str, ...] = ()
    if two:
        local_ent = g.local.tolist()
        local_ids = frozenset(p.doc_id for p, i in zip(passages, _repeat(order, ppd), strict=True)
                              if local_ent[i])
        covered_countries = tuple(sorted(
            names[c] for c in g.by_type[COUNTRY].tolist() if local_ent[c]))
        noise = np.random.default_rng(s_noise)
        has_mirror = (noise.random(n) < config.web_noise).tolist()
        site = noise.integers(0, len(MIRROR_SITES), n).tolist()
        for i in order:
            if has_mirror[i]:
                sents = writer.sentences(i)
                body = [s for k, s in sents if k != "hatnote"][:2]
                text = " ".join(body) + " This page is a copy and may be incomplete."
                web_extra.append(Passage(f"w{docnum[i]:0{width}d}",
                                         f"{names[i]} | {MIRROR_SITES[site[i]]}", text))
    samples = _make_questions(config, g, writer, np.random.default_rng(s_questions), width,
                              local_ids if two else None)
    return SyntheticWorld(config, passages, samples, web_extra, local_ids, covered_countries)


def _repeat(order: list[int], k: int) -> Iterator[int]:
    for i in order:
        for _ in range(k):
            yield i


# ---------------------------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------------------------
def _answers_for(g: _Graph, i: int) -> tuple[str, ...]:
    """Canonical name plus aliases: an initialised form for people ("K. Lant")."""
    name = g.names[i]
    if g.etype[i] == PERSON:
        given, fam = name.split(" ", 1)
        return (name, f"{given[0]}. {fam}")
    return (name,)


def _bridge_paths(h: int, final_attr: bool) -> list[tuple[str, ...]]:
    """Relation paths of ``h`` hops (the last an attribute when ``final_attr``)."""
    banned = {("country", "capital"), ("capital", "country"), ("father", "father"),
              ("spouse", "spouse")}
    n_rel = h - 1 if final_attr else h
    paths: list[tuple[str, ...]] = [()]
    for _ in range(n_rel):
        paths = [p + (r,) for p in paths for r in RELATIONS
                 if not p or (RELATIONS[p[-1]][1] == RELATIONS[r][0] and (p[-1], r) not in banned)]
    if final_attr:
        out = []
        for p in paths:
            for a, types in ATTRIBUTES.items():
                if not p:
                    out.append((a,))
                elif RELATIONS[p[-1]][1] in types:
                    out.append(p + (a,))
        return out
    return paths


@dataclass
class _Plan:
    """A question before its hops are written: which fact of which entity each hop reads."""

    question: str
    kind: str
    answers: tuple[str, ...]
    steps: list[tuple[int, str]]  # (entity, relation or attribute) per hop
    topics: list[int]  # entities named in the question


class _QuestionMaker:
    def __init__(self, cfg: WorldConfig, g: _Graph, writer: _Writer, rng: np.random.Generator,
                 width: int, local_ids: frozenset[str] | None) -> None:
        self.cfg, self.g, self.w, self.rng = cfg, g, writer, rng
        self.width, self.local_ids = width, local_ids
        self.year = writer.year
        self.paths = {(kind, h): _bridge_paths(h, kind == "compositional")
                      for kind in ("bridge", "compositional") for h in range(1, 5)}
        self._pools: dict[tuple[int, bool, str], np.ndarray] = {}
        self._same: dict[tuple[int, str, str, bool], dict[int, list[int]]] = {}

    # -- facts --
    def doc_id(self, i: int, rel: str) -> str:
        """The passage of entity ``i`` that states ``rel``."""
        base = f"e{int(self.g.docnum[i]):0{self.width}d}"
        ppd = self.cfg.passages_per_doc
        if ppd == 1:
            return base
        key = _FACT_KEY[int(self.g.etype[i]), rel]
        sents = self.w.sentences(i)
        k = next(j for j, (sk, _) in enumerate(sents) if sk == key)
        acc = 0
        for j, size in enumerate(_chunks(len(sents), ppd)):
            acc += size
            if k < acc:
                return f"{base}-p{j + 1}"
        raise AssertionError("unreachable")

    def value(self, i: int, rel: str) -> str:
        if rel in RELATIONS:
            return self.g.names[self.g.target(rel, i)]
        if rel == "population":
            return f"{int(self.g.pop[i]):,}"
        return str(self.year[i])

    def hop(self, i: int, rel: str) -> Hop:
        name = self.g.names[i]
        doc = self.doc_id(i, rel)
        source = "local" if self.local_ids is None or doc in self.local_ids else "web"
        key = _FACT_KEY[int(self.g.etype[i]), rel]
        word = QUERY_WORDS[key, rel][self.w.choice(key, i)]
        if word == "{child}":
            word = "daughter" if self.g.female[i] else "son"
        return Hop(SUB_QUESTIONS[rel].format(name), self.value(i, rel), doc, f"{name} {word}",
                   source)

    def key(self, i: int, attr: str) -> int:
        """The compared value of ``attr`` for entity ``i`` (an entity id for relations)."""
        if attr in RELATIONS:
            return self.g.target(attr, i)
        return int(self.g.pop[i]) if attr == "population" else self.year[i]

    # -- drawing entities --
    def draw(self, pool: np.ndarray) -> int:
        return int(pool[int(self.rng.integers(len(pool)))])

    def pool(self, t: int, test: bool, need: str = "") -> np.ndarray:
        """Entities of type ``t`` in the given split (only those with relation ``need``, if set)."""
        k = (t, test, need)
        if k not in self._pools:
            p = self.g.by_type[t]
            if t != COUNTRY:
                p = p[self.g.test[p] == test]
            if need:
                p = p[self.g.rel[need][p] >= 0]
            self._pools[k] = p if len(p) else self.g.by_type[t][:0]
        return self._pools[k]

    def walk(self, start: int, rels: Sequence[str]) -> list[int] | None:
        """Entities along the relations of ``rels`` from ``start``, or None if a link is missing."""
        out = [start]
        for r in rels:
            if r not in RELATIONS:
                break
            nxt = self.g.target(r, out[-1])
            if nxt < 0 or nxt in out:
                return None
            out.append(nxt)
        return out

    def noun_phrase(self, rels: Sequence[str], name: str) -> str:
        text = name
        for r in rels:
            opts = NOUN_PHRASES[r]
            text = opts[int(self.rng.integers(len(opts)))].format(text)
        return text

    def answers_for(self, i: int) -> tuple[str, ...]:
        return _answers_for(self.g, i)

    # -- kinds --
    def chain(self, kind: str, h: int, test: bool) -> _Plan | None:
        if kind == "inference":
            combos = [k for k in INFERENCES if len(k) == h]
            rels = combos[int(self.rng.integers(len(combos)))]
            pool = self.pool(PERSON, test, rels[0])
            if not len(pool):
                return None
            start = self.draw(pool)
            ents = self.walk(start, rels)
            if ents is None:
                return None
            question = INFERENCES[rels].format(self.g.names[start])
        else:
            paths = self.paths[kind, h]
            rels = paths[int(self.rng.integers(len(paths)))]
            if rels[0] in RELATIONS:
                start_t = RELATIONS[rels[0]][0]
            else:
                types = ATTRIBUTES[rels[0]]
                start_t = types[int(self.rng.integers(len(types)))]
            pool = self.pool(start_t, test, rels[0] if rels[0] in RELATIONS else "")
            if not len(pool):
                return None
            start = self.draw(pool)
            ents = self.walk(start, rels)
            if ents is None:
                return None
            if rels[-1] in ATTRIBUTES and int(self.g.etype[ents[-1]]) not in ATTRIBUTES[rels[-1]]:
                return None
            opts = QUESTIONS[rels[-1]]
            template = opts[int(self.rng.integers(len(opts)))]
            question = template.format(self.noun_phrase(rels[:-1], self.g.names[start]))
        steps = list(zip(ents, rels, strict=False))
        if rels[-1] in ATTRIBUTES:
            answers: tuple[str, ...] = (self.value(ents[-1], rels[-1]),)
            if rels[-1] == "population":
                answers += (answers[0].replace(",", ""),)
        else:
            answers = self.answers_for(self.g.target(rels[-1], ents[len(rels) - 1]))
        return _Plan(question, kind, answers, steps, [start])

    def partner(self, va: int, t: int, attr: str, mode: str, bridge: str, test: bool
                ) -> int | None:
        """An entity ``b`` of type ``t`` to compare with ``va`` (already through the bridge).

        Its value (through ``bridge`` when given) differs from ``va``'s, or, for half of the
        ``same`` questions, equals it. Prefers ``va``'s region, so the names sound alike.
        """
        ka = self.key(va, attr)
        if ka < 0:
            return None

        def via(x: int) -> int:
            return self.g.target(bridge, x) if bridge else x

        if not bridge and self.rng.random() < self.cfg.distractors:
            # A near-namesake makes the hardest pair ("Qelvor Dynamics or Qelvor Dynamics Group").
            b = int(self.g.twin[va])
            if (b >= 0 and int(self.g.etype[b]) == t and bool(self.g.test[b]) == test
                    and self.key(b, attr) >= 0 and (mode == "same" or self.key(b, attr) != ka)):
                return b
        if mode == "same" and self.rng.random() < 0.5:
            k = (t, attr, bridge, test)
            if k not in self._same:
                index: dict[int, list[int]] = {}
                for x in self.pool(t, test, bridge).tolist():
                    vx = via(x)
                    kx = self.key(vx, attr)
                    if kx >= 0:
                        index.setdefault(kx, []).append(x)
                self._same[k] = index
            cands = [x for x in self._same[k].get(ka, ()) if via(x) != va]
            return cands[int(self.rng.integers(len(cands)))] if cands else None
        pool = self.pool(t, test, bridge)
        if not len(pool):
            return None
        # Most ordered comparisons are close calls (years within 12, populations within 50%),
        # so that reading a namesake's value instead flips the answer.
        close = mode != "same" and self.rng.random() < 0.7
        fallback = None
        for _ in range(80):
            b = self.draw(pool)
            vb = via(b)
            if vb < 0 or vb == va:
                continue
            kb = self.key(vb, attr)
            if kb < 0 or kb == ka:
                continue
            if not close:
                return b
            near = abs(kb - ka) <= 12 if attr != "population" else max(ka, kb) < 1.5 * min(ka, kb)
            if near:
                return b
            fallback = b if fallback is None else fallback
        return fallback

    def decide(self, va: int, vb: int, a: int, b: int, attr: str, mode: str) -> tuple[str, ...]:
        ka, kb = self.key(va, attr), self.key(vb, attr)
        if mode == "same":
            return ("yes",) if ka == kb else ("no",)
        a_first = ka < kb
        a_wins = a_first if mode in ("first", "min") else not a_first
        return self.answers_for(a if a_wins else b)

    def comparison(self, test: bool) -> _Plan | None:
        keys = list(COMPARISONS)
        attr, mode = keys[int(self.rng.integers(len(keys)))]
        template, t = COMPARISONS[attr, mode]
        pool = self.pool(t, test, attr if attr in RELATIONS else "")
        if not len(pool):
            return None
        a = self.draw(pool)
        b = self.partner(a, t, attr, mode, "", test)
        if b is None:
            return None
        if self.rng.random() < 0.5:
            a, b = b, a
        answers = self.decide(a, b, a, b, attr, mode)
        question = template.format(a=self.g.names[a], b=self.g.names[b])
        return _Plan(question, "comparison", answers, [(a, attr), (b, attr)], [a, b])

    def bridge_comparison(self, h: int, test: bool) -> _Plan | None:
        keys = [k for k in BRIDGE_COMPARISONS if k[3] == h]
        bridge, attr, mode, _ = keys[int(self.rng.integers(len(keys)))]
        template, t = BRIDGE_COMPARISONS[bridge, attr, mode, h]
        pool = self.pool(t, test, bridge)
        if not len(pool):
            return None
        a = self.draw(pool)
        va = self.g.target(bridge, a)
        if h == 4:
            b = self.partner(va, t, attr, mode, bridge, test)
            if b is None:
                return None
            if self.rng.random() < 0.5:
                a, b = b, a
            va, vb = self.g.target(bridge, a), self.g.target(bridge, b)
            steps = [(a, bridge), (va, attr), (b, bridge), (vb, attr)]
            answers = self.decide(va, vb, a, b, attr, mode)
        else:
            b = self.partner(va, PERSON, attr, mode, "", test)
            if b is None:
                return None
            steps = [(a, bridge), (va, attr), (b, attr)]
            answers = self.decide(va, b, va, b, attr, mode)
        question = template.format(a=self.g.names[a], b=self.g.names[b])
        return _Plan(question, "bridge_comparison", answers, steps, [a, b])

    def make(self, kind: str, h: int, test: bool) -> _Plan | None:
        if kind in ("bridge", "compositional", "inference"):
            return self.chain(kind, h, test)
        if kind == "comparison":
            return self.comparison(test)
        return self.bridge_comparison(h, test)


def _make_questions(cfg: WorldConfig, g: _Graph, writer: _Writer, rng: np.random.Generator,
                    width: int, local_ids: frozenset[str] | None) -> list[QASample]:
    qm = _QuestionMaker(cfg, g, writer, rng, width, local_ids)
    combos = cfg.kind_hops
    samples: list[QASample] = []
    seen: set[str] = set()
    failures = 0  # consecutive draws that gave no new question
    while len(samples) < cfg.n_questions:
        failures += 1
        if failures > 20_000:
            raise ValueError(
                f"could only generate {len(samples)} of {cfg.n_questions} distinct questions for "
                f"kinds={cfg.kinds} hops={cfg.hops} with n_entities={cfg.n_entities}: increase "
                "n_entities, lower n_questions or allow more kinds/hops")
        kind, h = combos[int(rng.integers(len(combos)))]
        test = cfg.test_fraction > 0 and bool(rng.random() < cfg.test_fraction)
        plan = qm.make(kind, h, test)
        if plan is None or plan.question in seen or len(plan.steps) != h:
            continue
        # Held-out rule: train questions read no test entity's document; test questions start
        # from test entities only (countries are shared and never test entities).
        if test:
            if not all(g.test[e] for e in plan.topics):
                continue
        elif any(g.test[e] for e, _ in plan.steps):
            continue
        seen.add(plan.question)
        failures = 0
        hops = tuple(qm.hop(e, r) for e, r in plan.steps)
        meta = {
            "split": "test" if test else "train",
            "needs_web": any(hp.source == "web" for hp in hops),
            "topics": tuple(g.names[e] for e in plan.topics),
            "entities": tuple(dict.fromkeys(g.names[e] for e, _ in plan.steps)),
        }
        samples.append(QASample(f"syn-{len(samples):06d}", plan.question, plan.answers,
                                tuple(dict.fromkeys(hp.doc_id for hp in hops)), h, plan.kind,
                                hops, meta))
    return samples


# ---------------------------------------------------------------------------------------------
# Tasks
# ---------------------------------------------------------------------------------------------
class SyntheticTask(QATask):
    """A :class:`QATask` over a synthetic world that pickles as its recipe.

    Pickling stores only ``(config, engine, split)``; unpickling calls :func:`build_task`, which
    returns the cached task in the same process and rebuilds the world elsewhere (an
    ``AsyncVectorEnv`` worker), so env factories pickle in microseconds.
    """

    config: WorldConfig | None = None
    engine: str = "bm25s"
    split_name: str | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        if self.config is None:
            raise TypeError("a SyntheticTask pickles as its recipe: build it with build_task()")
        return (build_task, (self.config, self.engine, self.split_name))


@functools.lru_cache(maxsize=8)
def _sources(config: WorldConfig, engine: str) -> dict[str, Source]:
    from hopgym.corpora.retrieval import BM25Retriever

    world = generate_world(config)
    out: dict[str, Source] = {}
    for name in config.sources:
        out[name] = Source(name, BM25Retriever(world.source_passages(name), engine=engine),
                           cost=_WEB_COST if name == "web" else _LOCAL_COST,
                           description=world.source_description(name))
    return out


def _refine_query(hop: Hop, retriever: Any, passage: Passage, k: int = 3) -> str:
    """A query that ranks ``hop.doc_id`` in the top ``k``: the hop's own query when it does, else
    that query plus the fewest distinctive words of the target passage (never the answer's words)
    that do; the original query if nothing does."""
    from hopgym.corpora.retrieval import tokenize

    def hit(q: str) -> bool:
        return any(p.doc_id == hop.doc_id for p in retriever.search(q, k))

    if hit(hop.search_query):
        return hop.search_query
    banned = set(tokenize(hop.answer)) | set(tokenize(hop.search_query))
    extra = list(dict.fromkeys(w for w in tokenize(passage.text) if w not in banned))
    for n in range(1, len(extra) + 1):
        q = f"{hop.search_query} {' '.join(extra[:n])}"
        if hit(q):
            return q
    return hop.search_query


@functools.lru_cache(maxsize=8)
def _verified_samples(config: WorldConfig, engine: str) -> tuple[list[QASample], int]:
    """The world's questions with every hop query checked against its source's index.

    Returns the samples and how many hop queries had to be refined (a handful per thousand:
    a near-namesake or a mirror page can push the target below the top 3).
    """
    world = generate_world(config)
    sources = _sources(config, engine)
    out: list[QASample] = []
    refined = 0
    for s in world.samples:
        hops = []
        for hop in s.decomposition:
            retriever = sources[hop.source or "local"].retriever
            q = _refine_query(hop, retriever, world.documents[hop.doc_id])
            if q != hop.search_query:
                refined += 1
                hop = replace(hop, query=q)
            hops.append(hop)
        out.append(s if tuple(hops) == s.decomposition else replace(s, decomposition=tuple(hops)))
    return out, refined


def build_task(config: WorldConfig | None = None, engine: str = "bm25s",
               split: str | None = None) -> SyntheticTask:
    """The synthetic world for ``config`` as a :class:`QATask`, with one BM25 index per source.

    Cached per ``(config, engine, split)``: every env in a process shares one world and one index
    per source; the train and test splits of a world share its indexes.

    Every hop's query is checked against its source's index: the few (about 1 in 500) that do
    not rank the hop's passage in the top 3 get a few distinctive words of that passage added
    (never the answer's), so an oracle that follows the decomposition with ``top_k=3`` sees every
    supporting passage. ``generate_world(config).samples`` keep the unrefined queries.

    Args:
        config: the world (default: ``WorldConfig()``).
        engine: BM25 engine, ``"bm25s"`` or ``"rank_bm25"``.
        split: ``None`` (all questions), ``"train"`` or ``"test"``.

    Example:
        >>> task = build_task(WorldConfig(n_entities=300, n_questions=20))
        >>> list(task.sources), len(task.samples)
        (['local'], 20)
        >>> import pickle
        >>> pickle.loads(pickle.dumps(task)) is task
        True
    """
    config = WorldConfig() if config is None else config
    if not isinstance(config, WorldConfig):
        raise TypeError(f"config must be a WorldConfig, got {type(config).__name__}")
    if engine not in ("bm25s", "rank_bm25"):
        raise ValueError(f"engine must be 'bm25s' or 'rank_bm25', got {engine!r}")
    if split not in (None, "train", "test"):
        raise ValueError(f"split must be None, 'train' or 'test', got {split!r}")
    return _build_task(config, engine, split)


@functools.lru_cache(maxsize=16)
def _build_task(config: WorldConfig, engine: str, split: str | None) -> SyntheticTask:
    world = generate_world(config)
    verified, _ = _verified_samples(config, engine)
    samples = [s for s in verified if split is None or s.metadata["split"] == split]
    name = "synthetic" if split is None else f"synthetic-{split}"
    if not samples:
        raise ValueError(f"the {split!r} split of this world is empty: raise n_questions or "
                         "test_fraction")
    task = SyntheticTask(name, samples, _sources(config, engine), world.documents)
    task.config, task.engine, task.split_name = config, engine, split
    return task


def export_flashrag(out_dir: str | Path, config: WorldConfig | None = None, **overrides: Any
                    ) -> list[Path]:
    """Write a world in FlashRAG layout: ``corpus.jsonl`` (``{"id", "contents"}``, the complete
    corpus, plus ``web.jsonl`` with two sources) and ``questions.jsonl`` (``{"id", "question",
    "golden_answers", "metadata"}``).

    Args:
        out_dir: folder to write into (created if missing).
        config: the world; or ``None`` with ``overrides`` as :class:`WorldConfig` arguments.
        overrides: :class:`WorldConfig` fields (CLI ``--kw key=value``); unknown names raise.

    Returns:
        The paths written.
    """
    if config is None:
        config = WorldConfig.from_kwargs(**overrides)
    elif overrides:
        raise ValueError("give either config or WorldConfig keyword arguments, not both")
    world = generate_world(config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for name in config.sources:
        path = out / ("corpus.jsonl" if name == "local" and len(config.sources) == 1
                      else f"{name}.jsonl")
        with path.open("w", encoding="utf-8") as fh:
            for p in world.source_passages(name):
                fh.write(json.dumps({"id": p.doc_id, "contents": p.contents}) + "\n")
        paths.append(path)
    path = out / "questions.jsonl"
    with path.open("w", encoding="utf-8") as fh:
        for s in world.samples:
            meta = {"kind": s.kind, "hops": s.hops, "supporting_ids": list(s.supporting_ids),
                    "decomposition": [{"question": h.question, "answer": h.answer,
                                       "doc_id": h.doc_id, "query": h.query, "source": h.source}
                                      for h in s.decomposition],
                    **{k: list(v) if isinstance(v, tuple) else v for k, v in s.metadata.items()}}
            fh.write(json.dumps({"id": s.id, "question": s.question,
                                 "golden_answers": list(s.answers), "metadata": meta}) + "\n")
    paths.append(path)
    return paths



def clear_caches() -> None:
    """Forget every cached world, index and task of this process (frees their memory)."""
    for fn in (generate_world, _sources, _verified_samples, _build_task):
        fn.cache_clear()
