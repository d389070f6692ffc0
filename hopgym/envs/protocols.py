"""Turn protocols: how a model turn is parsed and how the env's replies are written.

Classes: :class:`Protocol` (the interface), :class:`TagsProtocol` (``tags``, Search-R1 style),
:class:`R3Protocol` (``r3``, R3-RAG's step format). :func:`get_protocol` looks one up by name.

A protocol never raises on bad input: :meth:`Protocol.parse` returns a :class:`ParsedTurn` whose
``error`` says what was wrong, and the env shows :meth:`Protocol.format_error` to the agent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from hopgym.corpora.types import Passage
from hopgym.envs.actions import Action, Answer, ParsedTurn, Route, Search, Think

__all__ = ["Protocol", "TagsProtocol", "R3Protocol", "get_protocol", "PROTOCOLS"]


class Protocol:
    """Base class of the turn formats. Subclasses set ``name`` and ``stop`` and override the hooks."""

    name: str = ""
    #: Strings at which an LLM's generation of one turn should stop (kept in the output).
    stop: tuple[str, ...] = ()

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        """Read one model turn; never raises."""
        raise NotImplementedError

    def render(self, action: Action) -> str:
        """The text a model would write for ``action``."""
        raise NotImplementedError

    def prompt(self, question: str, sources: dict[str, str], max_turns: int,
               background: str = "") -> str:
        """The first observation: instructions, the question and optional background documents."""
        raise NotImplementedError

    def format_documents(self, docs: Sequence[Passage], doc_chars: int | None,
                         turn: int) -> str:
        """The observation after a search."""
        raise NotImplementedError

    def format_notice(self, message: str, turn: int) -> str:
        """An observation that carries a short message (route done, no documents, search failed)."""
        raise NotImplementedError

    def format_error(self, reason: str, turn: int) -> str:
        """The corrective observation after a malformed turn."""
        raise NotImplementedError

    def format_think(self, turn: int) -> str:
        """The observation after a think-only turn."""
        return ""


def _join_docs(docs: Sequence[Passage], doc_chars: int | None, fmt: str) -> str:
    body = "\n".join(fmt.format(i=i + 1, title=d.title, text=d.text) for i, d in enumerate(docs))
    if doc_chars is not None and len(body) > doc_chars:
        # R3-RAG cuts the joined document string, not each document.
        body = body[:doc_chars].rstrip() + " …"
    return body


_TAG_NAMES = ("think", "search", "route", "answer")
_TAG_RE = re.compile(r"<(think|search|route|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_ANY_TAG_RE = re.compile(r"</?(think|search|route|answer|information)>", re.IGNORECASE)


class TagsProtocol(Protocol):
    """Search-R1 style tags.

    A turn is ``<think>…</think>`` followed by one of ``<search>q</search>``, ``<route>src</route>``
    or ``<answer>a</answer>``; a turn with only ``<think>`` is a think step. Text outside the tags is
    ignored. Results come back as ``<information>Doc 1 (Title: …) …</information>``.

    Example:
        >>> p = TagsProtocol()
        >>> p.parse("<think>hm</think><search>Oslo mayor</search>", ["local"]).action
        Search(query='Oslo mayor', think='hm')
        >>> p.parse("<search>a</search><answer>b</answer>", ["local"]).error
        'two actions in one turn (search, answer): write exactly one'
    """

    name = "tags"
    stop = ("</search>", "</route>", "</answer>")

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        blocks = [(m.group(1).lower(), m.group(2), m.span()) for m in _TAG_RE.finditer(text)]
        # Anything tag-shaped left after removing the well-formed blocks is unbalanced or stray.
        rest = _TAG_RE.sub("", text)
        stray = _ANY_TAG_RE.search(rest)
        for _, body, _ in blocks:
            if _ANY_TAG_RE.search(body):
                return ParsedTurn(None, error="nested tags: a tag may not contain another tag")
        if stray is not None:
            tag = stray.group(0)
            if tag.lower() in ("<information>", "</information>"):
                return ParsedTurn(None, error="<information> is written by the environment, not by you")
            return ParsedTurn(None, error=f"unbalanced tag {tag}: close every tag you open")
        think = "\n".join(body.strip() for kind, body, _ in blocks if kind == "think")
        acts = [(kind, body.strip()) for kind, body, _ in blocks if kind != "think"]
        if not acts:
            if think:
                return ParsedTurn(Think(think), think=think)
            return ParsedTurn(None, error="no action: write <search>, <route> or <answer> "
                                          "(after an optional <think>)")
        if len(acts) > 1:
            names = ", ".join(k for k, _ in acts)
            return ParsedTurn(None, think=think,
                              error=f"two actions in one turn ({names}): write exactly one")
        kind, body = acts[0]
        return _make_action(kind, body, think, sources)

    def render(self, action: Action) -> str:
        think = f"<think>{action.think}</think>" if getattr(action, "think", "") else ""
        if isinstance(action, Think):
            return f"<think>{action.text}</think>"
        if isinstance(action, Search):
            return f"{think}<search>{action.query}</search>"
        if isinstance(action, Route):
            return f"{think}<route>{action.source}</route>"
        return f"{think}<answer>{action.text}</answer>"

    def prompt(self, question: str, sources: dict[str, str], max_turns: int,
               background: str = "") -> str:
        lines = [
            "Answer the question by reasoning and searching step by step. In every turn, first "
            "reason inside <think> and </think>, then do exactly one of:",
            "- <search> query </search> to search; the results come back between <information> "
            "and </information>.",
        ]
        if len(sources) > 1:
            names = ", ".join(f"{n} ({d})" if d else n for n, d in sources.items())
            lines.append(f"- <route> source </route> to choose where later searches go: {names}. "
                         f"Searches start in {next(iter(sources))}.")
        lines += [
            "- <answer> answer </answer> to give the final answer as a short span, without "
            "explanation. This ends the episode.",
            f"You have at most {max_turns} turns.",
            f"Question: {question}",
        ]
        text = "\n".join(lines) + "\n"
        if background:
            text += f"<information>{background}</information>\n"
        return text

    def format_documents(self, docs: Sequence[Passage], doc_chars: int | None, turn: int) -> str:
        body = _join_docs(docs, doc_chars, "Doc {i} (Title: {title}) {text}")
        return f"\n<information>{body}</information>\n"

    def format_notice(self, message: str, turn: int) -> str:
        return f"\n<information>{message}</information>\n"

    def format_error(self, reason: str, turn: int) -> str:
        return (f"\n<information>Invalid turn: {reason}. Write <think>…</think> followed by exactly "
                "one of <search>query</search>, <route>source</route> or "
                "<answer>answer</answer>.</information>\n")


def _make_action(kind: str, body: str, think: str, sources: Sequence[str]) -> ParsedTurn:
    body = " ".join(body.split())
    if kind == "search":
        if not body:
            return ParsedTurn(None, think=think, error="empty search query")
        return ParsedTurn(Search(body, think), think=think)
    if kind == "route":
        if body not in sources:
            known = ", ".join(sources)
            return ParsedTurn(None, think=think, error=f"unknown source {body!r}; sources: {known}")
        return ParsedTurn(Route(body, think), think=think)
    if not body:
        return ParsedTurn(None, think=think, error="empty answer")
    return ParsedTurn(Answer(body, think), think=think)


_R3_FIELDS = {
    "the problem analysis:": "think",
    "the retrieval query:": "search",
    "the retrieval source:": "route",
    "the final answer:": "answer",
}
_R3_RE = re.compile(r"(?im)^\s*(the problem analysis:|the retrieval query:|the retrieval source:"
                    r"|the final answer:|the retrieval documents:)")
_R3_STEP_RE = re.compile(r"(?im)^\s*step\s+\d+\s*:\s*$")


class R3Protocol(Protocol):
    """R3-RAG's plain-text step format.

    The model writes one step: ``The problem analysis: …`` then either ``The retrieval query: …`` or
    ``The final answer: …``. hopgym adds ``The retrieval source: NAME`` for routing. Documents come
    back as ``The retrieval documents: …`` followed by the next ``Step k:`` header.

    Example:
        >>> p = R3Protocol()
        >>> p.parse("The problem analysis: need X.\\nThe retrieval query: X founder", ["local"]).action
        Search(query='X founder', think='need X.')
    """

    name = "r3"
    stop = ("\nThe retrieval documents:", "\nStep ")

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        text = _R3_STEP_RE.sub("", text)
        marks = list(_R3_RE.finditer(text))
        fields: list[tuple[str, str]] = []
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            key = m.group(1).lower()
            if key == "the retrieval documents:":
                return ParsedTurn(None, error="'The retrieval documents:' is written by the "
                                              "environment, not by you")
            fields.append((_R3_FIELDS[key], text[m.end():end].strip()))
        think = "\n".join(v for k, v in fields if k == "think")
        acts = [(k, v) for k, v in fields if k != "think"]
        if not acts:
            return ParsedTurn(None, think=think,
                              error="no 'The retrieval query:' or 'The final answer:' line")
        if len(acts) > 1:
            names = ", ".join(k for k, _ in acts)
            return ParsedTurn(None, think=think,
                              error=f"two actions in one step ({names}): write exactly one")
        kind, body = acts[0]
        return _make_action(kind, body, think, sources)

    def render(self, action: Action) -> str:
        think = action.text if isinstance(action, Think) else action.think
        head = f"The problem analysis: {think or '-'}\n"
        if isinstance(action, Think):
            return head.rstrip("\n")
        if isinstance(action, Search):
            return head + f"The retrieval query: {action.query}"
        if isinstance(action, Route):
            return head + f"The retrieval source: {action.source}"
        return head + f"The final answer: {action.text}"

    def prompt(self, question: str, sources: dict[str, str], max_turns: int,
               background: str = "") -> str:
        lines = [
            "Solve the question step by step. Each step starts with 'The problem analysis:' and "
            "ends with either 'The retrieval query:' (a search query; documents follow) or "
            "'The final answer:' (a short answer; this ends the episode).",
        ]
        if len(sources) > 1:
            names = ", ".join(f"{n} ({d})" if d else n for n, d in sources.items())
            lines.append(f"Instead of a query, 'The retrieval source:' chooses where later "
                         f"queries go: {names}. Queries start in {next(iter(sources))}.")
        lines.append(f"You have at most {max_turns} steps.")
        text = "\n".join(lines) + f"\nThe question: {question}\n"
        if background:
            text += f"The retrieval documents: {background}\n"
        return text + "Step 1:\n"

    def format_documents(self, docs: Sequence[Passage], doc_chars: int | None, turn: int) -> str:
        body = _join_docs(docs, doc_chars, "({i}) {title}: {text}")
        return f"\nThe retrieval documents: {body}\nStep {turn + 1}:\n"

    def format_notice(self, message: str, turn: int) -> str:
        return f"\nThe retrieval documents: {message}\nStep {turn + 1}:\n"

    def format_error(self, reason: str, turn: int) -> str:
        return (f"\nFormat error: {reason}. Write 'The problem analysis: …' and then either "
                f"'The retrieval query: …' or 'The final answer: …'.\nStep {turn + 1}:\n")

    def format_think(self, turn: int) -> str:
        return f"\nStep {turn + 1}:\n"


PROTOCOLS: dict[str, type[Protocol]] = {"tags": TagsProtocol, "r3": R3Protocol}


def get_protocol(name: str | Protocol) -> Protocol:
    """A protocol instance by name (``tags`` or ``r3``), or the instance given."""
    if isinstance(name, Protocol):
        return name
    try:
        return PROTOCOLS[name]()
    except (KeyError, TypeError):
        raise ValueError(f"unknown protocol {name!r}; choose one of {sorted(PROTOCOLS)}") from None
