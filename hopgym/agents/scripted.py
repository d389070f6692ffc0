"""Scripted baselines that bound the task from below and above.

Classes: :class:`Agent` (the protocol), :class:`RandomAgent`, :class:`DirectAgent`,
:class:`SingleSearchAgent`, :class:`OracleAgent`. :func:`make_agent` builds one by name
(``random``, ``direct``, ``single-search``, ``iterative``, ``oracle``).

The oracle is the executable spec of an env: it follows the gold decomposition (routing where a hop's
document lives in another source), searches only for hops whose document it has not seen yet, and
answers the gold answer; it must reach EM 1.0 and support recall 1.0.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

from hopgym.envs.actions import Action, Answer, Route, Search, Think

__all__ = ["Agent", "RandomAgent", "DirectAgent", "SingleSearchAgent", "OracleAgent",
           "make_agent", "AGENTS"]


@runtime_checkable
class Agent(Protocol):
    """Anything that acts in a hopgym env: text or structured actions."""

    def reset(self) -> None: ...

    def act(self, observation: str, info: dict[str, Any]) -> str | Action: ...


_CAPS = re.compile(r"\b[A-Z][\w'-]*(?:\s+(?:of|the|de|von|at)?\s*[A-Z][\w'-]*)*")
_CHOICE = re.compile(r",\s*(.+?)\s+or\s+(.+?)\?\s*$")


def _question_entities(question: str) -> list[str]:
    words = _CAPS.findall(question)
    skip = {"Who", "What", "Which", "Where", "When", "In", "Is", "Are", "Was", "Were", "Did",
            "Do", "Does", "How", "The"}
    return [w for w in words if w not in skip]


def _guess(question: str) -> str:
    """A no-retrieval guess: the first option of a choice, ``yes``, or an entity in the question."""
    m = _CHOICE.search(question)
    if m:
        return m.group(1)
    if question.split()[:1] and question.split()[0].lower() in ("are", "is", "was", "were", "did",
                                                                 "do", "does"):
        return "yes"
    ents = _question_entities(question)
    return ents[-1] if ents else "unknown"


class RandomAgent:
    """Uniformly random valid actions: search question words, route, think or answer a seen title.

    Example:
        >>> agent = RandomAgent(seed=0)
        >>> agent.reset()
        >>> isinstance(agent.act("", {"question": "Who founded X?", "sources": ("local",)}), object)
        True
    """

    def __init__(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.words: list[str] = []
        self.titles: list[str] = []
        self.sources: tuple[str, ...] = ("local",)

    def reset(self) -> None:
        self.words, self.titles = [], []

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if "question" in info:
            self.words = re.findall(r"\w+", info["question"]) or ["?"]
            self.sources = tuple(info.get("sources", ("local",)))
        self.titles += [d.title for d in info.get("documents", [])]
        choice = int(self.rng.integers(4))
        if choice == 0 and self.titles:
            return Answer(self.titles[int(self.rng.integers(len(self.titles)))])
        if choice == 1 and len(self.sources) > 1:
            return Route(self.sources[int(self.rng.integers(len(self.sources)))])
        if choice == 2:
            return Think("thinking")
        n = int(self.rng.integers(1, min(4, len(self.words)) + 1))
        return Search(" ".join(self.rng.choice(self.words, size=n, replace=False)))


class DirectAgent:
    """Answers at once, without retrieval, with a guess read off the question."""

    def reset(self) -> None:
        pass

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        return Answer(_guess(info.get("question", "")), think="answer from memory")


class SingleSearchAgent:
    """One search with the raw question, then answers with the title of the best document that the
    question does not already name (a naive one-shot RAG reader)."""

    def __init__(self) -> None:
        self.question = ""
        self.searched = False

    def reset(self) -> None:
        self.question, self.searched = "", False

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if "question" in info:
            self.question = info["question"]
        if not self.searched:
            self.searched = True
            return Search(self.question)
        low = self.question.lower()
        for doc in info.get("documents", []):
            if doc.title.lower() not in low:
                return Answer(doc.title)
        return Answer(_guess(self.question))


class OracleAgent:
    """Follows the gold decomposition of ``env.unwrapped.sample`` and answers the gold answer.

    Args:
        env: the env it acts in (wrapped or not); the oracle reads the gold sample from it.
    """

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.seen: set[str] = set()
        self.attempted: set[int] = set()

    def reset(self) -> None:
        self.seen, self.attempted = set(), set()

    def _next(self, info: dict[str, Any]) -> Action:
        sample = self.env.unwrapped.sample
        source = info.get("source")
        for i, hop in enumerate(sample.decomposition):
            if hop.doc_id and hop.doc_id in self.seen:
                continue
            if hop.source is not None and hop.source != source:
                return Route(hop.source, think=f"{hop.question} lives in {hop.source}")
            if i in self.attempted:
                continue  # searched once and not found: move on rather than loop
            self.attempted.add(i)
            return Search(hop.search_query, think=hop.question)
        return Answer(sample.answer, think="all hops resolved")

    def act(self, observation: str, info: dict[str, Any]) -> Action:
        if "question" in info:
            self.seen, self.attempted = set(), set()
        self.seen.update(info.get("new_ids") or ())
        return self._next(info)


AGENTS = ("random", "direct", "single-search", "iterative", "oracle")


def make_agent(name: str, env: gym.Env, seed: int | None = None) -> Agent:
    """A scripted agent by name, for ``env``."""
    if name == "random":
        return RandomAgent(seed)
    if name == "direct":
        return DirectAgent()
    if name == "single-search":
        return SingleSearchAgent()
    if name == "oracle":
        return OracleAgent(env)
    if name == "iterative":
        from hopgym.agents.iterative import IterativeAgent

        return IterativeAgent(seed=seed)
    raise ValueError(f"unknown agent {name!r}; choose one of {', '.join(AGENTS)}")
