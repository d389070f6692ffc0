"""Structured actions, for agents that are not language models.

Classes: :class:`Think`, :class:`Search`, :class:`Route`, :class:`Answer`, :class:`ParsedTurn`,
:class:`FormatIssue`. Constants: :data:`ACTION_TYPES`, :data:`FORMAT_ISSUES`.

A structured action is rendered to the env's protocol text (``Search("x")`` becomes
``<search>x</search>`` under ``tags``) and then parsed like any model turn, so a scripted agent and an
LLM that writes the same text get exactly the same treatment.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, NamedTuple, TypeVar

from hopgym.errors import InvalidOptionTypeError

_C = TypeVar("_C")

__all__ = [
    "Think",
    "Search",
    "Route",
    "Answer",
    "Action",
    "ParsedTurn",
    "FormatIssue",
    "ACTION_TYPES",
    "FORMAT_ISSUES",
]

ACTION_TYPES = ("think", "search", "route", "answer", "invalid")

#: Every format-issue code a protocol reports, with what it means. A format issue is a flaw of a
#: turn that the parser could read past (``lenient`` mode); it never makes a turn invalid by
#: itself, but ``FormatReward`` can charge for it and withholds its bonus.
FORMAT_ISSUES: dict[str, str] = {
    "unclosed_think": "a <think> that is never closed (tags)",
    "unopened_think": "a </think> without an opening <think> (tags)",
    "text_outside_tags": "text outside the <think> and action blocks (tags)",
    "malformed_tag": "a tag written with spaces inside its brackets, such as '< search >' (tags)",
    "stray_tag": "an action tag without its partner beside a complete action block (tags)",
    "duplicate_action": "the same action written twice (tags, r3)",
    "missing_analysis": "no 'The problem analysis:' line (r3)",
    "inline_field": "a field label such as 'The retrieval query:' not at the start of a line (r3)",
    "text_outside_fields": "text before the first field, or after the action's line (r3)",
    "bare_tool_call": "a JSON tool call without the chat template's markers such as <tool_call> (tools)",
    "unclosed_tool_call": "a complete JSON call in a <tool_call> never closed (tools)",
    "extra_argument": "a tool call with an argument the tool does not take (tools)",
}


class FormatIssue(NamedTuple):
    """One format issue of a turn: a stable ``code`` (a key of :data:`FORMAT_ISSUES`) and a
    ``detail`` quoting what was found.

    Example:
        >>> FormatIssue("unclosed_think", "<think> is never closed")
        FormatIssue(code='unclosed_think', detail='<think> is never closed')
    """

    code: str
    detail: str


def fast_init(cls: type[_C]) -> type[_C]:
    """Give a frozen slotted dataclass an ``__init__`` that sets its fields through their slot
    descriptors: the one a frozen dataclass gets calls ``object.__setattr__`` per field, about
    twice the cost (these are built on every turn). The signature and defaults are the same."""
    if hasattr(cls, "__post_init__") or any(f.default_factory is not MISSING for f in fields(cls)):  # type: ignore[arg-type]
        raise InvalidOptionTypeError(
            f"fast_init: {cls.__name__} has __post_init__ or a default_factory, which it would skip"
        )
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    ns: dict[str, Any] = {f"_set_{n}": getattr(cls, n).__set__ for n in names}
    ns |= {f"_default_{f.name}": f.default for f in fields(cls) if f.default is not MISSING}  # type: ignore[arg-type]
    params = ", ".join(n if f"_default_{n}" not in ns else f"{n}=_default_{n}" for n in names)
    body = "".join(f"\n    _set_{n}(self, {n})" for n in names)
    exec(f"def __init__(self, {params}):{body}", ns)  # the way dataclasses writes it
    ns["__init__"].__qualname__ = f"{cls.__qualname__}.__init__"
    ns["__init__"].__annotations__ = cls.__init__.__annotations__
    cls.__init__ = ns["__init__"]  # type: ignore[method-assign]
    return cls


@fast_init
@dataclass(frozen=True, slots=True)
class Think:
    """Reason without acting; the env returns an empty observation."""

    text: str
    kind = "think"


@fast_init
@dataclass(frozen=True, slots=True)
class Search:
    """Search the current source for ``query`` (or ``source``, which then becomes the current
    one: how the ``tools`` protocol routes; the text protocols route with :class:`Route`)."""

    query: str
    think: str = ""
    source: str | None = field(default=None, repr=False)
    kind = "search"


@fast_init
@dataclass(frozen=True, slots=True)
class Route:
    """Switch the source that later searches use."""

    source: str
    think: str = ""
    kind = "route"


@fast_init
@dataclass(frozen=True, slots=True)
class Answer:
    """Give the final answer; ends the episode."""

    text: str
    think: str = ""
    kind = "answer"


Action = Think | Search | Route | Answer


@fast_init
@dataclass(frozen=True, slots=True)
class ParsedTurn:
    """What a protocol read from one model turn.

    Exactly one of ``action`` and ``error`` is set. ``think`` is the reasoning text, if any.
    ``issues`` are the format issues of a valid turn (see :data:`FORMAT_ISSUES`); an invalid turn
    has its ``error`` instead. ``truncated`` marks an invalid turn that ends inside an unfinished thought or
    action (an open ``<think>`` or ``<search>`` with no complete action block, or an ``r3``
    analysis cut mid-sentence): the usual sign of a turn cut at the model's token limit.
    """

    action: Action | None
    think: str = ""
    error: str | None = None
    issues: tuple[FormatIssue, ...] = ()
    truncated: bool = False

    @property
    def kind(self) -> str:
        """``think``, ``search``, ``route``, ``answer`` or ``invalid``."""
        return "invalid" if self.action is None else self.action.kind
