"""The ``tags`` protocol (Search-R1 style): :class:`TagsProtocol`.

A turn is ``<think>…</think>`` followed by one of ``<search>q</search>``, ``<route>src</route>`` or
``<answer>a</answer>``; a turn with only ``<think>`` is a think step.

Each protocol reads turns in one of two *parse modes* (:data:`~hopgym.turns.base.PARSE_MODES`):

- ``lenient`` (the default): the action is read from the turn's first complete action block
  wherever the thought opens or closes, as Search-R1 reads its rollouts
  (``re.search(r"<(search|answer)>(.*?)</\\1>", turn)``). Flaws the parser can read past — an
  unclosed ``<think>``, text outside the tags, spaces inside a tag — are *format issues*
  (:data:`~hopgym.turns.actions.FORMAT_ISSUES`), reported in ``ParsedTurn.issues``, not invalid
  turns.
- ``strict``: hopgym's original rules; every unbalanced or stray tag makes the turn invalid.

A turn of more than :data:`~hopgym.turns.base.MAX_TAGS` tags is invalid in both modes
(degenerate text: the count stops at the limit, so such a turn costs little to refuse).

In both modes a turn is invalid when it holds no complete action block (and is not a think-only
turn), two different actions, an action block nested in a closed ``<think>…</think>`` (even
beside an action outside it: a thought may not hold an action, so that no answer hides in one) or
in another tag, or an ``<information>`` tag of its own. Issues that strict mode accepts too (text
outside the tags) are reported in both modes. Every reader of a turn (the env, the reward
functions, the agents) reads it through this parser, in time linear in the turn's length.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

from hopgym.turns.actions import Action, ParsedTurn, Think
from hopgym.turns.base import (
    ARGUMENT,
    Protocol,
    Reading,
    cut_blocks,
    make_action,
    over_limit,
    quote,
    routes,
    split_docs,
    strip_spans,
)

__all__ = ["TagsProtocol"]

_TAG_NAMES = ("think", "search", "route", "answer", "information")
# The parser is linear in the length of the turn (a 1 MB turn of tags parses in well under a
# second): the regular expressions below never backtrack far (possessive white space; no lazy
# ".*?" to a back-reference), and each tag is visited a bounded number of times.
_ANY_TAG_RE = re.compile(r"</?(think|search|route|answer|information)>", re.IGNORECASE)
# Lenient mode also reads tags with spaces inside the brackets ("< search >", "</ answer>").
_LOOSE_TAG_RE = re.compile(r"<\s*+(/?)\s*+(think|search|route|answer|information)\s*+>", re.IGNORECASE)
# The canonical turn, as models trained on the protocol write it: an optional <think> block, then
# at most one action block, in lower case, with nothing but white space around them and no "<"
# inside. Both parse modes read such a turn the same way, so it skips the general parser.
_CANONICAL_RE = re.compile(r"\s*(?:<think>([^<]*)</think>\s*)?(?:<(search|route|answer)>([^<]*)</\2>\s*)?")

_INFO_OPEN_RE = re.compile(r"<information>", re.IGNORECASE)
_INFO_CLOSE_RE = re.compile(r"</information>", re.IGNORECASE)
_INFO_ERROR = "<information> is written by the environment, not by you"
_NESTED_ERROR = "nested tags: a tag may not contain another tag"
_IN_THINK_ERROR = (
    "an action inside <think>…</think> does not count: close the thought with </think>, then write the action"
)


def _no_action_error(sources: Sequence[str]) -> str:
    """Why a turn with no action block is invalid; routing is named only with several sources."""
    tags = "<search>, <route> or <answer>" if routes(sources) else "<search> or <answer>"
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
    return name if name in _TAG_NAMES else next(n for n in _TAG_NAMES if re.fullmatch(n, written, re.I))


def _tags(text: str) -> list[_Tag]:
    return [  # exact: no white space matched inside the brackets
        _Tag(m.start(), m.end(), m[1] == "/", _tag_name(m[2]), len(m[0]) == len(m[1] + m[2]) + 2)
        for m in _LOOSE_TAG_RE.finditer(text)
    ]


def _open_at_end(tags: Sequence[_Tag]) -> str | None:
    """The think/action tag left open at the end of the text, if any (the tags are at most
    :data:`~hopgym.turns.base.MAX_TAGS`: a search of the stack per tag stays cheap)."""
    open_: list[str] = []  # a stack; a closing tag closes its innermost opening and all above it
    for t in tags:
        if t.name != "information" and not t.closing:
            open_.append(t.name)
        elif t.name in open_:
            del open_[len(open_) - 1 - open_[::-1].index(t.name) :]
    return open_[-1] if open_ else None


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
    system_prompt = (
        "You are a careful research assistant who answers questions by searching a document "
        "collection. Write exactly one step per reply: your reasoning inside <think> and </think>, "
        "then exactly one of <search> query </search>, <route> source </route> or "
        "<answer> answer </answer>, and stop. Never write <information> yourself: the search "
        "results come in the next message. Keep your reasoning short. The answer is a short "
        "span, such as a name, a place, a year, yes or no, without explanation.\n"
        "Example replies:\n"
        "<think>I need the founder of Acme first.</think><search> Acme founder </search>\n"
        "<think>Acme was founded by Jo Lee, who was born in Beijing.</think>"
        "<answer> Beijing </answer>"
    )
    closed_book_prompt = (
        "Answer the question from your own knowledge, without searching. Reply with the answer "
        "only, as a short span inside <answer> and </answer>, for example <answer>Paris</answer>."
    )
    PROMPT = (
        "Answer the question by reasoning and searching step by step. In every turn, first reason inside "
        "<think> and </think>, then do exactly one of:\n- <search> query </search> to search; the results "
        "come back between <information> and </information>.\n",
        "- <route> source </route> to choose where later searches go: {names}. Searches start in {first}.\n",
        "- <answer> answer </answer> to give the final answer as a short span, without explanation. This "
        "ends the episode.\nYou have at most {max_turns} turns.\nQuestion: {question}\n",
        "<information>{background}</information>\n",
    )
    NOTICE = "\n<information>{}</information>\n"

    def split_text(self, text: str) -> list[str]:
        """The model's turns of a rollout's text: the ``<information>…</information>`` blocks
        (the env's observations) cut out.

        Example:
            >>> TagsProtocol().split_text("<search>a</search><information>x</information><answer>b</answer>")
            ['<search>a</search>', '<answer>b</answer>']
        """
        return cut_blocks(text, _INFO_OPEN_RE, _INFO_CLOSE_RE)

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        m = _CANONICAL_RE.fullmatch(text)
        if m is not None:  # as both modes read it (a blank thought: the general parser says why)
            thought, kind, body = m.groups()
            think = thought.strip() if thought is not None else ""
            if kind is not None:
                return make_action(kind, body, think, sources)
            if think:
                return ParsedTurn(Think(think), think)
        return over_limit(text, (_LOOSE_TAG_RE,), "tags in one turn") or self._scan(text, sources)

    def _scan(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        """The general parser of both modes: one pass over the tags in order (strict mode reads
        only the tags written without spaces). A block is an opening tag and the next tag, its
        closing one; an opening tag closed only after other tags is nested; any other tag is
        stray (lenient: a format issue; strict: the turn is invalid). Lenient mode reads a
        ``<think>`` left open, or closed without being opened, as the thought around it.

        Longer than most functions on purpose: it is a small state machine (the open
        ``<think>``, the end of the last tag handled, the spans covered), and each branch's
        effect on that state reads best in one place.
        """
        strict = self.parse_mode == "strict"
        tags = [t for t in _tags(text) if t.exact or not strict]
        if not strict and any(t.name == "information" for t in tags):
            return ParsedTurn(None, error=_INFO_ERROR)
        r = Reading()
        last_closing = {u.name: k for k, u in enumerate(tags) if u.closing}  # per name, its index
        bad = next((t for t in tags if not t.exact), None)
        if bad is not None:
            r.issue("malformed_tag", f"spaces inside a tag: {text[bad.start : bad.end]!r}")
        covered: list[tuple[int, int]] = []  # thought and action spans, tags included
        think_at: int | None = None  # where the open <think>'s text starts
        i = 0
        while i < len(tags):
            t, last_end = tags[i], tags[i - 1].end if i else 0  # the end of the last tag handled
            i += 1
            if t.name == "think" and not strict:
                if not t.closing:
                    if think_at is not None:  # a second <think> while one is open
                        r.issue("unclosed_think", "<think> opened again before </think>")
                        r.thoughts.append(text[think_at : t.start])
                    think_at = t.end
                    covered.append((t.start, t.end))
                else:
                    if think_at is None:
                        # "reasoning</think>": the text since the last tag is the thought (a chat
                        # template may have opened the <think> already).
                        r.issue("unopened_think", "</think> without <think>")
                    since = last_end if think_at is None else think_at
                    r.thoughts.append(text[since : t.start])
                    covered.append((since, t.end))
                    think_at = None
                continue
            close = tags[i] if i < len(tags) else None  # a block is an opening tag and its closing one
            if t.closing or close is None or close[2:4] != (True, t.name) or t.name == "information":
                if not t.closing and t.name != "information" and last_closing.get(t.name, -1) > i:
                    return ParsedTurn(None, error=_NESTED_ERROR)  # closed after other tags
                if not strict:
                    stray = (
                        f"{text[t.start : t.end]} without its opening tag"
                        if t.closing
                        else f"<{t.name}> is never closed"
                    )
                    r.issue("stray_tag", stray)
                    covered.append((t.start, t.end))
                continue
            if think_at is not None:
                if next((u.closing for u in tags[i + 1 :] if u.name == "think"), False):  # </think> next
                    return ParsedTurn(None, error=_IN_THINK_ERROR)
                r.issue("unclosed_think", "<think> is never closed")
                r.thoughts.append(text[think_at : t.start])
                covered.append((think_at, t.start))
                think_at = None
            body = text[t.end : close.start]
            if t.name == "think":
                r.thoughts.append(body)
            else:
                r.acts.append((t.name, " ".join(body.split())))
            covered.append((t.start, close.end))
            i += 1
        # Strict: anything tag-shaped left once the blocks are cut out is unbalanced or stray.
        stray_tag = _ANY_TAG_RE.search(strip_spans(text, covered)) if strict else None
        if stray_tag is not None and stray_tag[0].lower() in ("<information>", "</information>"):
            return ParsedTurn(None, error=_INFO_ERROR)
        # With no action, a turn that ends inside a tag (an open <think> at least) was cut short
        # (in strict mode, only a turn with a stray tag can: without one, every tag is in a block).
        if not r.acts:
            open_tag = _open_at_end(tags) or ("think" if think_at is not None else None)
            if open_tag is not None:
                return ParsedTurn(None, error=_truncated_error(open_tag), truncated=True)
        if stray_tag is not None:
            return ParsedTurn(None, error=f"unbalanced tag {stray_tag[0]}: close every tag you open")
        if think_at is not None:
            r.issue("unclosed_think", "<think> is never closed")
            r.thoughts.append(text[think_at:])
            covered.append((think_at, len(text)))
        outside = strip_spans(text, covered, "" if strict else " ")
        if outside.strip():
            r.issue("text_outside_tags", f"text outside the tags: {quote(outside)}")
        think = "\n".join(t.strip() for t in r.thoughts if t.strip())
        if r.acts:
            duplicate = None if strict else f"<{r.acts[0][0]}> written {len(r.acts)} times"
            return r.action(think, sources, "turn", duplicate)
        if think:
            return ParsedTurn(Think(think), think=think, issues=tuple(r.issues.values()))
        return ParsedTurn(None, error=_no_action_error(sources))

    # ------------------------------------------------------------------ writing
    def render(self, action: Action) -> str:
        if isinstance(action, Think):
            return f"<think>{action.text}</think>"
        think = f"<think>{action.think}</think>" if action.think else ""
        return f"{think}<{action.kind}>{getattr(action, ARGUMENT[action.kind])}</{action.kind}>"

    def documents_of(self, observation: str, count: int) -> list[tuple[str, str]] | None:
        body = observation.strip()
        if "<information>" not in body:
            return None
        body = body.split("<information>", 1)[1].rsplit("</information>", 1)[0].strip()
        return split_docs(body, "Doc 1 (Title: ", r"\nDoc \d+ \(Title: ", ") ", count)

    def format_error(self, reason: str, turn: int, sources: Sequence[str] = ()) -> str:
        actions = (
            "exactly one of <search>query</search>, <route>source</route> or <answer>answer</answer>"
            if routes(sources)
            else "either <search>query</search> or <answer>answer</answer>"
        )
        return self.format_notice(
            f"Invalid turn: {reason}. Write <think>…</think> followed by {actions}.", turn
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
