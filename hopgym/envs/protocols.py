"""Turn protocols: how a model turn is parsed and how the env's replies are written.

Classes: :class:`Protocol` (the interface), :class:`TagsProtocol` (``tags``, Search-R1 style),
:class:`R3Protocol` (``r3``, R3-RAG's step format). :func:`get_protocol` looks one up by name.
Constants: :data:`PROTOCOLS`, :data:`PARSE_MODES`.

A protocol never raises on bad input: :meth:`Protocol.parse` returns a :class:`ParsedTurn` whose
``error`` says what was wrong, and the env shows :meth:`Protocol.format_error` to the agent.

Each protocol reads turns in one of two *parse modes* (:data:`PARSE_MODES`):

- ``lenient`` (the default): the action is read from the turn's first complete action block
  wherever the thought opens or closes, as Search-R1 reads its rollouts
  (``re.search(r"<(search|answer)>(.*?)</\\1>", turn)``). Flaws the parser can read past — an
  unclosed ``<think>``, text outside the tags, spaces inside a tag — are *format issues*
  (:data:`~hopgym.envs.actions.FORMAT_ISSUES`), reported in ``ParsedTurn.issues``, not invalid
  turns.
- ``strict``: hopgym's original rules; every unbalanced or stray tag makes the turn invalid.

In both modes a turn is invalid when it holds no complete action block (and is not a think-only
turn), two different actions, an action block nested in a closed ``<think>…</think>`` or in another
tag, or an ``<information>`` tag of its own. Issues that strict mode accepts too (text outside the
tags) are reported in both modes.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from hopgym.corpora.types import Passage
from hopgym.envs.actions import Action, Answer, FormatIssue, ParsedTurn, Route, Search, Think
from hopgym.errors import InvalidOptionError

__all__ = [
    "Protocol",
    "TagsProtocol",
    "R3Protocol",
    "get_protocol",
    "check_parse_mode",
    "PROTOCOLS",
    "PARSE_MODES",
]

#: How turns are read: ``"lenient"`` (default; flaws become format issues) or ``"strict"``.
PARSE_MODES: tuple[str, ...] = ("lenient", "strict")


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


class Protocol:
    """Base class of the turn formats. Subclasses set ``name`` and ``stop`` and override the hooks.

    Args:
        parse: the parse mode, one of :data:`PARSE_MODES`.

    Raises:
        hopgym.errors.InvalidOptionError: for an unknown parse mode.
    """

    name: str = ""
    #: Strings at which an LLM's generation of one turn should stop (kept in the output).
    stop: tuple[str, ...] = ()

    def __init__(self, parse: str = "lenient") -> None:
        check_parse_mode(parse)
        self.parse_mode = parse

    def __repr__(self) -> str:
        return f"{type(self).__name__}(parse={self.parse_mode!r})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.parse_mode))

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        """Read one model turn; never raises."""
        raise NotImplementedError

    def render(self, action: Action) -> str:
        """The text a model would write for ``action``."""
        raise NotImplementedError

    def prompt(self, question: str, sources: dict[str, str], max_turns: int, background: str = "") -> str:
        """The first observation: instructions, the question and optional background documents."""
        raise NotImplementedError

    def format_documents(
        self, docs: Sequence[Passage], doc_chars: int | None, turn: int, note: str = ""
    ) -> str:
        """The observation after a search; ``note`` (e.g. a repeated-query notice) comes first."""
        raise NotImplementedError

    def format_notice(self, message: str, turn: int) -> str:
        """An observation that carries a short message (route done, no documents, search failed)."""
        raise NotImplementedError

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
        if dedup:
            return "You already searched for this; here are the next results."
        return "You already searched for this; here are the same results again."

    def last_turn(self, observation: str, turn: int) -> str:
        """``observation`` with the notice that one turn is left and the answer is due now."""
        raise NotImplementedError


def _join_docs(docs: Sequence[Passage], doc_chars: int | None, fmt: str) -> str:
    body = "\n".join(fmt.format(i=i + 1, title=d.title, text=d.text) for i, d in enumerate(docs))
    if doc_chars is not None and len(body) > doc_chars:
        # R3-RAG cuts the joined document string, not each document.
        body = body[:doc_chars].rstrip() + " …"
    return body


def _quote(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= limit else text[:limit] + "…")


_TAG_NAMES = ("think", "search", "route", "answer")
# Both parsers are linear in the length of the turn (a 1 MB turn of tags parses in well under a
# second): the regular expressions below never backtrack far (possessive white space; no lazy
# ".*?" to a back-reference), and each tag is visited a bounded number of times.
_EXACT_TAG_RE = re.compile(r"<(/?)(think|search|route|answer)>", re.IGNORECASE)
_ANY_TAG_RE = re.compile(r"</?(think|search|route|answer|information)>", re.IGNORECASE)
# Lenient mode also reads tags with spaces inside the brackets ("< search >", "</ answer>").
_LOOSE_TAG_RE = re.compile(r"<\s*+(/?)\s*+(think|search|route|answer|information)\s*+>", re.IGNORECASE)
_ACTION_NAMES = ("search", "route", "answer")
# The canonical turn, as models trained on the protocol write it: an optional <think> block, then
# at most one action block, in lower case, with nothing but white space around them and no "<"
# inside. Both parse modes read such a turn the same way, so it skips the general parser.
_CANONICAL_RE = re.compile(r"\s*(?:<think>([^<]*)</think>\s*)?(?:<(search|route|answer)>([^<]*)</\2>\s*)?")

_INFO_ERROR = "<information> is written by the environment, not by you"
_NESTED_ERROR = "nested tags: a tag may not contain another tag"
_IN_THINK_ERROR = (
    "an action inside <think>…</think> does not count: close the thought with </think>, then write the action"
)


def _routes(sources: Sequence[str]) -> bool:
    """Whether an env with these sources can route: more than one source (a container with no
    length, such as a reader's accept-any-source set, counts as several)."""
    return not hasattr(sources, "__len__") or len(sources) > 1


def _no_action_error(sources: Sequence[str]) -> str:
    """Why a turn with no action block is invalid; routing is named only with several sources."""
    tags = "<search>, <route> or <answer>" if _routes(sources) else "<search> or <answer>"
    return f"no action: write {tags} (after an optional <think>)"


def _truncated_error(tag: str) -> str:
    return (
        f"the turn ended inside <{tag}> before any complete action (cut off at the length "
        "limit?): keep your thoughts short"
    )


class _Tag(NamedTuple):
    start: int
    end: int
    closing: bool
    name: str
    exact: bool  # written without spaces inside the brackets


def _tag_name(written: str) -> str:
    """The tag name that ``written`` matched case-insensitively (``"ſearch"`` is ``"search"``)."""
    name = written.lower()
    if name in _TAG_NAMES or name == "information":
        return name
    return next(n for n in (*_TAG_NAMES, "information") if re.fullmatch(n, written, re.IGNORECASE))


def _tags(text: str) -> list[_Tag]:
    return [
        _Tag(
            m.start(),
            m.end(),
            bool(m.group(1)),
            _tag_name(m.group(2)),
            m.group(0).lower() == f"<{m.group(1)}{m.group(2)}>".lower(),
        )
        for m in _LOOSE_TAG_RE.finditer(text)
    ]


def _open_at_end(tags: Sequence[_Tag]) -> str | None:
    """The think/action tag left open at the end of the text, if any."""
    open_: list[str] = []  # a stack; a closing tag closes its innermost opening and all above it
    depth = dict.fromkeys(_TAG_NAMES, 0)  # how many of each name are on the stack
    for t in tags:
        if t.name == "information":
            continue
        if not t.closing:
            open_.append(t.name)
            depth[t.name] += 1
        elif depth[t.name]:
            while (name := open_.pop()) != t.name:
                depth[name] -= 1
            depth[name] -= 1
    return open_[-1] if open_ else None


def _tag_blocks(text: str) -> tuple[list[tuple[str, str, tuple[int, int]]], str]:
    """The well-formed ``<name>…</name>`` blocks of ``text`` (kind, body, span), left to right and
    each closed by the first matching closing tag after it, and the text with the blocks removed.

    What ``re.finditer(r"<(think|search|route|answer)>(.*?)</\\1>", text, re.I | re.S)`` finds,
    in one pass: the lazy regular expression scans to the end of the text from every opening tag
    that is never closed, which is quadratic in the number of tags.
    """
    opens: list[tuple[int, int, str]] = []
    closes: dict[str, list[int]] = {name: [] for name in _TAG_NAMES}  # start of each </name>
    for m in _EXACT_TAG_RE.finditer(text):
        name = _tag_name(m.group(2))
        if m.group(1):
            closes[name].append(m.start())
        else:
            opens.append((m.start(), m.end(), name))
    nxt = dict.fromkeys(_TAG_NAMES, 0)  # per name, the first closing tag not yet passed
    blocks: list[tuple[str, str, tuple[int, int]]] = []
    pieces: list[str] = []
    pos = 0  # end of the last block
    for start, end, name in opens:
        if start < pos:
            continue
        ends, k = closes[name], nxt[name]
        while k < len(ends) and ends[k] < end:
            k += 1
        nxt[name] = k
        if k == len(ends):
            continue
        close = ends[k]
        stop = close + len(name) + 3  # len("</name>")
        blocks.append((name, text[end:close], (start, stop)))
        pieces.append(text[pos:start])
        pos = stop
    pieces.append(text[pos:])
    return blocks, "".join(pieces)


class TagsProtocol(Protocol):
    """Search-R1 style tags.

    A turn is ``<think>…</think>`` followed by one of ``<search>q</search>``, ``<route>src</route>``
    or ``<answer>a</answer>``; a turn with only ``<think>`` is a think step. Results come back as
    ``<information>Doc 1 (Title: …) …</information>``.

    Parse modes (see the module docstring): ``lenient`` (default) reads the first complete action
    block and reports an unclosed or unopened ``<think>``, text outside the tags, spaces inside a
    tag, a stray action tag and a repeated identical action as format issues; ``strict`` rejects
    every unbalanced or stray tag and a repeated action, and reports only text outside the tags.

    Example:
        >>> p = TagsProtocol()
        >>> p.parse("<think>hm</think><search>Oslo mayor</search>", ["local"]).action
        Search(query='Oslo mayor', think='hm')
        >>> p.parse("<search>a</search><answer>b</answer>", ["local"]).error
        'two actions in one turn (search, answer): write exactly one'
        >>> turn = p.parse("<think>Oslo, so<search>Oslo mayor</search>", ["local"])
        >>> turn.action, [i.code for i in turn.issues]
        (Search(query='Oslo mayor', think='Oslo, so'), ['unclosed_think'])
        >>> TagsProtocol(parse="strict").parse("<think>Oslo, so<search>x</search>", ["local"]).error
        'unbalanced tag <think>: close every tag you open'
    """

    name = "tags"
    stop = ("</search>", "</route>", "</answer>")

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        m = _CANONICAL_RE.fullmatch(text)
        if m is not None:
            turn = _canonical_turn(m, sources)
            if turn is not None:
                return turn
        if self.parse_mode == "strict":
            return _valid_issues(self._parse_strict(text, sources))
        return _valid_issues(self._parse_lenient(text, sources))

    # ------------------------------------------------------------------ strict
    def _parse_strict(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        blocks, rest = _tag_blocks(text)
        # Anything tag-shaped left after removing the well-formed blocks is unbalanced or stray.
        stray = _ANY_TAG_RE.search(rest)
        for _, body, _ in blocks:
            if _ANY_TAG_RE.search(body):
                return ParsedTurn(None, error=_NESTED_ERROR)
        if stray is not None:
            tag = stray.group(0)
            if tag.lower() in ("<information>", "</information>"):
                return ParsedTurn(None, error=_INFO_ERROR)
            open_tag = _open_at_end([t for t in _tags(text) if t.exact])
            if open_tag is not None and not any(k != "think" for k, _, _ in blocks):
                return ParsedTurn(None, error=_truncated_error(open_tag), truncated=True)
            return ParsedTurn(None, error=f"unbalanced tag {tag}: close every tag you open")
        issues: tuple[FormatIssue, ...] = ()
        if rest.strip():
            issues = (FormatIssue("text_outside_tags", f"text outside the tags: {_quote(rest)}"),)
        think = "\n".join(body.strip() for kind, body, _ in blocks if kind == "think")
        acts = [(kind, body.strip()) for kind, body, _ in blocks if kind != "think"]
        if not acts:
            if think:
                return ParsedTurn(Think(think), think=think, issues=issues)
            return ParsedTurn(None, error=_no_action_error(sources), issues=issues)
        if len(acts) > 1:
            names = ", ".join(k for k, _ in acts)
            return ParsedTurn(
                None,
                think=think,
                issues=issues,
                error=f"two actions in one turn ({names}): write exactly one",
            )
        kind, body = acts[0]
        return replace(_make_action(kind, body, think, sources), issues=issues)

    # ------------------------------------------------------------------ lenient
    def _parse_lenient(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        """Search-R1's reading: the first complete action block, everything else a format issue.

        Longer than most functions on purpose: it is one pass over the tags in order, a small
        state machine (the open ``<think>``, the end of the last tag handled, the spans covered),
        and each branch's effect on that state reads best in one place.
        """
        tags = _tags(text)
        if any(t.name == "information" for t in tags):
            return ParsedTurn(None, error=_INFO_ERROR)
        issues: list[FormatIssue] = []

        def issue(code: str, detail: str) -> None:
            if all(i.code != code for i in issues):  # one entry per kind is enough
                issues.append(FormatIssue(code, detail))

        # Per name, the indices of its closing tags, and the indices of the think tags: the
        # lookups below bisect them instead of scanning the tags that follow (quadratic).
        closing_at: dict[str, list[int]] = {name: [] for name in _TAG_NAMES}
        think_tags: list[int] = []
        for k, u in enumerate(tags):
            if u.closing:
                closing_at[u.name].append(k)
            if u.name == "think":
                think_tags.append(k)
        bad = next((t for t in tags if not t.exact), None)
        if bad is not None:
            issue("malformed_tag", f"spaces inside a tag: {text[bad.start : bad.end]!r}")
        thoughts: list[str] = []
        acts: list[tuple[str, str]] = []
        covered: list[tuple[int, int]] = []  # thought and action spans, tags included
        think_at: int | None = None  # where the open <think>'s text starts
        prev_end = 0  # end of the last tag handled
        i = 0
        while i < len(tags):
            t = tags[i]
            if t.name == "think":
                if not t.closing:
                    if think_at is not None:  # a second <think> while one is open
                        issue("unclosed_think", "<think> opened again before </think>")
                        thoughts.append(text[think_at : t.start])
                    think_at = t.end
                    covered.append((t.start, t.end))
                elif think_at is None:
                    # "reasoning</think>": the text since the last tag is the thought (a chat
                    # template may have opened the <think> already).
                    issue("unopened_think", "</think> without <think>")
                    thoughts.append(text[prev_end : t.start])
                    covered.append((prev_end, t.end))
                else:
                    thoughts.append(text[think_at : t.start])
                    covered.append((think_at, t.end))
                    think_at = None
                prev_end = t.end
                i += 1
                continue
            if t.closing:
                issue("stray_tag", f"{text[t.start : t.end]} without its opening tag")
                covered.append((t.start, t.end))
                prev_end = t.end
                i += 1
                continue
            after = closing_at[t.name]
            n = bisect_right(after, i)
            j = after[n] if n < len(after) else None  # the first closing tag of this name
            if j is None:
                issue("stray_tag", f"<{t.name}> is never closed")
                covered.append((t.start, t.end))
                prev_end = t.end
                i += 1
                continue
            if j > i + 1:
                return ParsedTurn(None, error=_NESTED_ERROR, issues=tuple(issues))
            if think_at is not None:
                n = bisect_right(think_tags, j)
                later = tags[think_tags[n]] if n < len(think_tags) else None  # the next think tag
                if later is not None and later.closing:
                    return ParsedTurn(None, error=_IN_THINK_ERROR, issues=tuple(issues))
                issue("unclosed_think", "<think> is never closed")
                thoughts.append(text[think_at : t.start])
                covered.append((think_at, t.start))
                think_at = None
            acts.append((t.name, " ".join(text[t.end : tags[j].start].split())))
            covered.append((t.start, tags[j].end))
            prev_end = tags[j].end
            i = j + 1
        if think_at is not None:
            if not acts:
                return ParsedTurn(
                    None,
                    error=_truncated_error(_open_at_end(tags) or "think"),
                    issues=tuple(issues),
                    truncated=True,
                )
            issue("unclosed_think", "<think> is never closed")
            thoughts.append(text[think_at:])
            covered.append((think_at, len(text)))
        outside = _uncovered(text, covered)
        if outside.strip():
            issue("text_outside_tags", f"text outside the tags: {_quote(outside)}")
        think = "\n".join(s.strip() for s in thoughts if s.strip())
        if not acts:
            open_tag = _open_at_end(tags)
            if open_tag is not None:
                return ParsedTurn(
                    None, error=_truncated_error(open_tag), issues=tuple(issues), truncated=True
                )
            if think:
                return ParsedTurn(Think(think), think=think, issues=tuple(issues))
            return ParsedTurn(None, error=_no_action_error(sources), issues=tuple(issues))
        distinct = list(dict.fromkeys(acts))
        if len(distinct) > 1:
            names = ", ".join(k for k, _ in acts)
            return ParsedTurn(
                None,
                think=think,
                issues=tuple(issues),
                error=f"two actions in one turn ({names}): write exactly one",
            )
        if len(acts) > 1:
            issue("duplicate_action", f"<{acts[0][0]}> written {len(acts)} times")
        kind, body = acts[0]
        return replace(_make_action(kind, body, think, sources), issues=tuple(issues))

    # ------------------------------------------------------------------ writing
    def render(self, action: Action) -> str:
        think = f"<think>{action.think}</think>" if not isinstance(action, Think) and action.think else ""
        if isinstance(action, Think):
            return f"<think>{action.text}</think>"
        if isinstance(action, Search):
            return f"{think}<search>{action.query}</search>"
        if isinstance(action, Route):
            return f"{think}<route>{action.source}</route>"
        return f"{think}<answer>{action.text}</answer>"

    def prompt(self, question: str, sources: dict[str, str], max_turns: int, background: str = "") -> str:
        lines = [
            "Answer the question by reasoning and searching step by step. In every turn, first "
            "reason inside <think> and </think>, then do exactly one of:",
            "- <search> query </search> to search; the results come back between <information> "
            "and </information>.",
        ]
        if len(sources) > 1:
            names = ", ".join(f"{n} ({d})" if d else n for n, d in sources.items())
            lines.append(
                f"- <route> source </route> to choose where later searches go: {names}. "
                f"Searches start in {next(iter(sources))}."
            )
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

    def format_documents(
        self, docs: Sequence[Passage], doc_chars: int | None, turn: int, note: str = ""
    ) -> str:
        body = _join_docs(docs, doc_chars, "Doc {i} (Title: {title}) {text}")
        head = f"{note}\n" if note else ""
        return f"\n<information>{head}{body}</information>\n"

    def format_notice(self, message: str, turn: int) -> str:
        return f"\n<information>{message}</information>\n"

    def format_error(self, reason: str, turn: int, sources: Sequence[str] = ()) -> str:
        actions = (
            "exactly one of <search>query</search>, <route>source</route> or <answer>answer</answer>"
            if _routes(sources)
            else "either <search>query</search> or <answer>answer</answer>"
        )
        return (
            f"\n<information>Invalid turn: {reason}. Write <think>…</think> followed by "
            f"{actions}.</information>\n"
        )

    #: The last-turn notice (a line of its own after the observation). It holds no tag: a model
    #: that copies it must not have written an action (SmolLM2-135M copied an earlier wording's
    #: "<answer> short answer </answer>", which the lenient parse read as the answer).
    LAST_TURN = "This is your last turn: give your final answer now, as a short answer in the answer tags."

    def last_turn(self, observation: str, turn: int) -> str:
        """The observation, then the last-turn notice on a line of its own.

        Example:
            >>> TagsProtocol().last_turn("\\n<information>Doc 1 …</information>\\n", 3)
            '\\n<information>Doc 1 …</information>\\nThis is your last turn: give your final \
answer now, as a short answer in the answer tags.\\n'
        """
        return (observation or "\n") + self.LAST_TURN + "\n"


def _canonical_turn(m: re.Match[str], sources: Sequence[str]) -> ParsedTurn | None:
    """The turn a :data:`_CANONICAL_RE` match holds, read as both parse modes read it (``None``
    when neither block is there, or for a think-only turn whose thought is blank: the general
    parser says what is wrong)."""
    thought, kind, body = m.groups()
    think = thought.strip() if thought is not None else ""
    if kind is None:
        return ParsedTurn(Think(think), think=think) if think else None
    return _make_action(kind, body, think, sources)


def _valid_issues(turn: ParsedTurn) -> ParsedTurn:
    # Format issues are flaws read past; an invalid turn reports its error instead.
    return turn if turn.action is not None or not turn.issues else replace(turn, issues=())


def _uncovered(text: str, spans: Sequence[tuple[int, int]]) -> str:
    out, pos = [], 0
    for a, b in sorted(spans):
        if a > pos:
            out.append(text[pos:a])
        pos = max(pos, b)
    out.append(text[pos:])
    return " ".join(out)


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
_R3_LABELS = (
    r"(the problem analysis:|the retrieval query:|the retrieval source:"
    r"|the final answer:|the retrieval documents:)"
)
# Strict: a label at the start of a line, after white space (see _at_line_starts).
_R3_RE = re.compile(r"(?i)" + _R3_LABELS)
# Lenient: a label anywhere, as long as it starts a word ("...done. The final answer: X").
_R3_LOOSE_RE = re.compile(r"(?i)(?<![a-z])" + _R3_LABELS)
_R3_STEP_RE = re.compile(r"(?im)step\s+\d+\s*:\s*$")
_WHITE_RE = re.compile(r"\s*+")
_R3_STEP_HEAD_RE = re.compile(r"(?im)^[ \t]*step\s+\d+\s*:[ \t]*")
_R3_DOCS_ERROR = "'The retrieval documents:' is written by the environment, not by you"
_R3_TRUNCATED_ERROR = (
    "the step ended inside 'The problem analysis:' before a query or an answer "
    "(cut off at the length limit?): keep the analysis short"
)
_SENTENCE_END = ".!?\"')]»”’"


def _at_line_starts(body: re.Pattern[str], text: str) -> list[tuple[int, int, re.Match[str]]]:
    """``(start, end, body's match)`` of each match of ``(?m)^\\s*`` + ``body`` in ``text``, as
    ``finditer`` finds them (leftmost, not overlapping), for a ``body`` that starts with a
    character that is not white space.

    In time linear in ``text``: as a regular expression, ``^\\s*`` scans a run of white space
    from each line start inside it, which is quadratic in a run of blank lines. All those line
    starts reach the same end of the run, so it is scanned once: the match starts at the first
    line start in the run and ``body`` must match where the run ends.
    """
    out = []
    pos, n = 0, len(text)
    while pos <= n:
        if pos == 0 or text[pos - 1] == "\n":
            start = pos
        else:
            newline = text.find("\n", pos)
            if newline < 0:
                break
            start = newline + 1
        run_end = _WHITE_RE.match(text, start).end()  # type: ignore[union-attr]
        m = body.match(text, run_end)
        if m is None:
            pos = run_end + 1  # every line start up to run_end reaches the same run_end
            continue
        out.append((start, m.end(), m))
        pos = m.end()
    return out


class R3Protocol(Protocol):
    """R3-RAG's plain-text step format.

    The model writes one step: ``The problem analysis: …`` then either ``The retrieval query: …`` or
    ``The final answer: …``. hopgym adds ``The retrieval source: NAME`` for routing. Documents come
    back as ``The retrieval documents: …`` followed by the next ``Step k:`` header.

    Parse modes: ``strict`` reads labels only at the start of a line and takes each field to the
    next label; ``lenient`` (default) also reads a label inside a line (``inline_field``) and takes
    the action from the first line of its field (later lines are ``text_outside_fields``); an
    identical action written twice is a ``duplicate_action`` there and an error in strict mode.
    Both modes report a missing analysis (``missing_analysis``) and text before the first label
    (``text_outside_fields``), and reject two different actions and a
    ``The retrieval documents:`` label written by the model. A step with an analysis but no action
    is invalid; it is reported as truncated when the analysis stops mid-sentence.

    Example:
        >>> p = R3Protocol()
        >>> p.parse("The problem analysis: need X.\\nThe retrieval query: X founder", ["local"]).action
        Search(query='X founder', think='need X.')
        >>> turn = p.parse("The problem analysis: done. The final answer: Oslo", ["local"])
        >>> turn.action, [i.code for i in turn.issues]
        (Answer(text='Oslo', think='done.'), ['inline_field'])
    """

    name = "r3"
    stop = ("\nThe retrieval documents:", "\nStep ")

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        return _valid_issues(self._parse(text, sources))

    def _parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        lenient = self.parse_mode == "lenient"
        if lenient:
            text = _R3_STEP_HEAD_RE.sub("", text)
            marks = [(m.start(), m.end(), m) for m in _R3_LOOSE_RE.finditer(text)]
        else:
            steps = _at_line_starts(_R3_STEP_RE, text)
            if steps:
                cuts = [0] + [i for start, end, _ in steps for i in (start, end)] + [len(text)]
                text = "".join(text[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True))
            marks = _at_line_starts(_R3_RE, text)
        issues: list[FormatIssue] = []

        def issue(code: str, detail: str) -> None:
            if all(i.code != code for i in issues):
                issues.append(FormatIssue(code, detail))

        head = text[: marks[0][0]] if marks else ""
        if head.strip():
            issue("text_outside_fields", f"text before the first field: {_quote(head)}")
        fields: list[tuple[str, str]] = []
        for i, (start, label_end, m) in enumerate(marks):
            end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
            key = m.group(1).lower()
            if key == "the retrieval documents:":
                return ParsedTurn(None, error=_R3_DOCS_ERROR, issues=tuple(issues))
            # Text before the label on its line; only since the previous label is looked at
            # (on the previous label's line, that label is such text), so this stays linear.
            since = marks[i - 1][0] if i else 0
            newline = text.rfind("\n", since, start)
            if (newline < 0 and i > 0) or text[newline + 1 if newline >= 0 else 0 : start].strip():
                issue("inline_field", f"{m.group(1)!r} inside a line")
            kind, value = _R3_FIELDS[key], text[label_end:end].strip()
            if lenient and kind != "think" and "\n" in value:
                value, rest = value.split("\n", 1)
                if rest.strip():
                    issue("text_outside_fields", f"text after the {kind} line: {_quote(rest)}")
            fields.append((kind, value))
        think = "\n".join(v for k, v in fields if k == "think")
        if not any(k == "think" for k, _ in fields):
            issue("missing_analysis", "no 'The problem analysis:' line")
        acts = [(k, " ".join(v.split())) for k, v in fields if k != "think"]
        if not acts:
            # Cut mid-sentence, with no action label anywhere (not even one strict mode skips).
            cut = (
                bool(fields)
                and fields[-1][0] == "think"
                and not fields[-1][1].rstrip().endswith(tuple(_SENTENCE_END))
                and not any(
                    m.group(1).lower() != "the problem analysis:" for m in _R3_LOOSE_RE.finditer(text)
                )
            )
            if cut:
                return ParsedTurn(
                    None, think=think, error=_R3_TRUNCATED_ERROR, issues=tuple(issues), truncated=True
                )
            return ParsedTurn(
                None,
                think=think,
                issues=tuple(issues),
                error="no 'The retrieval query:' or 'The final answer:' line",
            )
        if len(dict.fromkeys(acts)) > 1 or (len(acts) > 1 and not lenient):
            names = ", ".join(k for k, _ in acts)
            return ParsedTurn(
                None,
                think=think,
                issues=tuple(issues),
                error=f"two actions in one step ({names}): write exactly one",
            )
        if len(acts) > 1:
            issue("duplicate_action", f"the {acts[0][0]} line written {len(acts)} times")
        kind, body = acts[0]
        return replace(_make_action(kind, body, think, sources), issues=tuple(issues))

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

    def prompt(self, question: str, sources: dict[str, str], max_turns: int, background: str = "") -> str:
        lines = [
            "Solve the question step by step. Each step starts with 'The problem analysis:' and "
            "ends with either 'The retrieval query:' (a search query; documents follow) or "
            "'The final answer:' (a short answer; this ends the episode).",
        ]
        if len(sources) > 1:
            names = ", ".join(f"{n} ({d})" if d else n for n, d in sources.items())
            lines.append(
                f"Instead of a query, 'The retrieval source:' chooses where later "
                f"queries go: {names}. Queries start in {next(iter(sources))}."
            )
        lines.append(f"You have at most {max_turns} steps.")
        text = "\n".join(lines) + f"\nThe question: {question}\n"
        if background:
            text += f"The retrieval documents: {background}\n"
        return text + "Step 1:\n"

    def format_documents(
        self, docs: Sequence[Passage], doc_chars: int | None, turn: int, note: str = ""
    ) -> str:
        body = _join_docs(docs, doc_chars, "({i}) {title}: {text}")
        head = f"\n{note}" if note else ""
        return f"{head}\nThe retrieval documents: {body}\nStep {turn + 1}:\n"

    def format_notice(self, message: str, turn: int) -> str:
        return f"\nThe retrieval documents: {message}\nStep {turn + 1}:\n"

    def format_error(self, reason: str, turn: int, sources: Sequence[str] = ()) -> str:
        return (
            f"\nFormat error: {reason}. Write 'The problem analysis: …' and then either "
            f"'The retrieval query: …' or 'The final answer: …'.\nStep {turn + 1}:\n"
        )

    def format_think(self, turn: int) -> str:
        return f"\nStep {turn + 1}:\n"

    #: The last-step notice (a line of its own before the next ``Step k:`` header); no label in
    #: it, so that a copy of it is not read as a final answer.
    LAST_TURN = "This is your last step: give your final answer now, a short answer."

    def last_turn(self, observation: str, turn: int) -> str:
        """The observation with the last-step notice just before its ``Step k:`` header.

        Example:
            >>> R3Protocol().last_turn("\\nThe retrieval documents: (1) A: b\\nStep 4:\\n", 3)
            '\\nThe retrieval documents: (1) A: b\\nThis is your last step: give your final \
answer now, a short answer.\\nStep 4:\\n'
        """
        header = f"Step {turn + 1}:\n"
        body = observation[: -len(header)] if observation.endswith(header) else observation
        return (body or "\n") + self.LAST_TURN + "\n" + header


PROTOCOLS: dict[str, type[Protocol]] = {"tags": TagsProtocol, "r3": R3Protocol}


def get_protocol(name: str | Protocol, parse: str | None = None) -> Protocol:
    """A protocol instance by name (``tags`` or ``r3``), or the instance given.

    Args:
        name: a name of :data:`PROTOCOLS`, or a :class:`Protocol` (returned as is when ``parse``
            is ``None`` or its own mode).
        parse: the parse mode (:data:`PARSE_MODES`); ``None`` keeps the default (``lenient``) or
            the instance's mode.

    Raises:
        hopgym.errors.InvalidOptionError: for an unknown name or parse mode, or an instance of another parse
            mode.

    Example:
        >>> get_protocol("r3", parse="strict")
        R3Protocol(parse='strict')
    """
    if isinstance(name, Protocol):
        if parse is not None and parse != name.parse_mode:
            raise InvalidOptionError(
                f"protocol {name!r} parses {name.parse_mode!r}, but parse={parse!r} "
                "was asked for: pass the protocol's name instead of an instance"
            )
        return name
    try:
        cls = PROTOCOLS[name]
    except (KeyError, TypeError):
        raise InvalidOptionError(f"unknown protocol {name!r}; choose one of {sorted(PROTOCOLS)}") from None
    return cls() if parse is None else cls(parse=parse)
