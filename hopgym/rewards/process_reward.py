"""Process rewards: credit for each search step.

Classes: :class:`RelevanceReward`.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from hopgym.rewards.answer_reward import AnswerCheck
from hopgym.rewards.base import RewardArgumentError, RewardTermWrapper, check_number
from hopgym.rewards.judges import Judge, as_score
from hopgym.turns.info import StepInfo

__all__ = ["RelevanceReward"]

_MODES = ("gold", "judge")
_AGGREGATES = ("sum", "mean")


class RelevanceReward(RewardTermWrapper):
    """Rewards searches by the relevance of what they retrieved.

    Each valid search step gets a relevance ``r`` in ``[0, 1]``:

    - ``mode="gold"``: the share of the gold supporting documents (``sample.supporting_ids``) that
      this search showed for the first time in the episode (``info["new_ids"]``). Over an episode
      these add up to at most 1 (support recall), however many searches are made.
    - ``mode="judge"``: the judge's relevance of the shown documents to the question, the step's
      reasoning (``info["think"]``) and the query (R3-RAG). A search that shows no document
      (all seen before, none found, an error) scores 0 without asking the judge.

    The process total of an episode is ``weight * aggregate(r)``, paid as it accrues: each search
    pays the change of the total. ``aggregate="sum"`` pays each search its ``r``; ``"mean"`` pays
    the change of the running mean, so a search worse than the average so far has a negative term
    and more searches never raise the total. With ``scaling=(correct, wrong, no_answer)`` the total
    is multiplied, at the end of the episode, by the first factor when the answer is correct
    (per ``answer_check``), the second when it is wrong, the third when the episode ended without an
    answer (R3-RAG: ``(1.6, 0.8, 0.9)``); the difference is the ``{name}_scale`` term.

    Terms: ``name`` (default ``"relevance"``); ``{name}_scale`` when ``scaling`` is set.

    Args:
        env: the env to wrap.
        mode: ``"gold"`` or ``"judge"``.
        weight: multiplies the process total.
        judge: the judge for ``mode="judge"`` (and the answer check's fallback).
        scaling: ``(correct, wrong, no_answer)`` factors, or ``None``.
        aggregate: ``"sum"`` or ``"mean"``; default ``"sum"`` for gold and ``"mean"`` for judge
            (R3-RAG sums; summing judged relevance pays "search to the limit" more than a correct
            answer, see the rewards README).
        answer_check: decides *correct* for the scaling; default EM, then the judge if given.
        name: the base term name.

    Raises:
        RewardArgumentError: unknown mode or aggregate, judge mode without a judge, bad scaling.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = RelevanceReward(gym.make("hopgym/Tiny-v1", reward=None), weight=1.0)
        >>> _ = env.reset(options={"question_id": "tiny-2"})
        >>> _, r, *_ , info = env.step("<search>Qelvor Dynamics founder</search>")
        >>> r, info["reward_terms"]
        (0.5, {'relevance': 0.5})

    Change logs:
        v0.1.0: added.
    """

    def __init__(
        self,
        env: gym.Env,
        mode: str = "gold",
        *,
        weight: float = 1.0,
        judge: Judge | None = None,
        scaling: tuple[float, float, float] | None = None,
        aggregate: str | None = None,
        answer_check: AnswerCheck | None = None,
        name: str = "relevance",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            mode=mode,
            weight=weight,
            judge=judge,
            scaling=scaling,
            aggregate=aggregate,
            answer_check=answer_check,
            name=name,
            _disable_deepcopy=True,
        )
        if mode not in _MODES:
            raise RewardArgumentError(f"mode must be one of {list(_MODES)}, got {mode!r}")
        if mode == "judge" and judge is None:
            raise RewardArgumentError("mode='judge' needs judge=...: a hopgym.rewards.judges Judge")
        if judge is not None and not isinstance(judge, Judge):
            raise RewardArgumentError(
                f"judge must implement judge_answer/judge_relevance, got {type(judge)!r}"
            )
        aggregate = aggregate or ("sum" if mode == "gold" else "mean")
        if aggregate not in _AGGREGATES:
            raise RewardArgumentError(f"aggregate must be one of {list(_AGGREGATES)}, got {aggregate!r}")
        if scaling is not None:
            if not isinstance(scaling, (tuple, list)) or len(scaling) != 3:
                raise RewardArgumentError(
                    "scaling must be (correct, wrong, no_answer) factors, e.g. (1.6, 0.8, 0.9); "
                    f"got {scaling!r}"
                )
            correct, wrong, no_answer = (check_number(s, "scaling factor", low=0.0) for s in scaling)
            scaling = (correct, wrong, no_answer)
        self.mode = mode
        self.weight = check_number(weight, "weight", low=0.0)
        self.judge = judge
        self.scaling = scaling
        self.aggregate = aggregate
        self.answer_check = answer_check or AnswerCheck("em", judge)
        self.name = name
        self.scale_name = f"{name}_scale"
        names = (name, self.scale_name) if scaling is not None else (name,)
        self._init_terms(env, names)
        self._on_reset({})

    def _on_reset(self, info: dict[str, Any]) -> None:
        self._scores: list[float] = []
        self._found: set[str] = set()
        self._paid = 0.0

    def _relevance(self, info: StepInfo) -> float:
        sample = self.unwrapped.sample  # type: ignore[attr-defined]
        if self.mode == "gold":
            gold = set(sample.supporting_ids)
            if not gold:
                return 0.0
            new = (gold & set(info.get("new_ids") or ())) - self._found
            self._found |= new
            return len(new) / len(gold)
        docs = info.get("documents") or []
        if not docs:
            return 0.0
        assert self.judge is not None
        texts = [getattr(d, "contents", str(d)) for d in docs]
        return as_score(
            self.judge.judge_relevance(
                sample.question, info.get("think") or "", info.get("query") or "", texts
            )
        )

    def _total(self) -> float:
        if not self._scores:
            return 0.0
        agg = sum(self._scores)
        if self.aggregate == "mean":
            agg /= len(self._scores)
        return self.weight * agg

    def _step_terms(self, info: StepInfo) -> dict[str, float]:
        if info.get("action_type") != "search" or self._ended:
            return {}
        self._scores.append(self._relevance(info))
        total = self._total()
        delta, self._paid = total - self._paid, total
        return {self.name: delta}

    def _end_terms(self, info: StepInfo, answered: bool) -> dict[str, float]:
        if self.scaling is None or not self._scores:
            return {}
        if not answered:
            factor = self.scaling[2]
        else:
            sample = self.unwrapped.sample  # type: ignore[attr-defined]
            ok = self.answer_check.correct(sample.question, info["answer"], sample.answers)
            factor = self.scaling[0] if ok else self.scaling[1]
        return {self.scale_name: (factor - 1.0) * self._paid}
