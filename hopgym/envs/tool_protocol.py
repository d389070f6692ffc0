"""The ``tools`` protocol: OpenAI-style function calls (``search``, ``answer``) as actions.

Classes: :class:`ToolProtocol`, :class:`ToolCall` (one call as read), :class:`ToolTurn` (one
assistant turn as read). Functions: :func:`tool_specs`, :func:`fold_routes`, :func:`step_calls` (a
step's calls beside their results, for the views of a run). Constants: :data:`TOOL_NAMES`,
:data:`DEFAULT_MAX_TOOL_CALLS`.

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
- in ``lenient`` parse mode also a bare JSON call inside free text (Qwen2.5-0.5B writes it with and
  without the ``<tool_call>`` tags): a format issue (``bare_tool_call``), not an invalid turn.

The calls run in order, up to ``max_tool_calls``; an ``answer`` ends the episode. The first call
that cannot run (malformed JSON, an unknown tool, a missing, unexpected or mistyped argument, an
unknown source, one call too many) gets a tool-error message naming what was wrong, and the calls
after it are not run: the turn is invalid, like a malformed tag turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hopgym.corpora.types import Passage
from hopgym.envs.actions import Action, Answer, FormatIssue, ParsedTurn, Route, Search, Think
from hopgym.envs.protocols import PROTOCOLS, Protocol, _join_docs, _routes

__all__ = [
    "ToolProtocol",
    "ToolCall",
    "ToolTurn",
    "tool_specs",
    "fold_routes",
    "step_calls",
    "TOOL_NAMES",
    "DEFAULT_MAX_TOOL_CALLS",
]

#: The tools of the env, in the order :func:`tool_specs` lists them.
TOOL_NAMES: tuple[str, ...] = ("search", "answer")
#: The default of the ``max_tool_calls`` option: calls run per turn.
DEFAULT_MAX_TOOL_CALLS = 4


def tool_specs(sources: Mapping[str, str] | Sequence[str]) -> list[dict[str, Any]]:
    """The env's tools as OpenAI function schemas (what ``tools=`` takes).

    ``search`` takes a ``source`` (an enum of the source names) only when there are several
    sources: that is how an agent routes.

    Args:
        sources: the source names (a mapping: names to descriptions), the default first.

    Example:
        >>> [s["function"]["name"] for s in tool_specs(["local"])]
        ['search', 'answer']
        >>> search = tool_specs({"local": "", "web": "the web"})[0]["function"]
        >>> search["parameters"]["properties"]["source"]["enum"]
        ['local', 'web']
    """
    names = list(sources)
    query = {"type": "string", "description": "The search query: a few keywords."}
    props: dict[str, Any] = {"query": query}
    if len(names) > 1:
        desc = sources if isinstance(sources, Mapping) else {}
        listed = ", ".join(f"{n} ({desc[n]})" if desc.get(n) else n for n in names)
        props["source"] = {
            "type": "string",
            "enum": names,
            "description": f"Where to search: {listed}. Default: the last source searched "
            f"(at first {names[0]}).",
        }
    search = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search for documents about the query; returns the best new documents.",
            "parameters": {"type": "object", "properties": props, "required": ["query"]},
        },
    }
    answer = {
        "type": "function",
        "function": {
            "name": "answer",
            "description": "Give the final answer to the question; this ends the episode.",
            "parameters": {
                "type": "object",
                "properties": {
                    "answer": {"type": "string", "description": "The answer: a short span, no explanation."}
                },
                "required": ["answer"],
            },
        },
    }
    return [search, answer]


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call as read from a turn.

    Attributes:
        name: the tool's name as written (``""`` when none could be read).
        arguments: the arguments as written (a dict when they parsed, else the raw value).
        id: the call's id, when it had one (structured messages, Mistral).
        parsed: the call as an action (a :class:`ParsedTurn` with ``action`` or ``error``).
    """

    name: str
    arguments: Any
    id: str | None
    parsed: ParsedTurn

    def message(self) -> dict[str, Any]:
        """The call as an OpenAI ``tool_calls`` entry (arguments as a JSON string)."""
        args = self.arguments if isinstance(self.arguments, str) else _dumps(self.arguments)
        out: dict[str, Any] = {"type": "function", "function": {"name": self.name, "arguments": args}}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(frozen=True, slots=True)
class ToolTurn:
    """One assistant turn as read: free text, calls, and what was wrong with the turn as a whole.

    Attributes:
        content: the text outside the calls (the reasoning, ``<think>`` included).
        think: the reasoning (inside ``<think>`` if there is one, else the text outside the calls).
        calls: the calls, in order (at most ``max_tool_calls + 1``: one too many is kept to be
            refused).
        error: a turn-level error (no call at all, non-JSON-object message): no call runs.
        issues: format issues read past (lenient mode).
        truncated: the turn ends inside an unfinished call.
    """

    content: str
    think: str
    calls: tuple[ToolCall, ...] = ()
    error: str | None = None
    issues: tuple[FormatIssue, ...] = ()
    truncated: bool = False
    dropped: int = field(default=0)  # calls beyond the one-too-many kept in ``calls``


_THINK_RE = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_CLOSED_THINK_RE = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_HERMES_RE = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
_MISTRAL_V11_RE = re.compile(r"\[TOOL_CALLS\]\s*([A-Za-z_][\w.-]*)\s*\[ARGS\]")
_DECODER = json.JSONDecoder()
_ROUTE_ERROR = "there is no route tool: pass search a source to search there"
_NO_CALL = "no tool call: call search(query) to search or answer(answer) to answer"


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


class ToolProtocol(Protocol):
    """OpenAI-style tool calls: ``search(query, source?)`` and ``answer(answer)``.

    :meth:`read` reads a whole turn (every call); :meth:`parse`, the :class:`Protocol` hook, gives
    its first call (what a batched search prefetches). Observations are tool messages; the env
    shows their text in hermes ``<tool_response>`` blocks and keeps the messages themselves in
    its transcript (an OpenAI message list).

    Example:
        >>> p = ToolProtocol()
        >>> call = '<tool_call>{"name": "search", "arguments": {"query": "Oslo"}}</tool_call>'
        >>> turn = p.read("<think>hm</think>" + call, ["local"])
        >>> turn.think, [c.parsed.action for c in turn.calls]
        ('hm', [Search(query='Oslo', think='hm')])
        >>> p.read('<tool_call>{"name": "serch"}</tool_call>', ["local"]).calls[0].parsed.error
        "unknown tool 'serch': the tools are search, answer"
    """

    name = "tools"
    stop = ()

    # ------------------------------------------------------------------ reading
    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        turn = self.read(text, sources)
        if turn.error is not None:
            return ParsedTurn(None, think=turn.think, error=turn.error, truncated=turn.truncated)
        if not turn.calls:
            return ParsedTurn(Think(turn.think), think=turn.think)
        first = turn.calls[0].parsed
        return first if first.action is None else ParsedTurn(first.action, first.think, issues=turn.issues)

    def read(self, action: Any, sources: Sequence[str], max_calls: int = DEFAULT_MAX_TOOL_CALLS) -> ToolTurn:
        """Read one turn in any accepted form (see the module docstring); never raises.

        Args:
            action: model text, an assistant message dict (or its JSON string), or a structured
                :class:`~hopgym.envs.actions.Search` / :class:`~hopgym.envs.actions.Answer` /
                :class:`~hopgym.envs.actions.Think`.
            sources: the env's source names.
            max_calls: the calls that may run; one more is kept (to be refused), the rest counted.
        """
        if isinstance(action, Route):
            return ToolTurn("", action.think, error=_ROUTE_ERROR)
        if isinstance(action, (Think, Search, Answer)):
            action = self.render(action)
        if isinstance(action, str):
            stripped = action.strip()
            if stripped.startswith("{") and '"tool_calls"' in stripped[:200_000]:
                try:
                    message = json.loads(stripped)
                except ValueError:
                    message = None
                if isinstance(message, dict) and "tool_calls" in message:
                    return self._read_message(message, sources, max_calls)
            return self._read_text(action, sources, max_calls)
        if isinstance(action, Mapping):
            return self._read_message(action, sources, max_calls)
        return ToolTurn(
            "", "", error=f"a turn must be a string or a message dict, got {type(action).__name__}"
        )

    def _read_message(self, message: Mapping[str, Any], sources: Sequence[str], max_calls: int) -> ToolTurn:
        content = message.get("content")
        if content is None:
            content = ""
        if not isinstance(content, str):
            return ToolTurn("", "", error=f"the message's content must be a string, got {_kind(content)}")
        raw = message.get("tool_calls") or []
        if not isinstance(raw, list):
            return ToolTurn(content, "", error=f"tool_calls must be an array, got {_kind(raw)}")
        think = _think_of(content)
        if not raw:
            turn = self._read_text(content, sources, max_calls)  # calls written in the text itself
            return turn
        calls: list[ToolCall] = []
        for entry in raw[: max_calls + 1]:
            call_id = entry.get("id") if isinstance(entry, Mapping) else None
            call_id = call_id if isinstance(call_id, str) else None
            calls.append(self._call(entry, sources, think, call_id))
        return ToolTurn(content, think, tuple(calls), dropped=max(len(raw) - max_calls - 1, 0))

    def _read_text(self, text: str, sources: Sequence[str], max_calls: int) -> ToolTurn:
        lenient = self.parse_mode == "lenient"
        issues: list[FormatIssue] = []
        found: list[tuple[int, int, Any, str | None]] = []  # (start, end, json or error text, id)
        truncated = False
        # A call inside a closed <think>…</think> is a thought about a call, not a call (as an
        # action inside <think> is under ``tags``): calls are looked for in the text with the
        # closed thoughts blanked out (same length, so the spans still index ``text``).
        text_in = text
        text = _CLOSED_THINK_RE.sub(lambda m: " " * len(m.group(0)), text)
        for m in _HERMES_RE.finditer(text):
            if not m.group(2):  # an unclosed <tool_call> at the end of the turn
                try:
                    found.append((m.start(), m.end(), json.loads(m.group(1)), None))
                    issues.append(FormatIssue("unclosed_tool_call", "<tool_call> without </tool_call>"))
                except ValueError:
                    truncated = True
                continue
            found.append((m.start(), m.end(), _loads(m.group(1)), None))
        if not found and "[TOOL_CALLS]" in text:
            found = _mistral(text)
        if not found and "<|python_tag|>" in text:
            at = text.index("<|python_tag|>")
            found = [(at, len(text), obj, None) for obj in _json_objects(text[at + len("<|python_tag|>") :])]
        if not found:
            objs = _json_objects(text.strip())
            if objs and all(isinstance(o, (dict, list)) for o in objs) and _whole_json(text):
                found = [(0, len(text), o, None) for o in _flatten(objs)]
            elif lenient:
                found = _embedded_calls(text)
                if found:
                    issues.append(FormatIssue("bare_tool_call", "a JSON call without the template's markers"))
        text = content = text_in
        for start, end in sorted({(a, b) for a, b, *_ in found}, reverse=True):
            content = content[:start] + content[end:]
        think = _think_of(content)
        if truncated and not found:
            return ToolTurn(
                text,
                think,
                error="the turn ended inside <tool_call> (cut off at the length limit?)",
                truncated=True,
            )
        if not found:
            if re.search(r"<think>.*?\S.*?</think>\s*$", text, re.DOTALL | re.IGNORECASE) and think:
                return ToolTurn(content, think)  # a think-only turn
            return ToolTurn(content, think, error=_NO_CALL)
        calls = [self._call(obj, sources, think, call_id) for _, _, obj, call_id in found[: max_calls + 1]]
        return ToolTurn(
            content.strip(),
            think,
            tuple(calls),
            issues=tuple(issues),
            dropped=max(len(found) - max_calls - 1, 0),
        )

    def _call(self, entry: Any, sources: Sequence[str], think: str, call_id: str | None) -> ToolCall:
        """One call entry (hermes/llama/mistral object or OpenAI ``tool_calls`` entry) checked."""
        if isinstance(entry, _BadJSON):
            return ToolCall(
                "",
                entry.text,
                call_id,
                ParsedTurn(None, think=think, error=f"malformed JSON in a tool call: {entry.reason}"),
            )
        if not isinstance(entry, Mapping):
            return ToolCall(
                "",
                entry,
                call_id,
                ParsedTurn(None, think=think, error=f"a tool call must be a JSON object, got {_kind(entry)}"),
            )
        inner = entry.get("function")
        fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else entry
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            return ToolCall(
                "", fn, call_id, ParsedTurn(None, think=think, error='a tool call without a "name"')
            )
        args: Any = fn.get("arguments", fn.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError as exc:
                return ToolCall(
                    name,
                    args,
                    call_id,
                    ParsedTurn(None, think=think, error=f"{name}: malformed JSON arguments: {exc}"),
                )
        return ToolCall(name, args, call_id, self._check(name, args, sources, think))

    def _check(self, name: str, args: Any, sources: Sequence[str], think: str) -> ParsedTurn:
        def bad(error: str) -> ParsedTurn:
            return ParsedTurn(None, think=think, error=error)

        if name not in TOOL_NAMES:
            return bad(f"unknown tool {name[:40]!r}: the tools are {', '.join(TOOL_NAMES)}")
        if not isinstance(args, Mapping):
            return bad(f"{name}: the arguments must be a JSON object, got {_kind(args)}")
        allowed = (
            ("query", "source")
            if name == "search" and _routes(sources)
            else (name if name == "answer" else "query",)
        )
        required = "answer" if name == "answer" else "query"
        extra = [k for k in args if k not in allowed]
        issues: tuple[FormatIssue, ...] = ()
        if extra:
            shown = ", ".join(repr(str(k)[:40]) for k in extra[:3])
            if self.parse_mode == "strict":
                return bad(f"{name}: unexpected argument {shown}; it takes {', '.join(allowed)}")
            issues = (FormatIssue("extra_argument", f"{name}: unexpected argument {shown}"),)
        if required not in args:
            return bad(f"{name}: missing argument {required!r}")
        value = args[required]
        if not isinstance(value, str):
            return bad(f"{name}: argument {required!r} must be a string, got {_kind(value)}")
        value = " ".join(value.split())
        if not value:
            return bad(f"{name}: empty {required!r}")
        if name == "answer":
            return ParsedTurn(Answer(value, think), think=think, issues=issues)
        source = args.get("source") if "source" in allowed else None
        if source is not None:
            if not isinstance(source, str):
                return bad(f"search: argument 'source' must be a string, got {_kind(source)}")
            if source not in sources:
                return bad(f"search: unknown source {source[:40]!r}; sources: {', '.join(sources)}")
        return ParsedTurn(Search(value, think, source=source), think=think, issues=issues)

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
        call = self.call_of(action)
        body = _dumps(
            {"name": call["function"]["name"], "arguments": json.loads(call["function"]["arguments"])}
        )
        return f"{head}\n<tool_call>\n{body}\n</tool_call>".lstrip("\n")

    @staticmethod
    def call_of(action: Search | Route | Answer) -> dict[str, Any]:
        """The OpenAI ``tool_calls`` entry (no id) that performs ``action``; a :class:`Route`
        is a search of its source for nothing, so it has none: it raises ``KeyError``."""
        if isinstance(action, Search):
            args: dict[str, Any] = {"query": action.query}
            if action.source is not None:
                args["source"] = action.source
            return {"type": "function", "function": {"name": "search", "arguments": _dumps(args)}}
        if isinstance(action, Answer):
            return {
                "type": "function",
                "function": {"name": "answer", "arguments": _dumps({"answer": action.text})},
            }
        raise KeyError(_ROUTE_ERROR)

    def prompt(self, question: str, sources: dict[str, str], max_turns: int, background: str = "") -> str:
        lines = [
            "Answer the question by searching step by step with the search tool; you may reason "
            "before each call. When you know the answer, call the answer tool with a short span, "
            "without explanation: this ends the episode.",
        ]
        if len(sources) > 1:
            names = ", ".join(f"{n} ({d})" if d else n for n, d in sources.items())
            lines.append(f"The search tool's source argument chooses where to search: {names}.")
        lines += [f"You have at most {max_turns} turns.", f"Question: {question}"]
        text = "\n".join(lines) + "\n"
        if background:
            text += f"Background documents:\n{background}\n"
        return text

    def format_documents(
        self, docs: Sequence[Passage], doc_chars: int | None, turn: int, note: str = ""
    ) -> str:
        body = _join_docs(docs, doc_chars, "Doc {i} (Title: {title}) {text}")
        return f"{note}\n{body}" if note else body

    def format_notice(self, message: str, turn: int) -> str:
        return message

    def format_error(self, reason: str, turn: int, sources: Sequence[str] = ()) -> str:
        return f"Error: {reason}. Call search(query) to search or answer(answer) to answer."

    LAST_TURN = "This is your last turn: call the answer tool now with a short answer."

    def last_turn(self, observation: str, turn: int) -> str:
        return f"{observation}\n{self.LAST_TURN}" if observation else self.LAST_TURN

    @staticmethod
    def assistant_text(message: Mapping[str, Any]) -> str:
        """An assistant message as hermes text: its content, then a ``<tool_call>`` block per call."""
        parts = [message.get("content") or ""]
        for call in message.get("tool_calls") or ():
            fn = call["function"]
            try:
                args = json.loads(fn["arguments"])
            except ValueError:
                args = fn["arguments"]
            parts.append(f"<tool_call>\n{_dumps({'name': fn['name'], 'arguments': args})}\n</tool_call>")
        return "\n".join(p for p in parts if p)

    @staticmethod
    def observation_text(messages: Sequence[Mapping[str, Any]]) -> str:
        """The text of a step's observation: each tool message in a hermes ``<tool_response>``
        block, any other message (a corrective or notice) as a line of its own."""
        out = []
        for m in messages:
            if m["role"] == "tool":
                out.append(f"<tool_response>\n{m['content']}\n</tool_response>\n")
            else:
                out.append(f"{m['content']}\n")
        return "".join(out)


def fold_routes(actions: Iterable[Any]) -> list[Any]:
    """An action list for the ``tools`` protocol: each :class:`Route` folded into the next
    :class:`Search` as its ``source`` (there is no route tool); other items are kept.

    Example:
        >>> fold_routes([Route("web"), Search("x"), Answer("y")])
        [Search(query='x', think=''), Answer(text='y', think='')]
        >>> _[0].source
        'web'
    """
    out: list[Any] = []
    pending: Route | None = None
    for act in actions:
        if isinstance(act, Route):
            pending = act
            continue
        if isinstance(act, Search) and pending is not None and act.source is None:
            act = Search(act.query, act.think or pending.think, source=pending.source)
        pending = None if isinstance(act, Search) else pending
        out.append(act)
    return out


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
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass  # shown as written: the call's error says what is wrong with it
        call_info = ran[i] if i < len(ran) else None
        # Every call gets a tool message but an answer that ran (it ends the episode).
        answered = call_info is not None and call_info.get("answer") is not None
        reply = None if answered else next(replies, None)
        out.append(
            {
                "name": fn.get("name") or "",
                "arguments": args,
                "id": call.get("id"),
                "info": call_info,
                "result": None if reply is None else reply.get("content"),
            }
        )
    return out


class _BadJSON:
    """A call body that is not valid JSON (kept to report it)."""

    def __init__(self, text: str, reason: str) -> None:
        self.text, self.reason = text, reason


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        return _BadJSON(text[:200], str(exc))


def _think_of(content: str) -> str:
    m = _THINK_RE.search(content)
    if m is not None:
        return " ".join(m.group(1).split())
    return " ".join(re.sub(r"</?think>", " ", content).split())


def _json_objects(text: str) -> list[Any]:
    """The JSON values of ``text`` separated by white space or ``;`` (Llama 3.x); [] if any
    part is not JSON."""
    out, pos, text = [], 0, text.strip()
    while pos < len(text):
        try:
            obj, pos = _DECODER.raw_decode(text, pos)
        except ValueError:
            return []
        out.append(obj)
        while pos < len(text) and (text[pos].isspace() or text[pos] == ";"):
            pos += 1
    return out


def _whole_json(text: str) -> bool:
    return text.strip()[:1] in ("{", "[")


def _flatten(objs: list[Any]) -> list[Any]:
    out: list[Any] = []
    for o in objs:
        out.extend(o if isinstance(o, list) else [o])
    return out


def _is_call(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("name"), str)
        and ("arguments" in obj or "parameters" in obj)
    )


def _embedded_calls(text: str) -> list[tuple[int, int, Any, str | None]]:
    """Bare JSON calls inside free text (lenient): each ``{`` that opens a call object."""
    out: list[tuple[int, int, Any, str | None]] = []
    pos = text.find("{")
    while pos >= 0:
        try:
            obj, end = _DECODER.raw_decode(text, pos)
        except ValueError:
            pos = text.find("{", pos + 1)
            continue
        if _is_call(obj):
            out.append((pos, end, obj, None))
            pos = text.find("{", end)
        else:
            pos = text.find("{", pos + 1)
    return out


def _mistral(text: str) -> list[tuple[int, int, Any, str | None]]:
    """Mistral's ``[TOOL_CALLS][{…}, …]`` (v3) and ``[TOOL_CALLS]name[ARGS]{…}`` (v11+)."""
    at = text.index("[TOOL_CALLS]")
    v11 = list(_MISTRAL_V11_RE.finditer(text))
    if v11:
        out: list[tuple[int, int, Any, str | None]] = []
        for m in v11:
            try:
                args, end = _DECODER.raw_decode(text, m.end())
            except ValueError as exc:
                out.append((m.start(), len(text), _BadJSON(text[m.end() : m.end() + 200], str(exc)), None))
                break
            out.append((m.start(), end, {"name": m.group(1), "arguments": args}, None))
        return out
    body = text[at + len("[TOOL_CALLS]") :]
    try:
        obj, end = _DECODER.raw_decode(body.lstrip())
    except ValueError as exc:
        return [(at, len(text), _BadJSON(body[:200], str(exc)), None)]
    stop = at + len("[TOOL_CALLS]") + (len(body) - len(body.lstrip())) + end
    items = obj if isinstance(obj, list) else [obj]
    return [
        (at, stop, o, o.get("id") if isinstance(o, dict) and isinstance(o.get("id"), str) else None)
        for o in items
    ]


PROTOCOLS["tools"] = ToolProtocol
