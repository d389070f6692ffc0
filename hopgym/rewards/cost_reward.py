"""Cost rewards: what searching costs, and what repeating oneself costs.

Classes: :class:`SearchCostReward`, :class:`RedundancyReward`.

Both only ever subtract, so neither can be farmed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from hopgym.rewards.base import RewardArgumentError, RewardTermWrapper, check_number
from hopgym.rewards.scoring import bow_similarity, normalize_answer, query_key
from hopgym.turns.info import StepInfo

__all__ = ["SearchCostReward", "RedundancyReward", "STIE_THRESHOLDS"]

#: KunLunBaizeRAG's STIE: an answer must differ (1 - bag-of-words similarity) from the answers
#: 1, 2 and 3 rounds back by at least these amounts.
STIE_THRESHOLDS: tuple[float, ...] = (0.25, 0.5, 0.75)


class SearchCostReward(RewardTermWrapper):
    """Charges every search by its source, so that routing to a costly source has a price.

    The charge of a search on source ``s`` is ``weight * (per_search + cost[s])``, where ``cost[s]``
    is ``costs[s]`` if given, else the task's ``Source.cost``
    (``env.unwrapped.task.sources[s].cost``). A ``route`` turn costs ``weight * route_cost``.
    Invalid turns cost nothing here (see ``FormatReward``).

    Term: ``name`` (default ``"search_cost"``), negative or 0.

    Args:
        env: the env to wrap (its ``unwrapped`` must have a ``task`` with ``sources``).
        weight: multiplies every charge.
        per_search: charged for every search on top of the source's cost.
        costs: per-source overrides of ``Source.cost``; names must be sources of the task.
        route_cost: charged for each route turn.
        name: the term name.

    Raises:
        RewardArgumentError: a negative cost or weight (a negative cost would pay for searching),
            or a source name the task does not have.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = gym.make("hopgym/Tiny-v1", sources=("local", "web"), reward=None)
        >>> env = SearchCostReward(env, per_search=0.05, costs={"web": 0.2})
        >>> env.costs
        {'local': 0.05, 'web': 0.25}

    Change logs:
        v0.1.0: added.
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        weight: float = 1.0,
        per_search: float = 0.0,
        costs: Mapping[str, float] | None = None,
        route_cost: float = 0.0,
        name: str = "search_cost",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            weight=weight,
            per_search=per_search,
            costs=dict(costs) if costs is not None else None,
            route_cost=route_cost,
            name=name,
        )
        self.weight = check_number(weight, "weight", low=0.0)
        self.per_search = check_number(per_search, "per_search", low=0.0)
        self.route_cost = check_number(route_cost, "route_cost", low=0.0)
        task = getattr(env.unwrapped, "task", None)
        sources = getattr(task, "sources", None)
        if sources is None:
            raise RewardArgumentError(
                "SearchCostReward needs env.unwrapped.task.sources (a hopgym QATask); "
                f"{type(env.unwrapped).__name__} has none"
            )
        overrides = dict(costs or {})
        unknown = sorted(set(overrides) - set(sources))
        if unknown:
            raise RewardArgumentError(
                f"costs names unknown source(s) {unknown}; this task's sources: {list(sources)}"
            )
        base = {
            n: check_number(overrides.get(n, s.cost), f"cost of source {n!r}", low=0.0)
            for n, s in sources.items()
        }
        #: The charge (before ``weight``) of one search per source.
        self.costs = {n: self.per_search + c for n, c in base.items()}
        self.name = name
        self._init_terms(env, (name,))

    def _step_terms(self, info: StepInfo) -> dict[str, float]:
        kind = info.get("action_type")
        if kind == "search":
            source = info.get("source")
            cost = self.costs.get(source, max(self.costs.values(), default=self.per_search))
            return {self.name: -self.weight * cost}
        if kind == "route" and self.route_cost:
            return {self.name: -self.weight * self.route_cost}
        return {}


class RedundancyReward(RewardTermWrapper):
    """Penalises repeating oneself: repeated queries, re-retrieved documents, repeated answers.

    - ``query_penalty`` for a search whose query repeats an earlier one of the episode: the
      bag-of-words similarity (:func:`~hopgym.rewards.scoring.bow_similarity`) to some earlier
      query is at least ``query_similarity`` (1.0: the same words in any order, as
      :func:`~hopgym.rewards.scoring.query_key` says, the test of the env's repeated-query
      notice).
    - ``doc_penalty`` for each document the retriever returned (``info["retrieved_ids"]``, before
      de-duplication) that an earlier search of the episode already returned.
    - ``answer_penalty`` for an answer that fails KunLunBaizeRAG's STIE test: its difference
      (1 − similarity) to the answer ``k`` rounds back is below ``stie_thresholds[k-1]``.
      ``MultiHopQAEnv`` ends the episode at the first answer, so this fires only in envs that
      let the agent answer more than once.

    Terms: ``{name}_query``, ``{name}_docs``, ``{name}_answer`` for the penalties that are > 0.

    Args:
        env: the env to wrap.
        query_penalty: per repeated query (``>= 0``).
        doc_penalty: per re-retrieved document (``>= 0``).
        answer_penalty: per repeated answer (``>= 0``).
        query_similarity: the similarity at which a query counts as a repeat, in ``(0, 1]``.
        stie_thresholds: minimum differences to the answers 1, 2, 3, ... rounds back.
        name: the base term name.

    Raises:
        RewardArgumentError: negative penalties, all penalties 0, a similarity outside ``(0, 1]``.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = RedundancyReward(gym.make("hopgym/Tiny-v1", reward=None), query_penalty=0.1)
        >>> _ = env.reset(seed=0)
        >>> _ = env.step("<search>Lorn</search>")
        >>> env.step("<search>lorn</search>")[1]
        -0.1

    Change logs:
        v0.1.0: added.
    """

    def __init__(
        self,
        env: gym.Env,
        *,
        query_penalty: float = 0.1,
        doc_penalty: float = 0.0,
        answer_penalty: float = 0.0,
        query_similarity: float = 1.0,
        stie_thresholds: Sequence[float] = STIE_THRESHOLDS,
        name: str = "redundant",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            query_penalty=query_penalty,
            doc_penalty=doc_penalty,
            answer_penalty=answer_penalty,
            query_similarity=query_similarity,
            stie_thresholds=tuple(stie_thresholds),
            name=name,
        )
        self.query_penalty = check_number(query_penalty, "query_penalty", low=0.0)
        self.doc_penalty = check_number(doc_penalty, "doc_penalty", low=0.0)
        self.answer_penalty = check_number(answer_penalty, "answer_penalty", low=0.0)
        if not (self.query_penalty or self.doc_penalty or self.answer_penalty):
            raise RewardArgumentError(
                "RedundancyReward with every penalty 0 does nothing: set "
                "query_penalty, doc_penalty or answer_penalty"
            )
        self.query_similarity = check_number(query_similarity, "query_similarity", low=0.0, high=1.0)
        if self.query_similarity == 0.0:
            raise RewardArgumentError(
                "query_similarity must be in (0, 1]: 0 would count every query as a repeat"
            )
        self.stie_thresholds = tuple(
            check_number(t, "STIE threshold", low=0.0, high=1.0) for t in stie_thresholds
        )
        self.name = name
        self.query_name, self.docs_name = f"{name}_query", f"{name}_docs"
        self.answer_name = f"{name}_answer"
        names = tuple(
            n
            for n, p in (
                (self.query_name, self.query_penalty),
                (self.docs_name, self.doc_penalty),
                (self.answer_name, self.answer_penalty),
            )
            if p > 0
        )
        self._init_terms(env, names)
        self._on_reset({})

    def _on_reset(self, info: dict[str, Any]) -> None:
        self._queries: list[str] = []
        self._retrieved: set[str] = set()
        self._answers: list[str] = []

    def _step_terms(self, info: StepInfo) -> dict[str, float]:
        kind = info.get("action_type")
        out: dict[str, float] = {}
        if kind == "search":
            query = info.get("query") or ""
            if self.query_penalty and any(_similar(query, q, self.query_similarity) for q in self._queries):
                out[self.query_name] = -self.query_penalty
            self._queries.append(query)
            ids = list(info.get("retrieved_ids") or ())
            if self.doc_penalty:
                again = sum(1 for d in dict.fromkeys(ids) if d in self._retrieved)
                if again:
                    out[self.docs_name] = -self.doc_penalty * again
            self._retrieved.update(ids)
        elif kind == "answer" and isinstance(answer := info.get("answer"), str):
            if self.answer_penalty and self._stie_blocks(answer):
                out[self.answer_name] = -self.answer_penalty
            self._answers.append(answer)
        return out

    def _stie_blocks(self, answer: str) -> bool:
        norm = normalize_answer(answer)
        if any(normalize_answer(a) == norm for a in self._answers):
            return True  # an answer seen before is always blocked
        for k, threshold in enumerate(self.stie_thresholds, start=1):
            if k > len(self._answers):
                break
            if 1.0 - bow_similarity(answer, self._answers[-k]) < threshold:
                return True
        return False


def _similar(a: str, b: str, threshold: float) -> bool:
    if threshold >= 1.0:
        return query_key(a) == query_key(b)
    return bow_similarity(a, b) >= threshold
