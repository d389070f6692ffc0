"""What the documents seen so far say about the question: :class:`Evidence`, :class:`Candidate`.

Every retrieved document gets a *depth* on the question's relation chain (1 for a document about
a question entity, ``d + 1`` for one about a candidate reached at depth ``d``), and every
candidate (an entity, title, year or number read from the documents, or an option / entity of the
question) the deepest *level* at which it sits in a sentence expressing the relation the chain
expects there. Comparison questions get the values (years, populations) of their options and
yes/no questions the evidence for a shared value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from hopgym.corpora.questions import QuestionInfo, concepts_of, entity_key, read_question
from hopgym.corpora.types import Passage
from hopgym.envs.featurized.spans import Doc, parse_doc

__all__ = ["Candidate", "Evidence"]

_OF = re.compile(r"(?i)the\s+(\w[\w-]*)\s+of\s+(.+)$")  # "the director of A"
_FIXED = ("option", "yesno", "qentity")  # candidate kinds the question itself supplies


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


class Evidence:
    """The question, the documents retrieved for it and the candidates read from them.

    Attributes:
        question: the question as read by :func:`~hopgym.corpora.questions.read_question`.
        docs: every document seen this episode, in retrieval order.
        doc_keys: the keys of their titles.
        cands: the candidates by key, in order of first sight.
        max_depth: the deepest document depth reached.
        same_yes, same_no: a yes/no question's evidence for (against) a shared value.
    """

    def __init__(self, question: str = "") -> None:
        self.question: QuestionInfo = read_question(question)
        self.docs: list[Doc] = []
        self.doc_keys: set[str] = set()
        self.cands: dict[str, Candidate] = {}
        self.max_depth = 0
        self.same_yes = self.same_no = False
        self._counter = 0
        q = self.question
        for opt in q.options:
            self._cand(opt, "option")
        if q.wh == "yesno":
            self._cand("yes", "yesno")
            self._cand("no", "yesno")
        if len(q.entity_texts) > 1 or q.wh == "yesno":
            for text in q.entity_texts:
                if entity_key(text) not in self.cands:
                    self._cand(text, "qentity")

    def _cand(self, text: str, kind: str, key: str | None = None) -> Candidate:
        key = entity_key(text) if key is None else key
        cand = self.cands.get(key)
        if cand is None:
            self._counter += 1
            cand = self.cands[key] = Candidate(text, kind, key, order=self._counter)
        return cand

    def add_docs(self, docs: Sequence[Passage], search: int) -> None:
        """Parse the documents search number ``search`` returned (call :meth:`analyse` after)."""
        for rank, p in enumerate(docs):
            d = parse_doc(p, search, rank)
            self.docs.append(d)
            self.doc_keys.add(d.key)

    # ------------------------------------------------------------------ chain evidence
    def analyse(self) -> None:
        """Recompute document depths and candidate evidence from every document seen."""
        q = self.question
        qkeys = set(q.entities) | {_option_target(opt)[0] for opt in q.options}
        for c in self.cands.values():
            if c.kind not in _FIXED:
                c.kind = "entity" if c.kind == "title" else c.kind
            c.count, c.level, c.depth, c.match_any = 0, 0, 0, False
            c.last_search, c.first_search, c.best_rank = -1, 99, 99
        self._propagate_depths(qkeys)
        chain_set = set(q.chain)
        for d in self.docs:
            self._gather(d, qkeys, chain_set)
        for key, c in self.cands.items():
            if c.kind == "entity" and key in self.doc_keys:
                c.kind = "title"
        self._analyse_comparison()

    def _propagate_depths(self, qkeys: set[str]) -> None:
        """Depths propagate outwards: a document about a candidate found at level L has depth
        L+1, until nothing changes (at most once per chain link)."""
        chain = self.question.chain
        n = len(chain)
        for d in self.docs:
            d.depth = 1 if d.key in qkeys else 0
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

    def _gather(self, d: Doc, qkeys: set[str], chain_set: set[str]) -> None:
        """Count what document ``d`` says about its title and the spans of its sentences."""
        chain = self.question.chain
        n = len(chain)
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
                if (
                    want is not None
                    and want in concepts
                    and d.depth > c.level
                    and (kind in ("entity", "title") or d.depth == n)
                ):
                    # Years and numbers end chains; only entities lead on.
                    c.level = d.depth
        if title is not None:
            title.last_search = max(title.last_search, d.search)
            title.first_search = min(title.first_search, d.search)
            title.best_rank = min(title.best_rank, d.rank)
            title.count += 1

    # ------------------------------------------------------------------ comparisons
    def _analyse_comparison(self) -> None:
        q = self.question
        compared = q.chain[-1] if q.chain else None
        self.same_yes = self.same_no = False
        for c in self.cands.values():
            c.value, c.value_min, c.value_max, c.support = None, False, False, 0.0
        if q.options:
            self._option_values(compared)
        if q.wh == "yesno" and compared is not None:
            self._shared_value(compared)

    def _option_values(self, compared: str | None) -> None:
        """The compared value of each option; mark the smaller and the larger."""
        want_number = compared == "pop"
        vals: list[tuple[Candidate, float]] = []
        for opt in self.question.options:
            c = self.cands.get(entity_key(opt))
            if c is None:
                continue
            target, concept = _option_target(opt)
            key = target
            if concept is not None:
                # Resolve "the director of A" to the director named in A's document.
                resolved = self._resolve(target, concept)
                c.text = resolved[0] if resolved else opt
                c.resolved_from = opt if resolved else ""
                key = resolved[1] if resolved else ""
            c.value = self._value(key, compared, want_number) if key else None
            if c.value is not None:
                vals.append((c, c.value))
        if len(vals) == 2 and vals[0][1] != vals[1][1]:
            lo = min(vals, key=lambda t: t[1])[0]
            hi = max(vals, key=lambda t: t[1])[0]
            lo.value_min, hi.value_max = True, True

    def _shared_value(self, compared: str) -> None:
        """A yes/no question: do two on-chain documents name the same ``compared`` value?"""
        sets = []
        for d in self.docs:
            if d.depth < 1:
                continue
            vals_d = {
                key
                for concepts, spans in d.sentences
                if compared in concepts
                for _, kind, key in spans
                if kind == "entity" and key != d.key
            }
            if vals_d:
                sets.append(vals_d)
        if len(sets) >= 2:
            shared = any(sets[i] & sets[j] for i in range(len(sets)) for j in range(i + 1, len(sets)))
            self.same_yes, self.same_no = shared, not shared
        yes, no = self.cands.get("yes"), self.cands.get("no")
        if yes is not None:
            yes.support = float(self.same_yes)
        if no is not None:
            no.support = float(self.same_no)

    def _value(self, key: str, concept: str | None, want_number: bool) -> float | None:
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

    # ------------------------------------------------------------------ ranking and queries
    def answer_kinds(self) -> tuple[str, ...]:
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

    def ranked(self, limit: int) -> list[Candidate]:
        """The ``limit`` candidates to offer: the question's own (options, yes/no, its entities),
        then the rest by deepest chain evidence, the answer type the question asks for, the
        newest documents, document rank and reading order."""
        fixed = [c for c in self.cands.values() if c.kind in ("option", "yesno")]
        q_ents = [c for c in self.cands.values() if c.kind == "qentity"]
        rest = [c for c in self.cands.values() if c.kind not in _FIXED and c.count > 0]
        want = self.answer_kinds()
        rest.sort(
            key=lambda c: (
                -c.level,
                c.kind not in want,
                -c.last_search,
                -int(c.match_any),
                c.best_rank,
                c.order,
            )
        )
        return (fixed + q_ents + rest)[:limit]

    def hop_query(self, cand: Candidate) -> str:
        """The search query for a candidate: the candidate plus the relation to follow next.

        A candidate found at chain level ``L`` is searched with the question's word for relation
        ``L + 1``; an option or question entity with the compared relation (or its own bridge).
        """
        q = self.question
        chain = q.chain
        if cand.kind == "option":
            m = _OF.match(cand.text)
            if m and not cand.resolved_from and concepts_of(m.group(1).lower(), 0):
                return f"{m.group(2)} {m.group(1)}"  # find A's document first
            rel = q.words.get(chain[-1], "") if chain else ""
            return " ".join(x for x in (cand.text, rel) if x)
        if cand.kind == "qentity":
            rel = q.words.get(chain[0], "") if chain else ""
            return " ".join(x for x in (cand.text, rel) if x)
        if 0 < cand.level < len(chain):
            return f"{cand.text} {q.words.get(chain[cand.level], '')}".strip()
        return " ".join([cand.text, *q.relation_words])


def _option_target(option: str) -> tuple[str, str | None]:
    """``"the director of A"``: (key of A, ``"direct"``); a plain option: (its key, None)."""
    m = _OF.match(option)
    if m:
        found = concepts_of(m.group(1).lower(), 0)
        if found:
            return entity_key(m.group(2)), found[0]
    return entity_key(option), None
