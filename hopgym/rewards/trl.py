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

Answers are read from the completion text (``protocol``): ``tags`` (``<answer>…</answer>``),
``r3`` (``The final answer: …``), ``boxed`` (``\\boxed{…}``) or ``auto`` (whichever appears).
Anti-gaming: text inside ``<think>`` and retrieved text (``<information>`` / R3's
``The retrieval documents:``) is removed first, and a completion with more than one answer has
none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from hopgym.errors import InvalidOptionError
from hopgym.rewards.answer_reward import AnswerCheck
from hopgym.rewards.judges import Judge, judge_answers

__all__ = [
    "AnswerRewardFunc",
    "FormatRewardFunc",
    "extract_answer",
    "is_well_formed",
    "completion_text",
    "ANSWER_PROTOCOLS",
]

#: Protocols :func:`extract_answer` reads.
ANSWER_PROTOCOLS: tuple[str, ...] = ("auto", "tags", "r3", "boxed")

_THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.DOTALL | re.IGNORECASE)
_INFO = re.compile(r"<information>.*?(?:</information>|\Z)", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANY_ANSWER_TAG = re.compile(r"</?answer>", re.IGNORECASE)
_BLOCK = re.compile(r"<(think|search|route|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_ANY_TAG = re.compile(r"</?(think|search|route|answer|information)>", re.IGNORECASE)
_R3_DOCS = re.compile(r"(?ims)^\s*the retrieval documents:.*?(?=^\s*step\s+\d+\s*:|\Z)")
_R3_FINAL = re.compile(r"(?im)^\s*the final answer:[ \t]*(.*)$")
_BOXED = "\\boxed{"


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or the last assistant message of a conversation.

    Example:
        >>> completion_text([{"role": "assistant", "content": "<answer>x</answer>"}])
        '<answer>x</answer>'
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, Sequence):
        for message in reversed(completion):
            if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
                content = message.get("content", "")
                if isinstance(content, str):
                    return content
                if isinstance(content, Sequence):  # [{"type": "text", "text": ...}, ...]
                    return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _boxed(text: str) -> list[str]:
    out, start = [], text.find(_BOXED)
    while start != -1:
        i, depth = start + len(_BOXED), 1
        j = i
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:
            break
        out.append(text[i : j - 1])
        start = text.find(_BOXED, j)
    return out


def _strip_context(text: str) -> str:
    """Remove reasoning and retrieved text, where answers must not be read from."""
    text = _INFO.sub(" ", text)
    text = _R3_DOCS.sub(" ", text)
    return _THINK.sub(" ", text)


def extract_answer(text: str, protocol: str = "auto") -> str | None:
    """The one final answer in a completion, or ``None`` (no answer, or more than one).

    Args:
        text: the completion text.
        protocol: ``"tags"``, ``"r3"``, ``"boxed"`` or ``"auto"``.

    Raises:
        hopgym.errors.InvalidOptionError: for an unknown protocol.

    Example:
        >>> extract_answer("<think>maybe <answer>Lorn</answer></think><answer>Cardell</answer>")
        'Cardell'
        >>> extract_answer("<answer>Lorn</answer><answer>Cardell</answer>") is None
        True
        >>> extract_answer("The problem analysis: done.\\nThe final answer: Cardell")
        'Cardell'
        >>> extract_answer("so it is \\\\boxed{Cardell}.", "boxed")
        'Cardell'
    """
    if protocol not in ANSWER_PROTOCOLS:
        raise InvalidOptionError(f"protocol must be one of {list(ANSWER_PROTOCOLS)}, got {protocol!r}")
    body = _strip_context(text)
    if protocol == "auto":
        low = body.lower()
        protocol = (
            "tags"
            if "<answer>" in low
            else "r3"
            if "the final answer:" in low
            else "boxed"
            if _BOXED in body
            else ""
        )
        if not protocol:
            return None
    if protocol == "tags":
        found = _ANSWER.findall(body)
        if len(found) != 1 or len(_ANY_ANSWER_TAG.findall(body)) != 2:
            return None
        answer = found[0]
    elif protocol == "r3":
        found = _R3_FINAL.findall(body)
        if len(found) != 1:
            return None
        answer = found[0]
    else:
        found = _boxed(body)
        if len(found) != 1:
            return None
        answer = found[0]
    answer = " ".join(answer.split())
    return answer or None


def is_well_formed(text: str, protocol: str = "tags") -> bool:
    """Whether a completion follows the protocol and ends with exactly one non-empty answer.

    ``tags``: only ``<think>``/``<search>``/``<route>``/``<answer>`` blocks (and environment
    ``<information>`` blocks) separated by whitespace, no nesting, the answer last. ``r3``: a
    ``The problem analysis:`` line and exactly one ``The final answer:``. ``boxed``: exactly one
    ``\\boxed{}``.

    Example:
        >>> is_well_formed("<think>easy</think> <answer>Cardell</answer>")
        True
        >>> is_well_formed("Cardell <answer>Cardell</answer>")
        False
    """
    if protocol == "auto":
        raise InvalidOptionError("is_well_formed needs a concrete protocol: 'tags', 'r3' or 'boxed'")
    answer = extract_answer(text, protocol)
    if answer is None:
        return False
    if protocol == "tags":
        body = _INFO.sub(" ", text)
        blocks = list(_BLOCK.finditer(body))
        if not blocks or blocks[-1].group(1).lower() != "answer":
            return False
        if any(_ANY_TAG.search(m.group(2)) for m in blocks):
            return False
        return not _BLOCK.sub("", body).strip()
    if protocol == "r3":
        return "the problem analysis:" in text.lower()
    return True


def _golds(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return (value,) if value.strip() else None
    if isinstance(value, dict):  # e.g. {"text": [...]} as in SQuAD-style columns
        value = value.get("text") or value.get("answers")
    if isinstance(value, Sequence):
        golds = tuple(str(v) for v in value if isinstance(v, str) and v.strip())
        return golds or None
    return None


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        for message in reversed(prompt):
            if isinstance(message, dict) and message.get("role") == "user":
                return str(message.get("content", ""))
    return ""


class AnswerRewardFunc:
    """TRL reward: the guarded answer score of each completion (EM, F1, cover-EM, or a judge).

    Args:
        metric: ``"em"``, ``"f1"``, ``"cover_em"`` or ``"judge"`` (EM first, then the judge).
        answers_column: the dataset column with the gold answers (a string or a list of aliases).
        question_column: the column with the question, for the judge (else the prompt is used).
        protocol: how answers are written (see :func:`extract_answer`).
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

    def __init__(
        self,
        metric: str = "em",
        *,
        answers_column: str = "answers",
        question_column: str = "question",
        protocol: str = "auto",
        judge: Judge | None = None,
        weight: float = 1.0,
        hedge_guard: bool = True,
        max_extra_tokens: int = 3,
        name: str | None = None,
    ) -> None:
        if protocol not in ANSWER_PROTOCOLS:
            raise InvalidOptionError(f"protocol must be one of {list(ANSWER_PROTOCOLS)}, got {protocol!r}")
        self.check = AnswerCheck(metric, judge, hedge_guard, max_extra_tokens)
        self.metric = metric
        self.answers_column = answers_column
        self.question_column = question_column
        self.protocol = protocol
        self.judge = judge
        self.weight = float(weight)
        self.__name__ = name or f"hopgym_{metric}"

    def __repr__(self) -> str:
        return f"AnswerRewardFunc({self.metric!r}, name={self.__name__!r})"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        if self.answers_column not in kwargs:
            cols = sorted(
                k
                for k in kwargs
                if k not in ("prompts", "completion_ids", "trainer_state", "log_extra", "log_metric")
            )
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
            answer = extract_answer(completion_text(completion), self.protocol)
            if answer is None:
                out.append(0.0)
                continue
            score = self.check.string_score(answer, golds)
            if self.check.needs_judge(answer, golds, score):
                question = (
                    str(questions[i])
                    if questions is not None
                    else _prompt_text(prompts[i])
                    if prompts is not None
                    else ""
                )
                pending.append((i, (question, answer, golds)))
            out.append(self.weight * score)
        if pending and self.judge is not None:
            verdicts = judge_answers(self.judge, [item for _, item in pending])
            for (i, _), verdict in zip(pending, verdicts, strict=True):
                out[i] = max(out[i] or 0.0, self.weight * verdict)
        return out


class FormatRewardFunc:
    """TRL reward: ``value`` for a completion that :func:`is_well_formed`, else 0.

    Args:
        protocol: ``"tags"``, ``"r3"`` or ``"boxed"``.
        value: the reward of a well-formed completion.
        name: ``__name__`` (default ``hopgym_format``).

    Example:
        >>> FormatRewardFunc()(["<think>a</think><answer>b</answer>", "b"])
        [1.0, 0.0]
    """

    def __init__(self, protocol: str = "tags", *, value: float = 1.0, name: str = "hopgym_format") -> None:
        if protocol not in ANSWER_PROTOCOLS or protocol == "auto":
            raise InvalidOptionError(f"protocol must be 'tags', 'r3' or 'boxed', got {protocol!r}")
        self.protocol = protocol
        self.value = float(value)
        self.__name__ = name

    def __repr__(self) -> str:
        return f"FormatRewardFunc({self.protocol!r}, name={self.__name__!r})"

    def __call__(self, completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        return [self.value if is_well_formed(completion_text(c), self.protocol) else 0.0 for c in completions]
