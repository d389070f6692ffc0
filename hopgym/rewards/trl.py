"""Reward functions in TRL's ``reward_funcs`` form, on the same scoring code as the wrappers.

Classes: :class:`AnswerRewardFunc`, :class:`FormatRewardFunc`. Functions: :func:`extract_answer`,
:func:`is_well_formed`, :func:`completion_text`.

They are callable objects (so they pickle, unlike closures), carry ``__name__`` (TRL logs
``rewards/{__name__}/mean``), take ``(completions, **kwargs)`` where the dataset's columns arrive
as keyword lists, and return ``None`` where a term does not apply (TRL turns it into NaN and
ignores it). They do not import trl::

    from trl import GRPOConfig, GRPOTrainer
    from hopgym.rewards.trl import AnswerRewardFunc, FormatRewardFunc
    trainer = GRPOTrainer(model, reward_funcs=[AnswerRewardFunc("em"), FormatRewardFunc()],
                          args=GRPOConfig(...), train_dataset=ds)   # ds has "prompt", "answers"

Answers are read from the completion (``protocol``) by the protocol's own parser, the one the
env reads turns with (:mod:`hopgym.turns.answers`): ``tags`` (``<answer>…</answer>``), ``r3``
(``The final answer: …``), ``tools`` (an ``answer`` tool call), any registered protocol, ``boxed``
(``\\boxed{…}``) or ``auto`` (whichever appears). A completion is read as the rollout it is: its
turns in order, the env's observations (``<information>`` blocks, R3's
``The retrieval documents:``, tool responses) cut out, and the answer is that of the first turn
that answers, as in the env. A turn the env refuses answers nothing (two different answers, an
answer inside a closed ``<think>``), so hedging and hiding answers in thoughts earn nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from hopgym.errors import InvalidOptionError
from hopgym.rewards.answer_reward import AnswerCheck
from hopgym.rewards.judges import Judge, judge_answers
from hopgym.turns.answers import check_answer_protocol, extract_answer, is_well_formed
from hopgym.turns.base import ANY_SOURCE, check_parse_mode
from hopgym.turns.registry import get_protocol

__all__ = [
    "AnswerRewardFunc",
    "FormatRewardFunc",
    "extract_answer",
    "is_well_formed",
    "completion_text",
]


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or the last assistant message of a conversation.

    Example:
        >>> completion_text([{"role": "assistant", "content": "<answer>x</answer>"}])
        '<answer>x</answer>'
    """
    if isinstance(completion, str):
        return completion
    turns = get_protocol("tags").rollout_turns(completion)
    return turns[-1] if turns else ""


def _golds(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, str):
        value = [value]
    elif isinstance(value, dict):  # e.g. {"text": [...]} as in SQuAD-style columns
        value = value.get("text") or value.get("answers")
    if not isinstance(value, Sequence):
        return None
    return tuple(str(v) for v in value if isinstance(v, str) and v.strip()) or None


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content", ""))
    return ""


@dataclass(eq=False, repr=False)
class AnswerRewardFunc:
    """TRL reward: the guarded answer score of each completion (EM, F1, cover-EM, or a judge).

    Args:
        metric: ``"em"``, ``"f1"``, ``"cover_em"`` or ``"judge"`` (EM first, then the judge).
        answers_column: the dataset column with the gold answers (a string or a list of aliases).
        question_column: the column with the question, for the judge (else the prompt is used).
        protocol: how answers are written (see :func:`extract_answer`).
        parse: the env's parse mode (``None``: the protocol's default, ``lenient``).
        sources: the env's source names, for routes (default: any name).
        judge: the judge for ``"judge"`` (batched over the completions), or a fallback.
        weight: multiplies the score (TRL's ``reward_weights`` can also weight).
        hedge_guard: candidate lists score 0.
        max_extra_tokens: slack of ``cover_em``.
        name: ``__name__`` (default ``hopgym_{metric}``).

    Returns (when called): one float per completion; ``None`` for rows without gold answers.
    A completion without a readable answer scores 0.

    Raises:
        hopgym.errors.InvalidOptionError: at construction for a bad metric/protocol; when called, if the
            dataset has no ``answers_column``.

    Example:
        >>> f = AnswerRewardFunc("em")
        >>> f(["<answer>Cardell</answer>", "<answer>Lorn or Cardell</answer>", "x"],
        ...   answers=[["Cardell"], ["Cardell"], None])
        [1.0, 0.0, None]
        >>> f.__name__
        'hopgym_em'
    """

    metric: str = "em"
    _: KW_ONLY
    answers_column: str = "answers"
    question_column: str = "question"
    protocol: str = "auto"
    judge: Judge | None = None
    weight: float = 1.0
    hedge_guard: bool = True
    max_extra_tokens: int = 3
    name: str | None = None
    parse: str | None = None
    sources: Sequence[str] = ANY_SOURCE

    def __post_init__(self) -> None:
        check_answer_protocol(self.protocol)
        check_parse_mode(self.parse, optional=True)
        self.check = AnswerCheck(self.metric, self.judge, self.hedge_guard, self.max_extra_tokens)
        self.weight = float(self.weight)
        self.__name__ = self.name or f"hopgym_{self.metric}"

    def __repr__(self) -> str:
        return f"AnswerRewardFunc({self.metric!r}, name={self.__name__!r})"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        if self.answers_column not in kwargs:
            trl_own = ("prompts", "completion_ids", "trainer_state", "log_extra", "log_metric")
            cols = sorted(k for k in kwargs if k not in trl_own)
            raise InvalidOptionError(
                f"{self.__name__}: the dataset has no {self.answers_column!r} column "
                f"(columns: {cols}); pass answers_column=..."
            )
        gold_col = kwargs[self.answers_column]
        questions = kwargs.get(self.question_column)
        prompts = kwargs.get("prompts")
        out: list[float | None] = []
        pending: list[tuple[int, tuple[str, str, tuple[str, ...]]]] = []
        for i, completion in enumerate(completions):
            golds = _golds(gold_col[i])
            if golds is None:
                out.append(None)
                continue
            answer = extract_answer(completion, self.protocol, parse=self.parse, sources=self.sources)
            if answer is None:
                out.append(0.0)
                continue
            score = self.check.string_score(answer, golds)
            if self.check.needs_judge(answer, golds, score):
                question = (
                    str(questions[i]) if questions is not None else _prompt_text(prompts and prompts[i])
                )
                pending.append((i, (question, answer, golds)))
            out.append(self.weight * score)
        if pending and self.judge is not None:
            verdicts = judge_answers(self.judge, [item for _, item in pending])
            for (i, _), verdict in zip(pending, verdicts, strict=True):
                out[i] = max(out[i] or 0.0, self.weight * verdict)
        return out


@dataclass(eq=False, repr=False)
class FormatRewardFunc:
    """TRL reward: ``value`` for a completion that :func:`is_well_formed`, else 0.

    Args:
        protocol: ``"tags"``, ``"r3"``, ``"tools"`` (or any registered protocol) or ``"boxed"``.
        value: the reward of a well-formed completion.
        name: ``__name__`` (default ``hopgym_format``).
        parse: the env's parse mode (``None``: the protocol's default, ``lenient``).
        sources: the env's source names, for routes (default: any name).

    Example:
        >>> FormatRewardFunc()(["<think>a</think><answer>b</answer>", "b"])
        [1.0, 0.0]
    """

    protocol: str = "tags"
    _: KW_ONLY
    value: float = 1.0
    name: str = "hopgym_format"
    parse: str | None = None
    sources: Sequence[str] = ANY_SOURCE

    def __post_init__(self) -> None:
        check_answer_protocol(self.protocol, concrete=True)
        check_parse_mode(self.parse, optional=True)
        self.value = float(self.value)
        self.__name__ = self.name

    def __repr__(self) -> str:
        return f"FormatRewardFunc({self.protocol!r}, name={self.__name__!r})"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return [
            self.value if is_well_formed(c, self.protocol, parse=self.parse, sources=self.sources) else 0.0
            for c in completions
        ]
