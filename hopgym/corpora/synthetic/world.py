"""The synthetic world: :class:`SyntheticWorld` (passages, questions, sources) and
:func:`generate_world`, which builds one from a :class:`WorldConfig` (cached per process)."""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator

import numpy as np

from hopgym.corpora.synthetic.config import WorldConfig
from hopgym.corpora.synthetic.graph import Graph, build_graph
from hopgym.corpora.synthetic.names import MIRROR_SITES
from hopgym.corpora.synthetic.questions import make_questions
from hopgym.corpora.synthetic.tables import COUNTRY, WEB_COST
from hopgym.corpora.synthetic.writer import Writer, chunks
from hopgym.corpora.types import Passage, QASample
from hopgym.errors import InvalidOptionError

__all__ = ["SyntheticWorld", "generate_world"]


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

    def __init__(
        self,
        config: WorldConfig,
        passages: list[Passage],
        samples: list[QASample],
        web_extra: list[Passage],
        local_ids: frozenset[str],
        covered_countries: tuple[str, ...],
    ) -> None:
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
            raise InvalidOptionError(f"unknown source {name!r}; this world has {self.config.sources}")
        if len(self.config.sources) == 1:
            return self.passages
        if name == "local":
            return [p for p in self.passages if p.doc_id in self._local_ids]
        return sorted(self.passages + self._web_extra, key=lambda p: p.doc_id)

    def split(self, name: str) -> list[QASample]:
        """Questions of split ``name`` (``train`` or ``test``; see the module docstring)."""
        if name not in ("train", "test"):
            raise InvalidOptionError(f"split must be 'train' or 'test', got {name!r}")
        return [s for s in self.samples if s.metadata["split"] == name]

    def source_description(self, name: str) -> str:
        """The one-line description an agent sees for source ``name``."""
        if name == "web":
            return f"the whole web: complete but noisy (mirror pages), cost {WEB_COST:g} per search"
        if len(self.config.sources) == 1:
            return "an encyclopedia of the whole world"
        return "a local encyclopedia, free but incomplete: it covers only " + ", ".join(
            self.covered_countries
        )

    def fingerprint(self) -> str:
        """SHA-256 over every passage of every source and every question (determinism checks)."""
        h = hashlib.sha256()
        for p in sorted(self.documents.values(), key=lambda p: p.doc_id):
            h.update(f"{p.doc_id}\x1f{p.title}\x1f{p.text}\x1e".encode())
        for name in self.config.sources:
            h.update(("|".join(p.doc_id for p in self.source_passages(name)) + "\x1d").encode())
        for s in self.samples:
            h.update(
                repr(
                    (
                        s.id,
                        s.question,
                        s.answers,
                        s.supporting_ids,
                        s.hops,
                        s.kind,
                        s.decomposition,
                        sorted(s.metadata.items()),
                    )
                ).encode()
            )
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
    g = build_graph(
        config, np.random.default_rng(s_graph), np.random.default_rng(s_split), np.random.default_rng(s_route)
    )
    writer = Writer(g, config)
    width = max(6, len(str(config.n_entities - 1)))
    order = np.argsort(g.docnum).tolist()
    passages = _passages(g, writer, order, width, config.passages_per_doc)
    two = len(config.sources) == 2
    local_ids: frozenset[str] = frozenset()
    web_extra: list[Passage] = []
    covered_countries: tuple[str, ...] = ()
    if two:
        local_ent = g.local.tolist()
        local_ids = frozenset(
            p.doc_id
            for p, i in zip(passages, _repeat(order, config.passages_per_doc), strict=True)
            if local_ent[i]
        )
        covered_countries = tuple(sorted(g.names[c] for c in g.by_type[COUNTRY].tolist() if local_ent[c]))
        web_extra = _mirrors(g, writer, order, width, config.web_noise, np.random.default_rng(s_noise))
    samples = make_questions(
        config, g, writer, np.random.default_rng(s_questions), width, local_ids if two else None
    )
    return SyntheticWorld(config, passages, samples, web_extra, local_ids, covered_countries)


def _passages(g: Graph, writer: Writer, order: list[int], width: int, ppd: int) -> list[Passage]:
    """Every entity's document, in doc-id order, split into ``ppd`` passages each."""
    docnum, names = g.docnum.tolist(), g.names
    passages: list[Passage] = []
    for i in order:
        sents = [s for _, s in writer.sentences(i)]
        base = f"e{docnum[i]:0{width}d}"
        if ppd == 1:
            passages.append(Passage(base, names[i], " ".join(sents)))
        else:
            pos = 0
            for j, size in enumerate(chunks(len(sents), ppd)):
                passages.append(Passage(f"{base}-p{j + 1}", names[i], " ".join(sents[pos : pos + size])))
                pos += size
    return passages


def _mirrors(
    g: Graph, writer: Writer, order: list[int], width: int, web_noise: float, noise: np.random.Generator
) -> list[Passage]:
    """The web's mirror pages: a share ``web_noise`` of entities get a partial copy."""
    n, docnum, names = len(order), g.docnum.tolist(), g.names
    has_mirror = (noise.random(n) < web_noise).tolist()
    site = noise.integers(0, len(MIRROR_SITES), n).tolist()
    out: list[Passage] = []
    for i in order:
        if has_mirror[i]:
            sents = writer.sentences(i)
            body = [s for k, s in sents if k != "hatnote"][:2]
            text = " ".join(body) + " This page is a copy and may be incomplete."
            out.append(Passage(f"w{docnum[i]:0{width}d}", f"{names[i]} | {MIRROR_SITES[site[i]]}", text))
    return out


def _repeat(order: list[int], k: int) -> Iterator[int]:
    for i in order:
        for _ in range(k):
            yield i
