"""The keys of a step's ``info``: :class:`StepInfo`, documented once.

The env (:class:`~hopgym.envs.multihop_qa.MultiHopQAEnv`) sets them on every step; the reward
wrappers, agents and adapters read them. Code reads them as ``info["answer"]`` and so on: a
``StepInfo`` is a plain dict at run time, the type says which keys there are and what they hold.
The reward wrappers' hooks (``_step_terms``, ``_end_terms``...) take the info as a ``StepInfo``,
so mypy checks what they read.
Wrappers add keys of their own (``reward_terms``...), which are not listed here.
"""

from __future__ import annotations

from typing import Any, TypedDict

from hopgym.corpora.types import Passage
from hopgym.turns.actions import FormatIssue

__all__ = ["StepInfo"]


class _ToolsInfo(TypedDict, total=False):
    #: Under ``tools``: each call's own info, in order (a call that did not run has none).
    calls: list[StepInfo]
    #: Under ``tools``: the step's reply messages (tool messages; a corrective as a user message).
    tool_messages: list[dict[str, Any]]


class StepInfo(_ToolsInfo):
    """What ``env.step`` reports in ``info`` (a call's info under ``tools`` has the same keys).

    Keys: ``turn`` (the turn just played, from 1), ``turns_left`` (turns left after it),
    ``action_type`` (``think``, ``search``, ``route``, ``answer`` or ``invalid``: under
    ``tools``, the last call that ran), ``invalid_action`` (why the turn or call is invalid, or
    ``None``), ``think`` (the reasoning, or ``None``), ``query`` (a search's query), ``source``
    (the current source after the step), ``routed_to`` (the source a route or a search's
    ``source`` switched to), ``retrieved_ids`` (the retriever's result), ``new_ids`` (the
    documents shown after de-duplication and the cap), ``documents`` (the shown passages),
    ``answer`` (the final answer, on the step that answers), ``retrieval_error`` and
    ``retrieval_error_kind`` (a failed search's error and its kind), ``question_id``,
    ``format_issues`` (the flaws read past), ``truncated_turn`` (an invalid turn that ends
    inside an unfinished thought or action), ``repeated_query`` (a search repeating one of the
    episode), ``searches``, ``searches_by_source`` and ``failed_searches`` (cumulative counts);
    under ``tools`` also ``calls`` and ``tool_messages``.
    """

    turn: int
    turns_left: int
    action_type: str
    invalid_action: str | None
    think: str | None
    query: str | None
    source: str
    routed_to: str | None
    retrieved_ids: list[str]
    new_ids: list[str]
    documents: list[Passage]
    answer: str | None
    retrieval_error: str | None
    retrieval_error_kind: str | None
    question_id: str | None
    format_issues: list[FormatIssue]
    truncated_turn: bool
    repeated_query: bool
    searches: int
    searches_by_source: dict[str, int]
    failed_searches: int
