"""Structured actions, for agents that are not language models.

Classes: :class:`Think`, :class:`Search`, :class:`Route`, :class:`Answer`, :class:`ParsedTurn`.

A structured action is rendered to the env's protocol text (``Search("x")`` becomes
``<search>x</search>`` under ``tags``) and then parsed like any model turn, so a scripted agent and an
LLM that writes the same text get exactly the same treatment.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Think", "Search", "Route", "Answer", "Action", "ParsedTurn", "ACTION_TYPES"]

ACTION_TYPES = ("think", "search", "route", "answer", "invalid")


@dataclass(frozen=True, slots=True)
class Think:
    """Reason without acting; the env returns an empty observation."""

    text: str
    kind = "think"


@dataclass(frozen=True, slots=True)
class Search:
    """Search the current source for ``query``."""

    query: str
    think: str = ""
    kind = "search"


@dataclass(frozen=True, slots=True)
class Route:
    """Switch the source that later searches use."""

    source: str
    think: str = ""
    kind = "route"


@dataclass(frozen=True, slots=True)
class Answer:
    """Give the final answer; ends the episode."""

    text: str
    think: str = ""
    kind = "answer"


Action = Think | Search | Route | Answer


@dataclass(frozen=True, slots=True)
class ParsedTurn:
    """What a protocol read from one model turn.

    Exactly one of ``action`` and ``error`` is set. ``think`` is the reasoning text, if any.
    """

    action: Action | None
    think: str = ""
    error: str | None = None

    @property
    def kind(self) -> str:
        """``think``, ``search``, ``route``, ``answer`` or ``invalid``."""
        return "invalid" if self.action is None else self.action.kind
