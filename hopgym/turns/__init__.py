"""The turn grammar: how a model's turn is written, read and answered, for every protocol.

Everything that reads a model turn — the env's step, the reward functions (the TRL ones
included), the agents, the adapters — reads it here, through one :class:`Protocol` object per
protocol (``tags``, ``r3``, ``tools``, and any :func:`register_protocol` adds). So a turn gets
one verdict everywhere: the same answer, the same invalid reason, the same format issues.

Every parser here runs in time linear in the turn's length and never recurses on the turn's
nesting (JSON in tool calls is refused beyond :data:`~hopgym.turns.json_scan.MAX_DEPTH` levels
with a corrective observation).

Modules: :mod:`~hopgym.turns.actions` (the actions), :mod:`~hopgym.turns.base` (``Protocol``,
``Turn``, ``Call``), :mod:`~hopgym.turns.tags`, :mod:`~hopgym.turns.r3`,
:mod:`~hopgym.turns.tools`, :mod:`~hopgym.turns.registry`, :mod:`~hopgym.turns.answers` (answers
of whole completions: :func:`extract_answer`, :func:`is_well_formed`),
:mod:`~hopgym.turns.info` (the step ``info``'s keys, :class:`StepInfo`).
"""

from hopgym.turns.actions import (
    ACTION_TYPES,
    FORMAT_ISSUES,
    Action,
    Answer,
    FormatIssue,
    ParsedTurn,
    Route,
    Search,
    Think,
)
from hopgym.turns.answers import ANSWER_PROTOCOLS, extract_answer, is_well_formed
from hopgym.turns.base import ANY_SOURCE, PARSE_MODES, Call, Protocol, Turn, check_parse_mode
from hopgym.turns.info import StepInfo
from hopgym.turns.r3 import R3Protocol
from hopgym.turns.registry import PROTOCOLS, get_protocol, register_protocol
from hopgym.turns.specs import tool_specs
from hopgym.turns.tags import TagsProtocol
from hopgym.turns.tools import ToolProtocol

__all__ = [
    "Protocol",
    "Turn",
    "Call",
    "TagsProtocol",
    "R3Protocol",
    "ToolProtocol",
    "PROTOCOLS",
    "PARSE_MODES",
    "ANY_SOURCE",
    "ANSWER_PROTOCOLS",
    "register_protocol",
    "get_protocol",
    "check_parse_mode",
    "extract_answer",
    "is_well_formed",
    "tool_specs",
    "StepInfo",
    "Action",
    "Think",
    "Search",
    "Route",
    "Answer",
    "ParsedTurn",
    "FormatIssue",
    "ACTION_TYPES",
    "FORMAT_ISSUES",
]
