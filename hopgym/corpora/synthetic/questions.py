"""The synthetic world's questions: :class:`QuestionMaker` draws a question of a given kind and
hop count from the graph, with its gold decomposition; :func:`make_questions` draws them all.

Each kind has its own method (``chain`` for bridge, compositional and inference questions,
``comparison``, ``bridge_comparison``); a draw that does not fit (a missing link, a duplicate, a
held-out entity on the wrong side) is discarded and drawn again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hopgym.corpora.synthetic.config import WorldConfig
from hopgym.corpora.synthetic.graph import Graph
from hopgym.corpora.synthetic.tables import (
    ATTRIBUTES,
    BRIDGE_COMPARISONS,
    COMPARISONS,
    COUNTRY,
    FACT_KEY,
    INFERENCES,
    NOUN_PHRASES,
    PERSON,
    QUERY_WORDS,
    QUESTIONS,
    RELATIONS,
    SUB_QUESTIONS,
)
from hopgym.corpora.synthetic.writer import Writer, chunks
from hopgym.corpora.types import Hop, QASample
from hopgym.errors import InvalidOptionError

__all__ = ["QuestionMaker", "make_questions"]


def _answers_for(g: Graph, i: int) -> tuple[str, ...]:
    """Canonical name plus aliases: an initialised form for people ("K. Lant")."""
    name = g.names[i]
    if g.etype[i] == PERSON:
        given, fam = name.split(" ", 1)
        return (name, f"{given[0]}. {fam}")
    return (name,)


def _bridge_paths(h: int, final_attr: bool) -> list[tuple[str, ...]]:
    """Relation paths of ``h`` hops (the last an attribute when ``final_attr``)."""
    banned = {("country", "capital"), ("capital", "country"), ("father", "father"), ("spouse", "spouse")}
    n_rel = h - 1 if final_attr else h
    paths: list[tuple[str, ...]] = [()]
    for _ in range(n_rel):
        paths = [
            p + (r,)
            for p in paths
            for r in RELATIONS
            if not p or (RELATIONS[p[-1]][1] == RELATIONS[r][0] and (p[-1], r) not in banned)
        ]
    if final_attr:
        out: list[tuple[str, ...]] = []
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


class QuestionMaker:
    """Draws questions from the graph: one method per kind, facts and hops per entity."""

    def __init__(
        self,
        cfg: WorldConfig,
        g: Graph,
        writer: Writer,
        rng: np.random.Generator,
        width: int,
        local_ids: frozenset[str] | None,
    ) -> None:
        self.cfg, self.g, self.w, self.rng = cfg, g, writer, rng
        self.width, self.local_ids = width, local_ids
        self.year = writer.year
        self.paths = {
            (kind, h): _bridge_paths(h, kind == "compositional")
            for kind in ("bridge", "compositional")
            for h in range(1, 5)
        }
        self._pools: dict[tuple[int, bool, str], np.ndarray] = {}
        self._same: dict[tuple[int, str, str, bool], dict[int, list[int]]] = {}

    # -- facts --
    def doc_id(self, i: int, rel: str) -> str:
        """The passage of entity ``i`` that states ``rel``."""
        base = f"e{int(self.g.docnum[i]):0{self.width}d}"
        ppd = self.cfg.passages_per_doc
        if ppd == 1:
            return base
        key = FACT_KEY[int(self.g.etype[i]), rel]
        sents = self.w.sentences(i)
        k = next(j for j, (sk, _) in enumerate(sents) if sk == key)
        acc = 0
        for j, size in enumerate(chunks(len(sents), ppd)):
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
        key = FACT_KEY[int(self.g.etype[i]), rel]
        word = QUERY_WORDS[key, rel][self.w.choice(key, i)]
        if word == "{child}":
            word = "daughter" if self.g.female[i] else "son"
        return Hop(SUB_QUESTIONS[rel].format(name), self.value(i, rel), doc, f"{name} {word}", source)

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

    def partner(self, va: int, t: int, attr: str, mode: str, bridge: str, test: bool) -> int | None:
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
            if (
                b >= 0
                and int(self.g.etype[b]) == t
                and bool(self.g.test[b]) == test
                and self.key(b, attr) >= 0
                and (mode == "same" or self.key(b, attr) != ka)
            ):
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


def make_questions(
    cfg: WorldConfig,
    g: Graph,
    writer: Writer,
    rng: np.random.Generator,
    width: int,
    local_ids: frozenset[str] | None,
) -> list[QASample]:
    """``cfg.n_questions`` distinct questions, kinds and hop counts drawn uniformly from
    ``cfg.kind_hops``; ``local_ids`` (two sources) says which hops the ``local`` source holds."""
    qm = QuestionMaker(cfg, g, writer, rng, width, local_ids)
    combos = cfg.kind_hops
    samples: list[QASample] = []
    seen: set[str] = set()
    failures = 0  # consecutive draws that gave no new question
    while len(samples) < cfg.n_questions:
        failures += 1
        if failures > 20_000:
            raise InvalidOptionError(
                f"could only generate {len(samples)} of {cfg.n_questions} distinct questions for "
                f"kinds={cfg.kinds} hops={cfg.hops} with n_entities={cfg.n_entities}: increase "
                "n_entities, lower n_questions or allow more kinds/hops"
            )
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
        samples.append(
            QASample(
                f"syn-{len(samples):06d}",
                plan.question,
                plan.answers,
                tuple(dict.fromkeys(hp.doc_id for hp in hops)),
                h,
                plan.kind,
                hops,
                meta,
            )
        )
    return samples
