"""A tiny hand-written corpus for tests and documentation: :func:`tiny_task`.

Eighteen passages about a fictional world and six questions (one to three hops) with gold
decompositions. It plays the role of SB3's ``IdentityEnv``: small enough to read in full, real
enough to exercise search, de-duplication and routing (``sources=("local", "web")`` keeps the
films out of the local source, so film questions need the web).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from hopgym.corpora.types import Hop, Passage, QASample
from hopgym.errors import InvalidOptionError
from hopgym.retrieval.specs import RetrieverSpec, make_retriever
from hopgym.tasks.base import QATask, Source

__all__ = ["TINY_PASSAGES", "TINY_SAMPLES", "tiny_task"]

_DOCS = [
    (
        "t01",
        "Qelvor Dynamics",
        "Qelvor Dynamics is a shipbuilding company founded in 1962 by "
        "Maren Oskdal. Its headquarters are in Vashti.",
    ),
    (
        "t02",
        "Qelvor Dynamix Group",
        "Qelvor Dynamix Group is a textile firm founded in 1988 by "
        "Tobin Reyes. Its headquarters are in Lorn.",
    ),
    (
        "t03",
        "Maren Oskdal",
        "Maren Oskdal (born 1931) is an engineer. She was born in Cardell and studied at Ilvane University.",
    ),
    ("t04", "Tobin Reyes", "Tobin Reyes (born 1950) is a merchant. He was born in Vashti."),
    ("t05", "Cardell", "Cardell is a port city in Brenmark with a population of 80,000."),
    ("t06", "Vashti", "Vashti is the capital of Osterra, with a population of 1,200,000."),
    ("t07", "Lorn", "Lorn is a mountain town in Brenmark with a population of 9,000."),
    ("t08", "Brenmark", "Brenmark is a country whose capital is Halvik."),
    ("t09", "Osterra", "Osterra is a country whose capital is Vashti."),
    ("t10", "Ilvane University", "Ilvane University is a university in Lorn, founded in 1820."),
    ("t11", "The Glass Orchard", "The Glass Orchard is a 1979 film directed by Sefa Quill."),
    ("t12", "Night at Harrow Pier", "Night at Harrow Pier is a 1984 film directed by Dario Venn."),
    (
        "t13",
        "Sefa Quill",
        "Sefa Quill (born 1940) is a film director born in Lorn. Her father is Aldo Quill.",
    ),
    ("t14", "Dario Venn", "Dario Venn (born 1944) is a film director born in Cardell."),
    ("t15", "Aldo Quill", "Aldo Quill (born 1911) is a painter. His father is Emery Quill."),
    ("t16", "Emery Quill", "Emery Quill (born 1880) was a clockmaker in Vashti."),
    ("t17", "Halvik", "Halvik is the capital of Brenmark, with a population of 650,000."),
    ("t18", "Sefa Quillon", "Sefa Quillon (born 1962) is a singer born in Halvik."),
]
_FILMS = {"t11", "t12", "t13", "t14", "t15", "t16", "t18"}

TINY_PASSAGES: tuple[Passage, ...] = tuple(Passage(i, t, x) for i, t, x in _DOCS)

TINY_SAMPLES: tuple[QASample, ...] = (
    QASample(
        "tiny-1",
        "In which year was Qelvor Dynamics founded?",
        ("1962",),
        ("t01",),
        1,
        "bridge",
        (Hop("When was Qelvor Dynamics founded?", "1962", "t01", "Qelvor Dynamics founded", "local"),),
    ),
    QASample(
        "tiny-2",
        "Where was the founder of Qelvor Dynamics born?",
        ("Cardell",),
        ("t01", "t03"),
        2,
        "bridge",
        (
            Hop("Who founded Qelvor Dynamics?", "Maren Oskdal", "t01", "Qelvor Dynamics founder", "local"),
            Hop("Where was Maren Oskdal born?", "Cardell", "t03", "Maren Oskdal born", "local"),
        ),
    ),
    QASample(
        "tiny-3",
        "In which country is the birthplace of the founder of Qelvor Dynamics?",
        ("Brenmark",),
        ("t01", "t03", "t05"),
        3,
        "bridge",
        (
            Hop("Who founded Qelvor Dynamics?", "Maren Oskdal", "t01", "Qelvor Dynamics founder", "local"),
            Hop("Where was Maren Oskdal born?", "Cardell", "t03", "Maren Oskdal born", "local"),
            Hop("In which country is Cardell?", "Brenmark", "t05", "Cardell port city", "local"),
        ),
    ),
    QASample(
        "tiny-4",
        "Which film came out first, The Glass Orchard or Night at Harrow Pier?",
        ("The Glass Orchard", "Glass Orchard"),
        ("t11", "t12"),
        2,
        "comparison",
        (
            Hop("When did The Glass Orchard come out?", "1979", "t11", "The Glass Orchard film", "web"),
            Hop("When did Night at Harrow Pier come out?", "1984", "t12", "Night at Harrow Pier film", "web"),
        ),
    ),
    QASample(
        "tiny-5",
        "Where was the director of The Glass Orchard born?",
        ("Lorn",),
        ("t11", "t13"),
        2,
        "bridge",
        (
            Hop("Who directed The Glass Orchard?", "Sefa Quill", "t11", "The Glass Orchard directed", "web"),
            Hop("Where was Sefa Quill born?", "Lorn", "t13", "Sefa Quill born", "web"),
        ),
    ),
    QASample(
        "tiny-6",
        "Who is the paternal grandfather of Sefa Quill?",
        ("Emery Quill",),
        ("t13", "t15"),
        2,
        "inference",
        (
            Hop("Who is the father of Sefa Quill?", "Aldo Quill", "t13", "Sefa Quill father", "web"),
            Hop("Who is the father of Aldo Quill?", "Emery Quill", "t15", "Aldo Quill father", "web"),
        ),
    ),
)


def tiny_task(
    sources: tuple[str, ...] = ("local",), engine: str | None = None, *, retriever: Any = None
) -> QATask:
    """The tiny corpus as a task, with one source or with ``("local", "web")``.

    With two sources, ``local`` lacks the film documents and ``web`` has everything; gold hops name
    the source that holds their document. ``retriever`` (a kind, a dict of settings or a
    :class:`~hopgym.retrieval.specs.RetrieverSpec`; BM25 by default) indexes each source;
    ``engine`` is a shorthand for its BM25 engine.

    Example:
        >>> task = tiny_task(("local", "web"))
        >>> sorted(task.sources), len(task.samples)
        (['local', 'web'], 6)
    """
    return _tiny_task(tuple(sources), RetrieverSpec.coerce(retriever, engine=engine))


@lru_cache(maxsize=8)
def _tiny_task(sources: tuple[str, ...], spec: RetrieverSpec) -> QATask:
    if sources not in (("local",), ("local", "web")):
        raise InvalidOptionError(f"sources must be ('local',) or ('local', 'web'), got {sources!r}")
    docs = {p.doc_id: p for p in TINY_PASSAGES}
    if sources == ("local",):
        samples = tuple(
            QASample(
                s.id,
                s.question,
                s.answers,
                s.supporting_ids,
                s.hops,
                s.kind,
                tuple(Hop(h.question, h.answer, h.doc_id, h.query, "local") for h in s.decomposition),
            )
            for s in TINY_SAMPLES
        )
        srcs = {"local": Source("local", make_retriever(spec, TINY_PASSAGES))}
    else:
        samples = TINY_SAMPLES
        local = [p for p in TINY_PASSAGES if p.doc_id not in _FILMS]
        srcs = {
            "local": Source("local", make_retriever(spec, local), 0.0, "companies, people and places"),
            "web": Source(
                "web", make_retriever(spec, TINY_PASSAGES), 1.0, "everything, including films; costs more"
            ),
        }
    return QATask("tiny", samples, srcs, docs, recipe=(_tiny_task, (sources, spec)))
