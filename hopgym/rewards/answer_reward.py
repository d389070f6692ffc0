"""Outcome rewards: how good the final answer is.

Classes: :class:`AnswerCheck` (the guarded "string match first, then the judge" rule, shared with
the process reward's outcome scaling and the TRL adapters), :class:`OutcomeReward` (the wrapper).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import gymnasium as gym

from hopgym.rewards.base import RewardArgumentError, RewardTermWrapper, check_number
from hopgym.rewards.judges import Judge, as_score
from hopgym.rewards.scoring import METRICS, admissible, answer_score, exact_match
from hopgym.turns.info import StepInfo

__all__ = ["AnswerCheck", "OutcomeReward", "OUTCOME_METRICS"]

#: Metrics :class:`OutcomeReward` accepts: the string metrics plus ``"judge"`` (EM, then the judge).
OUTCOME_METRICS: tuple[str, ...] = (*METRICS, "judge")


@dataclass(frozen=True)
class AnswerCheck:
    """Scores an answer against the gold aliases: a guarded string metric, then optionally a judge.

    The string metric comes first (:func:`~hopgym.rewards.scoring.answer_score`, with its guards
    against candidate lists and pasted text). Only when it is below 1 is the judge asked, and only
    for answers that pass the same guards; the score is then the larger of the two. ``"judge"``
    means EM first, then the judge (R3-RAG's order).

    Attributes:
        metric: ``"em"``, ``"f1"``, ``"cover_em"`` or ``"judge"``.
        judge: required for ``"judge"``; optional fallback for the others.
        hedge_guard: candidate lists score 0 (see :func:`~hopgym.rewards.scoring.is_hedged`).
        max_extra_tokens: slack of ``cover_em`` beyond the covered gold.
        correct_threshold: a score at or above it counts as *correct* (R3-RAG's outcome scaling).

    Example:
        >>> AnswerCheck("em").score("Who?", "the Cardell", ["Cardell"])
        1.0
        >>> AnswerCheck("cover_em").correct("Who?", "Cardell or Lorn", ["Cardell"])
        False
    """

    metric: str = "em"
    judge: Judge | None = None
    hedge_guard: bool = True
    max_extra_tokens: int = 3
    correct_threshold: float = 1.0

    def __post_init__(self) -> None:
        if self.metric not in OUTCOME_METRICS:
            raise RewardArgumentError(f"metric must be one of {list(OUTCOME_METRICS)}, got {self.metric!r}")
        if self.metric == "judge" and self.judge is None:
            raise RewardArgumentError(
                "metric='judge' needs judge=...: a hopgym.rewards.judges "
                "Judge (OpenAIJudge, TransformersJudge, CallableJudge)"
            )
        if self.judge is not None and not isinstance(self.judge, Judge):
            raise RewardArgumentError(
                f"judge must implement judge_answer/judge_relevance, got {type(self.judge)!r}"
            )
        if not isinstance(self.max_extra_tokens, int) or self.max_extra_tokens < 0:
            raise RewardArgumentError(f"max_extra_tokens must be an int >= 0, got {self.max_extra_tokens!r}")
        check_number(self.correct_threshold, "correct_threshold", low=0.0, high=1.0)

    @property
    def string_metric(self) -> str:
        return "em" if self.metric == "judge" else self.metric

    def string_score(self, prediction: str, golds: Sequence[str]) -> float:
        """The guarded string score alone."""
        if self.metric in ("em", "judge"):  # answer_score's "em", whose arguments were checked here
            return exact_match(prediction, golds)
        return answer_score(
            prediction,
            golds,
            self.string_metric,
            hedge_guard=self.hedge_guard,
            max_extra_tokens=self.max_extra_tokens,
        )

    def needs_judge(self, prediction: str, golds: Sequence[str], string_score: float) -> bool:
        """Whether the judge is asked: string match failed and the answer passes the guards.

        The judge only sees answers the string guards let through (no candidate lists, nothing
        much longer than a gold, nothing empty), so it cannot be talked into paying for them.
        """
        if self.judge is None or string_score >= 1.0:
            return False
        return admissible(prediction, golds, hedge_guard=self.hedge_guard)

    def score(self, question: str, prediction: str | None, golds: Sequence[str]) -> float:
        """The answer's score in ``[0, 1]`` (0 for no answer)."""
        if not prediction:
            return 0.0
        s = self.string_score(prediction, golds)
        if self.judge is not None and self.needs_judge(prediction, golds, s):
            assert self.judge is not None
            s = max(s, as_score(self.judge.judge_answer(question, prediction, tuple(golds))))
        return s

    def correct(self, question: str, prediction: str | None, golds: Sequence[str]) -> bool:
        """Whether the answer counts as correct."""
        return self.score(question, prediction, golds) >= self.correct_threshold


class OutcomeReward(RewardTermWrapper):
    """Rewards the final answer: ``weight * score`` when the agent answers.

    The score is :class:`AnswerCheck`'s: EM, token F1, bounded cover-EM, or a judge after string
    matching fails. An episode that ends without an answer (the step budget, or a
    ``FormatReward(terminate=True)``) gets ``no_answer`` instead (a signed constant, not weighted).

    Term: ``name`` (default ``"outcome"``), written on every step, non-zero at the end.

    Args:
        env: the env to wrap.
        metric: ``"em"``, ``"f1"``, ``"cover_em"`` or ``"judge"``.
        weight: multiplies the score (R3-RAG: 2.0).
        judge: the judge for ``metric="judge"``, or a fallback for the string metrics.
        no_answer: the term's value when the episode ends without an answer (e.g. -0.5).
        hedge_guard: score candidate lists ("A, B or C") 0.
        max_extra_tokens: the slack of ``cover_em``.
        name: the term name.

    Raises:
        RewardArgumentError: for an unknown metric, ``"judge"`` without a judge, a negative or
            non-finite weight.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = OutcomeReward(gym.make("hopgym/Tiny-v1", reward=None), metric="f1")
        >>> _ = env.reset(seed=0)
        >>> _, r, terminated, _, info = env.step("<answer>unknown</answer>")
        >>> terminated, r, info["reward_terms"]
        (True, 0.0, {'outcome': 0.0})

    Change logs:
        v0.1.0: added.
    """

    def __init__(
        self,
        env: gym.Env,
        metric: str = "em",
        *,
        weight: float = 1.0,
        judge: Judge | None = None,
        no_answer: float = 0.0,
        hedge_guard: bool = True,
        max_extra_tokens: int = 3,
        name: str = "outcome",
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            metric=metric,
            weight=weight,
            judge=judge,
            no_answer=no_answer,
            hedge_guard=hedge_guard,
            max_extra_tokens=max_extra_tokens,
            name=name,
            _disable_deepcopy=True,
        )
        self.weight = check_number(weight, "weight", low=0.0)
        self.no_answer = check_number(no_answer, "no_answer")
        self.check = AnswerCheck(metric, judge, hedge_guard, max_extra_tokens)
        self.metric = metric
        self.name = name
        self._init_terms(env, (name,))

    def _end_terms(self, info: StepInfo, answered: bool) -> dict[str, float]:
        if not answered:
            return {self.name: self.no_answer}
        sample = self.unwrapped.sample  # type: ignore[attr-defined]
        score = self.check.score(sample.question, info["answer"], sample.answers)
        return {self.name: self.weight * score}
