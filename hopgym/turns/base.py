"""The turn grammar's core: :class:`Protocol` (the interface every protocol implements),
:class:`Turn` and :class:`Call` (a turn as read), :data:`PARSE_MODES`, :data:`ANY_SOURCE`.

A *turn* is what a model writes in one step. A protocol reads it into a :class:`Turn`: the
text the env records (``content``), the reasoning (``think``), the actions as a tuple of
:class:`Call` (one for ``tags`` and ``r3``; any number of tool calls for ``tools``), and, when
the turn as a whole cannot be read, a turn-level ``error``. Each call holds its
:class:`~hopgym.turns.actions.ParsedTurn`: an action, or the ``error`` that says why it cannot run.

The one rule every reader follows (the env's step, the reward functions, the adapters): the calls
of a turn run in order; the first call that cannot run is refused with a corrective observation
and the calls after it are not run; an ``answer`` ends the episode, and the calls after it are not
run either (:meth:`Turn.answer`).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from hopgym.corpora.types import Passage
from hopgym.errors import InvalidOptionError
from hopgym.turns.actions import Action, Answer, FormatIssue, ParsedTurn, Route, Search, Think, fast_init
from hopgym.turns.json_scan import dumps
from hopgym.turns.specs import tool_specs

__all__ = [
    "Protocol",
    "Turn",
    "Call",
    "check_parse_mode",
    "PARSE_MODES",
    "ANY_SOURCE",
    "DEFAULT_MAX_TOOL_CALLS",
]

#: How turns are read: ``"lenient"`` (default; flaws become format issues) or ``"strict"``.
PARSE_MODES: tuple[str, ...] = ("lenient", "strict")
#: The default of the ``max_tool_calls`` option: calls run per turn.
DEFAULT_MAX_TOOL_CALLS = 4
#: The most tags (or labels) a turn may hold: a turn has a handful; more is degenerate text.
MAX_TAGS = 256


class _AnySource:
    """The sources of a reader that knows no env (a reward function): every name is one, and
    there are several (so routing is allowed)."""

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __repr__(self) -> str:
        return "ANY_SOURCE"


#: Pass as ``sources`` to read turns without an env: any source name is accepted.
ANY_SOURCE: Sequence[str] = _AnySource()  # type: ignore[assignment]


def check_parse_mode(parse: object, *, optional: bool = False) -> None:
    """Refuse anything but a parse mode (``optional``: ``None`` too), in one wording.

    Raises:
        hopgym.errors.InvalidOptionError: not one of :data:`PARSE_MODES`.

    Example:
        >>> check_parse_mode("loose")
        Traceback (most recent call last):
            ...
        hopgym.errors.InvalidOptionError: parse must be one of ['lenient', 'strict'], got 'loose'
    """
    if parse not in PARSE_MODES and not (optional and parse is None):
        allowed = f"None or one of {list(PARSE_MODES)}" if optional else f"one of {list(PARSE_MODES)}"
        raise InvalidOptionError(f"parse must be {allowed}, got {parse!r}")


@fast_init
@dataclass(frozen=True, slots=True)
class Call:
    """One action of a turn as read (a tool call under ``tools``; the action block otherwise).

    Attributes:
        name: the action's or tool's name as written (``""`` when none could be read).
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
        args = self.arguments if isinstance(self.arguments, str) else dumps(self.arguments)
        out: dict[str, Any] = {"type": "function", "function": {"name": self.name, "arguments": args}}
        if self.id is not None:
            out["id"] = self.id
        return out


@dataclass(slots=True)  # not frozen: a frozen dataclass sets each field through object.__setattr__
class Turn:
    """One model turn as read.

    Attributes:
        content: the text the env records as the assistant message's content (the whole turn
            under ``tags``/``r3``; the text outside the calls under ``tools``).
        think: the reasoning.
        calls: the actions, in order (at most ``max_calls + 1``: one too many is kept to be
            refused). Empty for a think-only turn and for a turn-level error.
        error: why the turn as a whole cannot be read (no action, two different actions, an
            unreadable message...); ``None`` otherwise.
        issues: format issues of the turn read past (lenient mode); a call's own issues are in
            its ``parsed.issues``.
        truncated: the turn ends inside an unfinished thought, action or call (cut at the
            model's token limit?).
        dropped: calls beyond those kept in ``calls``.
    """

    content: str
    think: str
    calls: tuple[Call, ...] = ()
    error: str | None = None
    issues: tuple[FormatIssue, ...] = ()
    truncated: bool = False
    dropped: int = field(default=0)
    #: The turn as one action (a one-action protocol's parse), when it was read as one.
    parsed: ParsedTurn | None = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, content: str, parsed: ParsedTurn) -> Turn:
        """The turn of a one-action protocol (``tags``, ``r3``) from what its parser read."""
        act = parsed.action
        if act is None:
            return cls(content, parsed.think, error=parsed.error, truncated=parsed.truncated, parsed=parsed)
        if isinstance(act, Think):
            return cls(content, parsed.think, (), None, parsed.issues, False, 0, parsed)
        return cls(content, parsed.think, (Call(act.kind, getattr(act, ARGUMENT[act.kind]), None, parsed),))

    def whole(self) -> ParsedTurn:
        """A turn without calls as one :class:`ParsedTurn`: its error, or a think step."""
        if self.parsed is not None:
            return self.parsed
        act = None if self.error is not None else Think(self.think)
        return ParsedTurn(act, self.think, self.error, self.issues, self.truncated)

    def run(self, max_calls: int = DEFAULT_MAX_TOOL_CALLS) -> Iterator[tuple[Call, ParsedTurn]]:
        """The calls the env runs, each with what it runs as: in order, until one cannot run
        (it is yielded with its error, then nothing more) or one answers (the last yielded);
        a call beyond ``max_calls`` is refused."""
        for i, call in enumerate(self.calls):
            parsed = call.parsed
            if i >= max_calls:
                n = len(self.calls) + self.dropped
                error = f"too many tool calls in one turn ({n} > {max_calls}): only the first {max_calls} ran"
                parsed = ParsedTurn(None, self.think, error)
            yield call, parsed
            if parsed.action is None or isinstance(parsed.action, Answer):
                return

    def _last(self, max_calls: int) -> ParsedTurn | None:
        """What the last call run ran as: the one that answered or could not run, if any."""
        last = deque(self.run(max_calls), maxlen=1)
        return last[0][1] if last else None

    def answer(self, max_calls: int = DEFAULT_MAX_TOOL_CALLS) -> str | None:
        """The answer this turn ends the episode with, as the env takes it (``None``: none)."""
        last = None if self.error is not None else self._last(max_calls)
        return last.action.text if last is not None and isinstance(last.action, Answer) else None

    def invalid(self, max_calls: int = DEFAULT_MAX_TOOL_CALLS) -> str | None:
        """Why the env's step of this turn is invalid (``info["invalid_action"]``), or ``None``:
        the turn-level error, else the error of the call the run stopped at."""
        last = None if self.error is not None else self._last(max_calls)
        return self.error if last is None else last.error

    def all_issues(self, max_calls: int = DEFAULT_MAX_TOOL_CALLS) -> tuple[FormatIssue, ...]:
        """The turn's format issues and those of the calls that run."""
        return self.issues + tuple(i for _, p in self.run(max_calls) for i in p.issues)


#: The field of each action that holds what it acts on: the query, the source, the answer or the thought.
ARGUMENT = {"search": "query", "route": "source", "answer": "text", "think": "text"}
#: A thought's opening and closing tags (any case), as every protocol that thinks in tags writes them.
THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)
_WORD = re.compile(r"\S+")


def strip_spans(text: str, spans: Iterable[tuple[int, int]], fill: str | None = "") -> str:
    """``text`` with each span (overlapping ones once) replaced by ``fill``, or by as many
    spaces as it is long when ``fill`` is ``None`` (positions then still index ``text``)."""
    out, pos = [], 0
    for a, b in sorted(spans):
        if b <= pos:
            continue
        out += [text[pos : max(a, pos)], " " * (b - max(a, pos)) if fill is None else fill]
        pos = b
    out.append(text[pos:])
    return "".join(out)


def blocks(
    text: str, opening: re.Pattern[str], closing: re.Pattern[str], limit: int | None = None
) -> list[tuple[int, int, int, int]]:
    """``(start, body_start, body_end, end)`` of each ``opening … closing`` block, left to right
    (the first ``limit``); a last block never closed runs to the end (``body_end == end ==
    len(text)``). Linear."""
    out: list[tuple[int, int, int, int]] = []
    pos = 0
    while (limit is None or len(out) < limit) and (m := opening.search(text, pos)) is not None:
        c = closing.search(text, m.end())
        if c is None:
            out.append((m.start(), m.end(), len(text), len(text)))
            break
        out.append((m.start(), m.end(), c.start(), c.end()))
        pos = c.end()
    return out


def without_thoughts(text: str) -> str:
    """``text`` without its ``<think>…</think>`` blocks (an unclosed one to the end), in one pass.

    Example:
        >>> without_thoughts("<think>hm</think>yes<think>cut")
        'yes'
    """
    return strip_spans(text, [(a, d) for a, _, _, d in blocks(text, THINK_OPEN, THINK_CLOSE)])


def between(text: str, spans: Sequence[tuple[int, int]]) -> list[str]:
    """The pieces of ``text`` before, between and after ``spans`` (in order, not overlapping)."""
    cuts = [0, *[i for span in spans for i in span], len(text)]
    return [text[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True)]


def cut_blocks(text: str, opening: re.Pattern[str], closing: re.Pattern[str]) -> list[str]:
    """``text`` cut at each block from ``opening`` to the first ``closing`` after it (to the
    end when none), the blocks dropped: the pieces between them. One pass (linear).
    """
    found = blocks(text, opening, closing)
    pieces = between(text, [(a, d) for a, _, _, d in found])
    return pieces[:-1] if found and found[-1][2] == found[-1][3] else pieces  # the last never closed


def split_docs(body: str, first: str, between: str, sep: str, count: int) -> list[tuple[str, str]]:
    """The ``(title, text)`` pairs of ``count`` documents that :func:`join_docs` joined: the body
    starts with ``first``, the next ones with the pattern ``between``, a title ends at ``sep``
    (``[]`` when that is not so)."""
    pairs = [p.split(sep, 1) for p in re.split(between, body[len(first) :])] if body.startswith(first) else []
    if len(pairs) != count or any(len(p) != 2 for p in pairs):
        return []
    return [(title.strip(), text.strip()) for title, text in pairs]


def join_docs(docs: Sequence[Passage], doc_chars: int | None, fmt: str | None = None) -> str:
    """The documents of an observation, each written with ``fmt.format(k, title, text)`` (``k``
    from 1; by default as Search-R1 writes them, ``Doc 1 (Title: T) text``), joined by newlines
    and cut at ``doc_chars``."""
    if fmt is None:  # the usual case, in an f-string: no call per document
        body = "\n".join([f"Doc {i} (Title: {d.title}) {d.text}" for i, d in enumerate(docs, 1)])
    else:
        body = "\n".join([fmt.format(i, d.title, d.text) for i, d in enumerate(docs, 1)])
    if doc_chars is not None and len(body) > doc_chars:
        # R3-RAG cuts the joined document string, not each document.
        body = body[:doc_chars].rstrip() + " …"
    return body


def quote(text: str, limit: int = 40) -> str:
    """``text`` with white space collapsed, cut at ``limit`` characters, as a Python literal
    (only the words that show are read: a long turn is not split whole).

    Example:
        >>> quote("  a  b " + "c " * 100, 6)
        "'a b c …'"
    """
    words, n = [], -1
    for m in _WORD.finditer(text):
        words.append(m.group())
        n += len(words[-1]) + 1
        if n > limit:
            break
    text = " ".join(words)
    return repr(text if len(text) <= limit else text[:limit] + "…")


def routes(sources: Sequence[str]) -> bool:
    """Whether an env with these sources can route: more than one source (a container with no
    length, such as :data:`ANY_SOURCE`, counts as several)."""
    return not hasattr(sources, "__len__") or len(sources) > 1


def over_limit(text: str, patterns: Iterable[re.Pattern[str]], what: str) -> ParsedTurn | None:
    """The refusal of a turn with more than :data:`MAX_TAGS` matches of one of ``patterns``
    (degenerate text; the count stops at the limit, so such a turn costs little), or ``None``."""
    if any(next(islice(pattern.finditer(text), MAX_TAGS, None), None) for pattern in patterns):
        return ParsedTurn(None, error=f"too many {what} (more than {MAX_TAGS}): write one step per turn")
    return None


class Reading:
    """What a text protocol's parser has read of a turn: its format issues (the first of each
    code), its thoughts and its action blocks ``(kind, body)``."""

    def __init__(self) -> None:
        self.issues: dict[str, FormatIssue] = {}
        self.thoughts: list[str] = []
        self.acts: list[tuple[str, str]] = []

    def issue(self, code: str, detail: str) -> None:
        self.issues.setdefault(code, FormatIssue(code, detail))

    def action(self, think: str, sources: Sequence[str], unit: str, duplicate: str | None) -> ParsedTurn:
        """The turn of the action blocks (at least one): several different ones in one ``unit``
        (turn, step) are refused; one written again is the format issue ``duplicate`` (its
        detail), or refused when that is ``None``."""
        acts, issues = self.acts, tuple(self.issues.values())
        if len(dict.fromkeys(acts)) > 1 or (len(acts) > 1 and duplicate is None):
            error = f"two actions in one {unit} ({', '.join(k for k, _ in acts)}): write exactly one"
            return ParsedTurn(None, think=think, error=error)
        if len(acts) > 1:
            issues += (FormatIssue("duplicate_action", str(duplicate)),)
        return make_action(*acts[0], think, sources, issues)


def make_action(
    kind: str, body: str, think: str, sources: Sequence[str], issues: tuple[FormatIssue, ...] = ()
) -> ParsedTurn:
    """The action of a ``kind`` block with ``body`` (or why it cannot run) and its ``issues``."""
    body = " ".join(body.split())
    if kind == "route" and body not in sources:
        error = f"unknown source {body!r}; sources: {', '.join(sources)}"
    elif not body and kind != "route":
        error = "empty search query" if kind == "search" else "empty answer"
    else:
        cls = Search if kind == "search" else Route if kind == "route" else Answer
        return ParsedTurn(cls(body, think), think=think, issues=issues)
    return ParsedTurn(None, think=think, error=error)


class Protocol:
    """Base class of the turn formats. Subclasses set ``name`` and ``stop`` and override the hooks.

    A protocol owns everything about a turn: what the model is told (:meth:`prompt`,
    :attr:`system_prompt`, :meth:`tool_specs`), how it thinks and answers (:meth:`render`, whose
    ``Think``/``Answer`` renderings give the delimiters), where its generation stops
    (:attr:`stop`), how a turn is read (:meth:`parse`, :meth:`read`), how a whole completion is
    split into turns and scored (:meth:`rollout_turns`, :meth:`extract_answer`,
    :meth:`is_well_formed`) and how the env's replies are written (``format_*``, :meth:`reply`,
    :meth:`observation_text`).

    Args:
        parse: the parse mode, one of :data:`PARSE_MODES`.

    Raises:
        hopgym.errors.InvalidOptionError: for an unknown parse mode.
    """

    name: str = ""
    #: Strings at which an LLM's generation of one turn should stop (kept in the output when
    #: they close a tag; see :func:`hopgym.backends.stops.stop_is_kept`).
    stop: tuple[str, ...] = ()
    #: The default system prompt of an LLM agent (``""``: none).
    system_prompt: str = ""
    #: The system prompt of the closed-book baseline (``""``: the protocol has none).
    closed_book_prompt: str = ""
    #: Whether a turn may be an assistant message dict (tool calls), not only text.
    accepts_messages: bool = False
    #: Whether the model is given the env's tools as chat tools (``tools=`` of a chat template
    #: or an OpenAI-compatible server) and acts by calling them: :meth:`tool_specs` lists them,
    #: the env's replies are tool messages, and a route is a search's ``source``
    #: (:meth:`route_action`). Agents, trainers and adapters ask this, not the protocol's name.
    chat_tools: bool = False
    #: The last-turn notice (see :meth:`last_turn`).
    LAST_TURN: str = ""
    #: The first observation (:meth:`prompt`), in four parts, each ending its lines: the
    #: instructions before the routing line; the routing line, shown with several sources
    #: (``{names}``: the sources, ``{first}``: the default one); the rest (``{max_turns}``,
    #: ``{question}``); the background documents, when there are some (``{background}``).
    PROMPT: tuple[str, str, str, str] = ("", "", "", "")
    #: How an observation holds its text (a notice's message, the documents): ``{}`` is the text.
    NOTICE: str = "{}"

    def __init__(self, parse: str = "lenient") -> None:
        check_parse_mode(parse)
        self.parse_mode = parse

    def __repr__(self) -> str:
        return f"{type(self).__name__}(parse={self.parse_mode!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.parse_mode))

    # ------------------------------------------------------------------ reading
    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        """Read one model turn's text (the first action, for a protocol of several); never raises."""
        raise NotImplementedError

    def read(
        self,
        action: Any,
        sources: Sequence[str],
        max_calls: int = DEFAULT_MAX_TOOL_CALLS,
        *,
        max_chars: int | None = None,
    ) -> Turn:
        """Read one turn in any accepted form; never raises.

        Args:
            action: model text, a structured :class:`~hopgym.turns.actions.Action` (rendered
                first; one the protocol cannot write, such as a ``Route`` under ``tools``, is a
                turn-level error), or, for a protocol that :attr:`accepts_messages`, an
                assistant message dict (:meth:`read_message`). Anything else, an empty turn or
                one over ``max_chars`` is a turn-level error.
            sources: the env's source names.
            max_calls: the calls that may run; one more is kept (to be refused), the rest counted.
            max_chars: the longest turn (a message: its JSON) read.
        """
        if type(action) is str or isinstance(action, str):
            text = action
        elif isinstance(action, (Think, Search, Route, Answer)):
            try:
                text = self.render(action)
            except KeyError as exc:  # the protocol has no way to write this action
                return Turn("", getattr(action, "think", ""), error=str(exc.args[0]))
        elif self.accepts_messages and isinstance(action, Mapping):
            return self.read_message(action, sources, max_calls, max_chars)
        else:
            shown = repr(action)[:60]
            what = "a string or a message dict" if self.accepts_messages else "a string"
            return Turn(shown, "", error=f"a turn must be {what}, got {type(action).__name__} {shown}")
        if not text or text.isspace():  # not text.strip(), without the copy
            return Turn(text, "", error="empty turn")
        if max_chars is not None and len(text) > max_chars:
            return Turn(text[:max_chars], "", error=f"turn too long ({len(text)} > {max_chars} characters)")
        return self.read_text(text, sources, max_calls)

    def read_message(
        self, message: Mapping[str, Any], sources: Sequence[str], max_calls: int, max_chars: int | None = None
    ) -> Turn:
        """Read an assistant message dict, for a protocol that :attr:`accepts_messages`."""
        raise NotImplementedError

    def read_text(self, text: str, sources: Sequence[str], max_calls: int) -> Turn:
        """Read a turn's text (not blank, within the length limit); never raises. By default
        the turn of :meth:`parse`'s one action."""
        return Turn.of(text, self.parse(text, sources))

    def split_text(self, text: str) -> list[str]:
        """A completion's text cut into the model's turns at the env's observations (dropped)."""
        return [text]

    def rollout_turns(self, completion: Any) -> list[Any]:
        """The model's turns of a completion: a string (one turn, or a whole rollout whose
        observations :meth:`split_text` cuts out), an assistant message, or a message list
        (its assistant messages)."""
        if isinstance(completion, str):
            return self.split_text(completion)
        if isinstance(completion, Mapping):
            completion = [completion]
        out: list[Any] = []
        if isinstance(completion, Sequence):
            for m in completion:
                if isinstance(m, Mapping) and m.get("role", "assistant") == "assistant":
                    out.append(self._message_turn(m))
        return out

    def _message_turn(self, message: Mapping[str, Any]) -> Any:
        content = message.get("content", "")
        if isinstance(content, str):
            return content
        if isinstance(content, Sequence):  # [{"type": "text", "text": ...}, ...]
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return ""

    def read_rollout(self, completion: Any, sources: Sequence[str] = ANY_SOURCE) -> list[Turn]:
        """Every turn of a completion read, up to the first that answers (as the env would run them)."""
        out = []
        for item in self.rollout_turns(completion):
            turn = self.read(item, sources)
            out.append(turn)
            if turn.answer() is not None:
                break
        return out

    def extract_answer(self, completion: Any, sources: Sequence[str] = ANY_SOURCE) -> str | None:
        """The answer the env would end the episode with, had it stepped the completion's turns
        in order (``None``: no turn answers)."""
        turns = self.read_rollout(completion, sources)  # they end at the first that answers
        return turns[-1].answer() if turns else None

    def is_well_formed(self, completion: Any, sources: Sequence[str] = ANY_SOURCE) -> bool:
        """Whether every turn of the completion is valid and has no format issue, and the last
        one answers (what earns a ``FormatReward`` bonus in the env)."""
        turns = self.read_rollout(completion, sources)
        if not turns or turns[-1].answer() is None or len(turns) < len(self.rollout_turns(completion)):
            return False
        return all(t.invalid() is None and not t.all_issues() for t in turns)

    # ------------------------------------------------------------------ writing
    def render(self, action: Action) -> str:
        """The text a model would write for ``action``."""
        raise NotImplementedError

    def tool_specs(self, sources: Mapping[str, str] | Sequence[str]) -> list[dict[str, Any]]:
        """The env's tools as OpenAI function schemas (see :func:`hopgym.turns.specs.tool_specs`)
        when the model gets chat tools (:attr:`chat_tools`), else ``[]``."""
        return tool_specs(sources) if self.chat_tools else []

    def route_action(self, source: str, think: str = "") -> Action:
        """The action that makes ``source`` the one later searches use."""
        return Route(source, think)

    def assistant_text(self, message: Mapping[str, Any]) -> str:
        """An assistant message of the transcript as the text the model wrote."""
        return str(message.get("content") or "")

    def documents_of(self, observation: str, count: int) -> list[tuple[str, str]] | None:
        """The ``(title, text)`` of the documents of an observation :meth:`format_documents`
        wrote, read back (a record that kept only the text); ``[]`` when they do not read as
        ``count`` documents, ``None`` for an observation this protocol does not write."""
        return None

    def prompt(self, question: str, sources: dict[str, str], max_turns: int, background: str = "") -> str:
        """The first observation: instructions, the question and optional background documents,
        written from :attr:`PROMPT`."""
        head, routing, rest, documents = self.PROMPT
        if len(sources) > 1:
            names = ", ".join(f"{n} ({d})" if d else n for n, d in sources.items())
            head += routing.format(names=names, first=next(iter(sources)))
        text = head + rest.format(max_turns=max_turns, question=question)
        return text + documents.format(background=background) if background else text

    def format_documents(
        self, docs: Sequence[Passage], doc_chars: int | None, turn: int, note: str = ""
    ) -> str:
        """The observation after a search; ``note`` (e.g. a repeated-query notice) comes first:
        :attr:`NOTICE` with the documents (:func:`join_docs`)."""
        body = join_docs(docs, doc_chars)
        return self.NOTICE.format(f"{note}\n{body}" if note else body)

    def format_notice(self, message: str, turn: int) -> str:
        """An observation that carries a short message (route done, no documents, search
        failed): :attr:`NOTICE` with the message."""
        return self.NOTICE.format(message)

    def format_error(self, reason: str, turn: int, sources: Sequence[str] = ()) -> str:
        """The corrective observation after a malformed turn (``sources``: the env's source
        names; the actions it lists name routing only where there is more than one)."""
        raise NotImplementedError

    def format_think(self, turn: int) -> str:
        """The observation after a think-only turn."""
        return ""

    def repeat_note(self, dedup: bool, exhausted: bool = False) -> str:
        """The notice for a search whose query was already issued in the episode.

        Args:
            dedup: whether the env drops documents already shown (then the search shows the next
                results) or shows the same ones again.
            exhausted: the search found no document that was not shown before.
        """
        if exhausted:
            return (
                "You already searched for this, and it finds no new documents: search for "
                "something else, or answer."
            )
        results = "next results." if dedup else "same results again."
        return f"You already searched for this; here are the {results}"

    def last_turn(self, observation: str, turn: int) -> str:
        """``observation`` with the notice that one turn is left and the answer is due now."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the env's messages
    def assistant_message(self, turn: Turn) -> dict[str, Any]:
        """The transcript's message for a model turn."""
        return {"role": "assistant", "content": turn.content}

    def reply(self, call: Call | None, text: str) -> dict[str, Any]:
        """The transcript's message for the env's reply to a call (``None``: to the turn as a
        whole, e.g. a corrective observation)."""
        return {"role": "user", "content": text}

    def observation_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The observation ``step`` returns for a step's reply messages."""
        if len(messages) < 2:  # the usual case, without building a generator
            return str(messages[0]["content"]) if messages else ""
        return "".join([str(m["content"]) for m in messages])

    def render_transcript(self, transcript: Sequence[Mapping[str, Any]]) -> str:
        """A transcript as text (``render()`` in ``ansi`` mode): each model turn on its own line."""
        return "".join(
            self.assistant_text(m) + "\n" if m["role"] == "assistant" else self.observation_text([m])
            for m in transcript
        )

    def with_last_turn(self, messages: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
        """A step's reply messages with the last-turn notice (on the last message)."""
        if not messages:
            return [{"role": "user", "content": self.last_turn("", turn)}]
        last = messages[-1]
        return [*messages[:-1], {**last, "content": self.last_turn(str(last["content"]), turn)}]
