"""The procedural synthetic multi-hop world: hopgym's embedded default corpus.

Classes and functions: :class:`WorldConfig`, :class:`SyntheticWorld`, :func:`generate_world`,
the phrasing tables
(:data:`SENTENCES`, :data:`NOUN_PHRASES`, :data:`QUESTIONS`, :data:`COMPARISONS`,
:data:`BRIDGE_COMPARISONS`, :data:`INFERENCES`, :data:`RELATION_SENTENCES`) that the world writes
with and that the rule-based :class:`~hopgym.agents.iterative.IterativeAgent` reads with.

Modules, in the order a world is made: ``tables`` (phrasing tables, entity types) and ``names``
(name syllables per region); ``config`` (:class:`WorldConfig`, :data:`KINDS`); ``graph`` (the
entity graph, built in phases); ``writer`` (documents); ``questions`` (questions and their gold
decompositions); ``world`` (:class:`SyntheticWorld`, :func:`generate_world`). A world becomes a task with
one index per source in :mod:`hopgym.tasks.synthetic` (:func:`~hopgym.tasks.build_task`).

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

from hopgym.corpora.synthetic.config import KINDS, WorldConfig
from hopgym.corpora.synthetic.tables import (
    ATTRIBUTES,
    BRIDGE_COMPARISONS,
    COMPARISONS,
    INFERENCES,
    NOUN_PHRASES,
    QUERY_WORDS,
    QUESTIONS,
    RELATION_SENTENCES,
    RELATIONS,
    SENTENCES,
    SUB_QUESTIONS,
)
from hopgym.corpora.synthetic.world import SyntheticWorld, generate_world

__all__ = [
    "KINDS",
    "WorldConfig",
    "SyntheticWorld",
    "generate_world",
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
