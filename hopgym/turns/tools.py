"""The ``tools`` protocol: OpenAI-style function calls (``search``, ``answer``) as actions.

Classes: :class:`ToolProtocol`. Functions: :func:`step_calls` (a step's calls beside their
results, for the views of a run). The tools' schemas are :mod:`hopgym.turns.specs`'s.

A turn is free text (reasoning, optionally in ``<think>…</think>``) and one or more calls of the
env's tools, written in any of the forms a user has in hand:

- a structured assistant message, as OpenAI-compatible servers return it:
  ``{"role": "assistant", "content": …, "tool_calls": [{"id": …, "type": "function",
  "function": {"name": …, "arguments": "<json string>"}}]}``, as a dict or its JSON string;
- the raw text a model generated through its chat template: hermes / Qwen / SmolLM3
  ``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` blocks; Llama 3.x ``<|python_tag|>``
  and the whole turn as ``{"name": …, "parameters": {…}}`` JSON (objects separated by ``;``);
  Mistral ``[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`` and its newer
  ``[TOOL_CALLS]name[ARGS]{…}`` form;
- in ``lenient`` parse mode also a bare JSON call (``{"name": …`` ``, "arguments": …}``) anywhere
  in free text, beside tagged calls too (Qwen2.5-0.5B writes it with and without the
  ``<tool_call>`` tags): read in its place among the calls, with the format issue
  ``bare_tool_call``.

The rule for several calls in one turn, the same for every reader (the env, the reward
functions, the adapters), as chat-agent loops (OpenAI, TRL, verifiers) run a message's calls:
the calls run in order, up to ``max_tool_calls``, each answered by its tool message; an
``answer`` ends the episode and the calls after it are not run. The first call that cannot run
(malformed JSON, an unknown tool, a missing, empty, unexpected or mistyped argument, an unknown
source, JSON nested deeper than :data:`~hopgym.turns.json_scan.MAX_DEPTH`, one call too many)
gets a tool message that says what was wrong, and the calls after it are not run ("Not run: an
earlier call of this turn failed."): the step is invalid, like a malformed tag turn.

A call inside a closed ``<think>…</think>`` is a thought about a call, not a call. A last call
that the turn ends inside (cut at the token limit) is *repaired* when there is one way to finish
it (its JSON leaves only brackets open, outside any string: ``{"name": "answer", "arguments":
{"answer": "China"}`` gets its ``}``; format issue ``repaired_tool_call``); otherwise it is
refused with a message that quotes it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hopgym.turns.actions import Action, Answer, FormatIssue, ParsedTurn, Route, Search, Think
from hopgym.turns.base import (
    ARGUMENT,
    THINK_CLOSE,
    THINK_OPEN,
    Call,
    Protocol,
    Turn,
    blocks,
    cut_blocks,
    quote,
    routes,
    strip_spans,
)
from hopgym.turns.json_scan import TOO_DEEP, JSONTextError, decode, dumps, repair
from hopgym.turns.specs import TOOL_NAMES

__all__ = [
    "ToolProtocol",
    "step_calls",
]

_THINK_TAG = re.compile(r"</?think>", re.IGNORECASE)
_CALL_OPEN = re.compile(r"<tool_call>")
_CALL_CLOSE = re.compile(r"</tool_call>")
_RESPONSE_OPEN = re.compile(r"<tool_response>")
_RESPONSE_CLOSE = re.compile(r"</tool_response>")
# Where a bare JSON call may start: an object whose first key is "name" (possessive white
# space: each run is read once).
_BARE_START = re.compile(r'\{\s*+"name"\s*+:')
_SEPARATORS = re.compile(r"[\s;]*+")  # between Llama 3.x's JSON calls
_MISTRAL_V11_RE = re.compile(r"\[TOOL_CALLS\]\s*+([A-Za-z_][\w.-]*+)\s*+\[ARGS\]")
_ROUTE_ERROR = "there is no route tool: pass search a source to search there"
#: Per tool: its argument, and how to call it (what a corrective shows).
_ARGUMENT = {
    "search": ("query", 'call search with {"query": "<a few keywords>"}'),
    "answer": ("answer", 'call answer with {"answer": "<a short span: a name, a place, a date>"}'),
}
_NO_CALL = "no tool call: call search(query) to search or answer(answer) to answer"
#: The most calls read from one turn's text (the env runs at most ``max_tool_calls`` of them and
#: counts the rest as dropped; beyond this many the text is not read further).
MAX_CALLS_READ = 256
_MESSAGE_SCAN = 200_000  # how far into a string turn '"tool_calls"' marks an assistant message

# (start, end, the call's JSON value or why it cannot be read)
_Found = tuple[int, int, Any]


_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


class _BadJSON:
    """A call whose JSON cannot be read (kept to report it, quoted)."""

    def __init__(self, text: str, reason: str, unfinished: bool = False) -> None:
        self.text, self.reason, self.unfinished = text[:200], reason, unfinished
        self.cut = False  # the turn itself ends inside the call (cut at the token limit)


def _think_of(content: str) -> str:
    """The reasoning of a turn's text: the first ``<think>`` block (to its close or the end),
    else the text with any stray think tag removed."""
    first = blocks(content, THINK_OPEN, THINK_CLOSE, 1)
    return " ".join((content[first[0][1] : first[0][2]] if first else _THINK_TAG.sub(" ", content)).split())


def _think_only(text: str) -> bool:
    """Whether ``text`` ends with a closed, non-blank thought (then a turn without calls thinks)."""
    body = text.rstrip()
    m = THINK_OPEN.search(body) if body.lower().endswith("</think>") else None
    return m is not None and bool(body[m.end() : len(body) - len("</think>")].strip())


def _decoded(text: str, start: int = 0) -> tuple[Any, int]:
    """:func:`~hopgym.turns.json_scan.decode`'s value and end, or the error it raised and where
    the reading stopped."""
    try:
        return decode(text, start)
    except JSONTextError as exc:
        return exc, exc.end


def _value(text: str, start: int, end: int) -> Any:
    """The JSON value of ``text[start:end]`` (white space around allowed), a :class:`_BadJSON`
    when it cannot be read; an unfinished value is repaired when it can be (see
    :func:`~hopgym.turns.json_scan.repair`)."""
    body = text[start:end]
    stripped = body.strip()
    if not stripped:
        return _BadJSON(body, "no JSON in the call")
    value, stop = _decoded(stripped)
    if not isinstance(value, JSONTextError):
        if stripped[stop:].strip():
            return _BadJSON(body, f"text after the JSON value: {quote(stripped[stop:], 40)}")
        return value
    if not value.unfinished:
        return _BadJSON(body, f"{value.reason}: {quote(stripped, 80)}")
    try:  # unfinished: repaired when closing its brackets finishes it
        return _Repaired(repair(stripped, value))
    except JSONTextError:
        return _BadJSON(body, f"the call ends before its JSON does: {quote(stripped, 80)}", True)


class _Repaired:
    """A call value that was finished by closing its open brackets."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _json_values(text: str, start: int) -> list[Any] | JSONTextError | None:
    """The JSON values of ``text[start:]`` separated by white space or ``;`` (Llama 3.x) (the
    first :data:`MAX_CALLS_READ`); when a part is not JSON, the first value's error, or
    ``None`` for a later one."""
    out: list[Any] = []
    while True:
        pos = _SEPARATORS.match(text, start).end()  # type: ignore[union-attr]
        if pos >= len(text) or len(out) >= MAX_CALLS_READ:
            return out
        obj, start = _decoded(text, pos)
        if isinstance(obj, JSONTextError):
            return None if out else obj
        out.append(obj)


def _bare_calls(text: str) -> list[_Found]:
    """Bare JSON calls in free text: each ``{"name": …`` object, in one pass (an object read or
    refused is skipped whole; one the text ends inside is the last)."""
    out: list[_Found] = []
    pos = 0
    while len(out) < MAX_CALLS_READ and (m := _BARE_START.search(text, pos)) is not None:
        start = m.start()
        obj, pos = _decoded(text, start)  # an unfinished one ends at the end of the text
        if isinstance(obj, JSONTextError):
            obj = _value(text, start, pos) if obj.unfinished else _BadJSON(text[start:pos], obj.reason)
        out.append((start, pos, obj))
    return out


class ToolProtocol(Protocol):
    """OpenAI-style tool calls: ``search(query, source?)`` and ``answer(answer)``.

    :meth:`read` reads a whole turn (every call); :meth:`parse` gives its first call (what a
    batched search prefetches). Observations are tool messages; the env shows their text in
    hermes ``<tool_response>`` blocks and keeps the messages themselves in its transcript (an
    OpenAI message list).

    Example:
        >>> p = ToolProtocol()
        >>> call = '<tool_call>{"name": "search", "arguments": {"query": "Oslo"}}</tool_call>'
        >>> turn = p.read("<think>hm</think>" + call, ["local"])
        >>> turn.think, [c.parsed.action for c in turn.calls]
        ('hm', [Search(query='Oslo', think='hm')])
        >>> p.read('<tool_call>{"name": "serch"}</tool_call>', ["local"]).calls[0].parsed.error
        "unknown tool 'serch': the tools are search, answer"
    """

    name = "tools"  # no stop strings, no closed-book prompt: the base class's empty defaults
    accepts_messages = True
    chat_tools = True
    PROMPT = (
        "Answer the question by searching step by step with the search tool; you may reason before each "
        "call. When you know the answer, call the answer tool with a short span, without explanation: "
        "this ends the episode.\n",
        "The search tool's source argument chooses where to search: {names}.\n",
        "You have at most {max_turns} turns.\nQuestion: {question}\n",
        "Background documents:\n{background}\n",
    )

    # ------------------------------------------------------------------ reading
    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        turn = self.read(text, sources)
        if turn.error is not None or not turn.calls:
            return turn.whole()
        first = turn.calls[0].parsed
        return first if first.action is None else ParsedTurn(first.action, first.think, issues=turn.issues)

    def read_text(self, text: str, sources: Sequence[str], max_calls: int) -> Turn:
        """A turn's text: an assistant message's JSON, or calls written in text."""
        stripped = text.strip()
        if stripped.startswith("{") and '"tool_calls"' in stripped[:_MESSAGE_SCAN]:
            message, end = _decoded(stripped)  # an error is not a dict
            if isinstance(message, dict) and "tool_calls" in message and not stripped[end:].strip():
                return self.read_message(message, sources, max_calls)
        thoughts = [(a, d) for a, _, c, d in blocks(text, THINK_OPEN, THINK_CLOSE) if c < d]  # closed ones
        found, issues = self._find(strip_spans(text, thoughts, None))
        content = strip_spans(text, [(a, b) for a, b, _ in found])
        think = _think_of(content)
        if not found:  # a think-only turn, or none of the env's
            return Turn(content, think, error=None if _think_only(text) and think else _NO_CALL)
        if len(found) == 1 and getattr(found[0][2], "cut", False):  # the turn ends inside its one call
            return Turn(content.strip(), think, error=found[0][2].reason, truncated=True)
        calls = tuple(self._call(obj, sources, think) for _, _, obj in found[: max_calls + 1])
        return Turn(
            content.strip(), think, calls, issues=tuple(issues), dropped=max(len(found) - max_calls - 1, 0)
        )

    def read_message(
        self, message: Mapping[str, Any], sources: Sequence[str], max_calls: int, max_chars: int | None = None
    ) -> Turn:
        """An assistant message dict (``max_chars``: the longest JSON of it read)."""
        if max_chars is not None:
            try:
                size = len(json.dumps(message, default=str))
            except (TypeError, ValueError, RecursionError) as exc:
                return Turn("", "", error=f"the message is not JSON-serialisable ({type(exc).__name__})")
            if size > max_chars:
                return Turn("", "", error=f"turn too long ({size} > {max_chars} characters)")
        content = "" if message.get("content") is None else message["content"]
        if not isinstance(content, str):
            return Turn("", "", error=f"the message's content must be a string, got {_kind(content)}")
        raw = message.get("tool_calls") or []
        if not isinstance(raw, list):
            return Turn(content, "", error=f"tool_calls must be an array, got {_kind(raw)}")
        if not raw:
            return self.read_text(content, sources, max_calls)  # calls written in the text itself
        think = _think_of(content)
        calls = tuple(self._call(entry, sources, think) for entry in raw[: max_calls + 1])
        return Turn(content, think, calls, dropped=max(len(raw) - max_calls - 1, 0))

    def _find(self, text: str) -> tuple[list[_Found], list[FormatIssue]]:
        """The calls of a turn's text (closed thoughts blanked out), in order, and the format
        issues of how they were written."""
        issues: list[FormatIssue] = []
        found: list[_Found] = []
        for start, a, b, end in blocks(text, _CALL_OPEN, _CALL_CLOSE, MAX_CALLS_READ):
            value = _value(text, a, b)
            if b == end:  # never closed: the turn ends inside it
                if isinstance(value, _BadJSON) and value.unfinished:
                    value.cut = True
                    value.reason = (
                        f"the turn ended inside <tool_call> (cut off at the length limit?): {value.reason}"
                    )
                elif not isinstance(value, (_Repaired, _BadJSON)):
                    issues.append(FormatIssue("unclosed_tool_call", "<tool_call> without </tool_call>"))
            found.append((start, end, value))
        if not found and "[TOOL_CALLS]" in text:
            found = _mistral(text)
        tag = text.find("<|python_tag|>")  # Llama 3.x: JSON after the tag, or the whole turn
        if not found and (tag >= 0 or text.lstrip()[:1] in ("{", "[")):
            values = _json_values(text, tag + len("<|python_tag|>") if tag >= 0 else 0)
            if isinstance(values, list) and (
                tag >= 0 or values and all(isinstance(v, (dict, list)) for v in values)
            ):
                found = [
                    (max(tag, 0), len(text), v) for o in values for v in (o if isinstance(o, list) else [o])
                ]
            elif tag < 0 and isinstance(values, JSONTextError) and values.reason == TOO_DEEP:
                found = [(0, len(text), _value(text, 0, len(text)))]
        if self.parse_mode == "lenient" and len(found) < MAX_CALLS_READ:
            bare = _bare_calls(strip_spans(text, [(a, b) for a, b, _ in found], None))
            if bare:
                issues.append(FormatIssue("bare_tool_call", "a JSON call without the template's markers"))
                found = sorted(found + bare, key=lambda f: f[0])
        if any(isinstance(v, _Repaired) for _, _, v in found):
            issues.append(FormatIssue("repaired_tool_call", "a call the turn ended inside, closed"))
            found = [(a, b, v.value if isinstance(v, _Repaired) else v) for a, b, v in found]
        return found, issues

    def _call(self, entry: Any, sources: Sequence[str], think: str) -> Call:
        """One call entry (hermes/llama/mistral object or OpenAI ``tool_calls`` entry) checked:
        its tool, its arguments and their types, the source a search names."""
        call_id = entry.get("id") if isinstance(entry, Mapping) and isinstance(entry.get("id"), str) else None

        def bad(name: str, args: Any, error: str) -> Call:
            return Call(name, args, call_id, ParsedTurn(None, think=think, error=error))

        if isinstance(entry, _BadJSON):
            return bad("", entry.text, f"malformed JSON in a tool call: {entry.reason}")
        if not isinstance(entry, Mapping):
            return bad("", entry, f"a tool call must be a JSON object, got {_kind(entry)}")
        fn: Mapping[str, Any] = entry["function"] if isinstance(entry.get("function"), Mapping) else entry
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            return bad("", fn, 'a tool call without a "name"')
        args: Any = fn.get("arguments", fn.get("parameters", {}))
        if isinstance(args, str):
            stripped = args.strip()
            try:
                args = decode(stripped)[0] if stripped else {}
            except JSONTextError as exc:
                return bad(
                    name, args, f"{name}: malformed JSON arguments: {exc.reason}: {quote(stripped, 80)}"
                )
        if name not in TOOL_NAMES:
            return bad(name, args, f"unknown tool {name[:40]!r}: the tools are {', '.join(TOOL_NAMES)}")
        if not isinstance(args, Mapping):
            return bad(name, args, f"{name}: the arguments must be a JSON object, got {_kind(args)}")
        required, how = _ARGUMENT[name]
        allowed = (required, "source") if name == "search" and routes(sources) else (required,)
        extra = ", ".join(repr(str(k)[:40]) for k in [k for k in args if k not in allowed][:3])
        if extra and self.parse_mode == "strict":
            return bad(name, args, f"{name}: unexpected argument {extra}; it takes {', '.join(allowed)}")
        issues = (FormatIssue("extra_argument", f"{name}: unexpected argument {extra}"),) if extra else ()
        value, source = args.get(required), args.get("source") if "source" in allowed else None
        if not isinstance(value, str):
            if required not in args:
                return bad(name, args, f"{name}: missing argument {required!r}: {how}")
            return bad(name, args, f"{name}: argument {required!r} must be a string, got {_kind(value)}")
        if not (value := " ".join(value.split())):
            return bad(name, args, f"{name}: empty {required!r}: {how}")
        if source is not None and not isinstance(source, str):
            return bad(name, args, f"search: argument 'source' must be a string, got {_kind(source)}")
        if source is not None and source not in sources:
            return bad(name, args, f"search: unknown source {source[:40]!r}; sources: {', '.join(sources)}")
        act = Answer(value, think) if name == "answer" else Search(value, think, source=source)
        return Call(name, args, call_id, ParsedTurn(act, think=think, issues=issues))

    def split_text(self, text: str) -> list[str]:
        """The model's turns of a rollout's hermes text: the ``<tool_response>`` blocks cut out."""
        return [t for t in cut_blocks(text, _RESPONSE_OPEN, _RESPONSE_CLOSE) if t.strip()]

    def _message_turn(self, message: Mapping[str, Any]) -> Any:
        return message if message.get("tool_calls") else super()._message_turn(message)

    # ------------------------------------------------------------------ the env's messages
    def assistant_message(self, turn: Turn) -> dict[str, Any]:
        out: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if turn.calls and turn.error is None:
            out["tool_calls"] = [c.message() for c in turn.calls]
        return out

    def reply(self, call: Call | None, text: str) -> dict[str, Any]:
        if call is None:
            return {"role": "user", "content": text}
        out: dict[str, Any] = {"role": "tool", "name": call.name or "unknown"}
        if call.id is not None:
            out["tool_call_id"] = call.id
        return {**out, "content": text}

    # ------------------------------------------------------------------ writing
    def render(self, action: Action) -> str:
        """Hermes text: the thought in ``<think>``, then one ``<tool_call>`` block (a
        :class:`Route` has no call: it raises ``KeyError``; use ``Search(q, source=...)``).

        Example:
            >>> print(ToolProtocol().render(Search("Oslo", think="hm")))
            <think>hm</think>
            <tool_call>
            {"name": "search", "arguments": {"query": "Oslo"}}
            </tool_call>
        """
        think = action.text if isinstance(action, Think) else action.think
        head = f"<think>{think}</think>" if think else ""
        if isinstance(action, Think):
            return head
        if isinstance(action, Route):
            raise KeyError(_ROUTE_ERROR)
        args: dict[str, Any] = {_ARGUMENT[action.kind][0]: getattr(action, ARGUMENT[action.kind])}
        if isinstance(action, Search) and action.source is not None:
            args["source"] = action.source
        call_json = dumps({"name": action.kind, "arguments": args})
        return "\n".join(p for p in (head, f"<tool_call>\n{call_json}\n</tool_call>") if p)

    def format_error(self, reason: str, turn: int, sources: Sequence[str] = ()) -> str:
        return f"Error: {reason}. Call search(query) to search or answer(answer) to answer."

    #: The last-turn notice: no search can run after this turn, so it asks for the answer call
    #: whatever the model knows (a tools turn without one ends the episode with no answer).
    LAST_TURN = (
        "This is your last turn: you cannot search any more. Call the answer tool now with your "
        "best short answer, even if you are not sure; without an answer call the episode ends "
        "with no answer."
    )

    def last_turn(self, observation: str, turn: int) -> str:
        return f"{observation}\n{self.LAST_TURN}" if observation else self.LAST_TURN

    def with_last_turn(self, messages: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
        """The step's messages, then the last-turn notice as a user message of its own (not
        inside a tool result, where a model reads it as data)."""
        return [*messages, {"role": "user", "content": self.LAST_TURN}]

    def route_action(self, source: str, think: str = "") -> Action:
        """A search of ``source`` for its name (there is no route tool: a search names its source)."""
        return Search(source, think, source=source)

    def assistant_text(self, message: Mapping[str, Any]) -> str:
        """An assistant message as hermes text: its content, then a ``<tool_call>`` block per call."""
        parts = [message.get("content") or ""]
        for call in message.get("tool_calls") or ():
            fn = call["function"]
            call_json = dumps({"name": fn["name"], "arguments": _arguments(fn["arguments"])})
            parts.append(f"<tool_call>\n{call_json}\n</tool_call>")
        return "\n".join(p for p in parts if p)

    def observation_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The text of a step's observation: each tool message in a hermes ``<tool_response>``
        block, any other message (a corrective or notice) as a line of its own."""
        tool = "<tool_response>\n{}\n</tool_response>\n"
        return "".join((tool if m["role"] == "tool" else "{}\n").format(m["content"]) for m in messages)


def step_calls(assistant: Mapping[str, Any], info: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The calls of one ``tools`` step, each beside what came of it (what a view of a run shows).

    Args:
        assistant: the step's assistant message (the last assistant message of the env's
            ``transcript``).
        info: the step's ``info`` (its ``calls`` and ``tool_messages``).

    Returns:
        One dict per call of the message, in order: ``name``, ``arguments`` (a dict when they
        are a JSON object, else as written), ``id`` (or ``None``), ``info`` (the call's info;
        ``None`` for a call not run because an earlier one failed or answered) and ``result``
        (the text of its tool message; ``None`` for an answer, which gets none).

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = gym.make("hopgym/Tiny-v1", protocol="tools")
        >>> _ = env.reset(seed=0)
        >>> two = '<tool_call>{"name": "search", "arguments": {"query": "Lorn"}}</tool_call>'
        >>> two += '<tool_call>{"name": "answer", "arguments": {"answer": "Oslo"}}</tool_call>'
        >>> *_, info = env.step(two)
        >>> calls = step_calls(env.unwrapped.transcript[-2], info)
        >>> [(c["name"], c["arguments"], c["info"]["action_type"]) for c in calls]
        [('search', {'query': 'Lorn'}, 'search'), ('answer', {'answer': 'Oslo'}, 'answer')]
        >>> calls[0]["result"].startswith("Doc 1 (Title: "), calls[1]["result"]
        (True, None)
    """
    ran = list(info.get("calls") or ())
    replies = iter([m for m in info.get("tool_messages") or () if m.get("role") == "tool"])
    out = []
    for i, call in enumerate(assistant.get("tool_calls") or ()):
        fn = call.get("function") or {}
        call_info = ran[i] if i < len(ran) else None
        # Every call gets a tool message but an answer that ran (it ends the episode).
        answered = call_info is not None and call_info.get("answer") is not None
        reply = None if answered else next(replies, None)
        out.append(
            {
                "name": fn.get("name") or "",
                "arguments": _arguments(fn.get("arguments")),
                "id": call.get("id"),
                "info": call_info,
                "result": None if reply is None else reply.get("content"),
            }
        )
    return out


def _arguments(args: Any) -> Any:
    """A call's arguments: a JSON string decoded, anything else (or a string that is not JSON:
    the call's error says what is wrong with it) as written."""
    value = _decoded(args.strip())[0] if isinstance(args, str) else args
    return args if isinstance(value, JSONTextError) else value


def _mistral(text: str) -> list[_Found]:
    """Mistral's ``[TOOL_CALLS][{…}, …]`` (v3) and ``[TOOL_CALLS]name[ARGS]{…}`` (v11+)."""
    out: list[_Found] = []
    for m in _MISTRAL_V11_RE.finditer(text):
        args, end = _decoded(text, len(text) - len(text[m.end() :].lstrip()))
        if isinstance(args, JSONTextError):
            return [*out, (m.start(), len(text), _BadJSON(text[m.end() :], args.reason))]
        out.append((m.start(), end, {"name": m.group(1), "arguments": args}))
    if out:
        return out
    at = text.index("[TOOL_CALLS]")
    body = text[at + len("[TOOL_CALLS]") :]
    obj, end = _decoded(text, len(text) - len(body.lstrip()))
    if isinstance(obj, JSONTextError):
        return [(at, len(text), _BadJSON(body, obj.reason))]
    return [(at, end, o) for o in (obj if isinstance(obj, list) else [obj])]
