"""Answers of whole completions, as the env would take them: :func:`extract_answer`,
:func:`is_well_formed`, :func:`detect_protocol`, :func:`boxed_answers`. Constants:
:data:`ANSWER_PROTOCOLS`.

A completion (a string, or a TRL conversation: a list of messages) is read as the rollout it is:
its turns (the model's part; the env's observations such as ``<information>`` blocks are cut
out) are read in order by the protocol's own parser, and the answer is that of the first turn
that answers, as the env would end the episode there. So the reward functions and the env give
one verdict: a turn the env refuses (two different answers, an answer inside a closed thought)
answers nothing here either, and an answer the env takes (an identical answer written twice,
under ``lenient``) is the answer here too.

``boxed`` (``\\boxed{…}``) is an answer format of the reward functions only (no env speaks it):
exactly one ``\\boxed{}`` outside the thoughts is the answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.errors import InvalidOptionError
from hopgym.turns.base import ANY_SOURCE, Protocol, without_thoughts
from hopgym.turns.registry import PROTOCOLS, get_protocol

__all__ = [
    "ANSWER_PROTOCOLS",
    "check_answer_protocol",
    "extract_answer",
    "is_well_formed",
    "detect_protocol",
    "boxed_answers",
]

#: The answer formats besides the registered protocols: ``auto`` (whichever appears) and ``boxed``.
ANSWER_PROTOCOLS: tuple[str, ...] = ("auto", "boxed")
_BOXED = "\\boxed{"
_BRACE = re.compile(r"[{}]")
_PLAIN = Protocol()  # its turns of a completion are the assistant messages' text, whole


def check_answer_protocol(protocol: object, *, concrete: bool = False) -> None:
    """Refuse anything but a protocol (instance or registered name), ``"boxed"`` or (unless
    ``concrete``) ``"auto"``.

    Raises:
        hopgym.errors.InvalidOptionError: naming the choices.
    """
    if isinstance(protocol, Protocol) or protocol in PROTOCOLS or protocol == "boxed":
        return
    if protocol != "auto" or concrete:
        allowed = sorted(PROTOCOLS) + ["boxed"] + ([] if concrete else ["auto"])
        raise InvalidOptionError(f"protocol must be one of {allowed}, got {protocol!r}")


def _text_of(completion: Any) -> str:
    """All the text of a completion (for :func:`detect_protocol` and ``boxed``)."""
    return "\n".join(_PLAIN.rollout_turns(completion))


def detect_protocol(completion: Any) -> str:
    """The answer format a completion is written in: ``tools`` (structured tool calls or a
    ``<tool_call>``), ``tags`` (an ``<answer>``), ``r3`` (``The final answer:``), ``boxed``; else
    ``tags``.

    Example:
        >>> detect_protocol("The problem analysis: x\\nThe final answer: Oslo")
        'r3'
    """
    if isinstance(completion, (Mapping, Sequence)) and not isinstance(completion, str):
        messages = [completion] if isinstance(completion, Mapping) else completion
        if any(isinstance(m, Mapping) and m.get("tool_calls") for m in messages):
            return "tools"
    text = _text_of(completion)
    low = text.lower()
    if "<tool_call>" in text:
        return "tools"
    if "<answer>" in low or "< answer>" in low:
        return "tags"
    if "the final answer:" in low:
        return "r3"
    if _BOXED in text:
        return "boxed"
    return "tags"


def boxed_answers(text: str) -> list[str]:
    """The contents of each ``\\boxed{…}`` (braces balanced) outside the thoughts, in one pass.

    Example:
        >>> boxed_answers("so \\\\boxed{x^{2}} or \\\\boxed{y")
        ['x^{2}']
    """
    text = "".join(get_protocol("tags").split_text(without_thoughts(text)))
    out, start = [], text.find(_BOXED)
    while start != -1:
        depth, i = 1, start + len(_BOXED)
        for m in _BRACE.finditer(text, i):  # the braces only, not every character
            depth += 1 if m.group() == "{" else -1
            if not depth:
                break
        if depth:
            break
        out.append(text[i : m.start()])
        start = text.find(_BOXED, m.end())
    return out


def extract_answer(
    completion: Any,
    protocol: str | Protocol = "auto",
    *,
    parse: str | None = None,
    sources: Sequence[str] = ANY_SOURCE,
) -> str | None:
    """The answer the env would end the episode with, had it stepped the completion's turns in
    order (``None``: no turn answers).

    Args:
        completion: a string (one turn, or a rollout with the env's observations in it), an
            assistant message, or a list of messages.
        protocol: a protocol's name or instance, ``"boxed"`` or ``"auto"``
            (:func:`detect_protocol`).
        parse: the parse mode (default: the protocol's, ``lenient``), as the env's ``parse``.
        sources: the env's source names, for routes (default: any name).

    Raises:
        hopgym.errors.InvalidOptionError: an unknown protocol.

    Example:
        >>> extract_answer("<think>maybe <answer>Lorn</answer></think><answer>Cardell</answer>") is None
        True
        >>> extract_answer("<answer>A</answer><answer>A</answer>")
        'A'
        >>> extract_answer("<answer>Lorn</answer><answer>Cardell</answer>") is None
        True
        >>> extract_answer("The problem analysis: done.\\nThe final answer: Cardell")
        'Cardell'
        >>> extract_answer("so it is \\\\boxed{Cardell}.", "boxed")
        'Cardell'
    """
    check_answer_protocol(protocol)
    if protocol == "auto":
        protocol = detect_protocol(completion)
    if protocol == "boxed":
        found = boxed_answers(_text_of(completion))
        answer = " ".join(found[0].split()) if len(found) == 1 else ""
        return answer or None
    return get_protocol(protocol, parse).extract_answer(completion, sources)


def is_well_formed(
    completion: Any,
    protocol: str | Protocol = "tags",
    *,
    parse: str | None = None,
    sources: Sequence[str] = ANY_SOURCE,
) -> bool:
    """Whether every turn of the completion is valid and free of format issues and the last one
    answers (``boxed``: exactly one ``\\boxed{}``).

    Example:
        >>> is_well_formed("<think>easy</think> <answer>Cardell</answer>")
        True
        >>> is_well_formed("Cardell <answer>Cardell</answer>")
        False
    """
    check_answer_protocol(protocol, concrete=True)
    if protocol == "boxed":
        return extract_answer(completion, "boxed") is not None
    return get_protocol(protocol, parse).is_well_formed(completion, sources)
