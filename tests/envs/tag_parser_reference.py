"""The tag parser as it was before it was made linear (issue 21): a reference for
``test_protocols.py``, which checks that the linear parser reads every turn as this one does.

Quadratic in the number of tags; test-only, never imported by ``hopgym``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from hopgym.turns import FormatIssue, ParsedTurn, Think
from hopgym.turns.base import make_action as _make_action
from hopgym.turns.base import quote as _quote
from hopgym.turns.base import strip_spans as _strip_spans
from hopgym.turns.tags import (
    _ANY_TAG_RE,
    _IN_THINK_ERROR,
    _INFO_ERROR,
    _NESTED_ERROR,
    TagsProtocol,
    _no_action_error,
    _Tag,
    _truncated_error,
)


def valid_issues(turn: ParsedTurn) -> ParsedTurn:
    """``turn`` without format issues when it is invalid (it reports its error instead)."""
    return turn if turn.action is not None or not turn.issues else replace(turn, issues=())


_TAG_RE = re.compile(r"<(think|search|route|answer)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_LOOSE_TAG_RE = re.compile(r"<\s*(/?)\s*(think|search|route|answer|information)\s*>", re.IGNORECASE)


def _tags(text: str) -> list[_Tag]:
    return [
        _Tag(
            m.start(),
            m.end(),
            bool(m.group(1)),
            m.group(2).lower(),
            m.group(0).lower() == f"<{m.group(1)}{m.group(2)}>".lower(),
        )
        for m in _LOOSE_TAG_RE.finditer(text)
    ]


def _open_at_end(tags: Sequence[_Tag]) -> str | None:
    """The think/action tag left open at the end of the text, if any."""
    open_: list[str] = []
    for t in tags:
        if t.name == "information":
            continue
        if not t.closing:
            open_.append(t.name)
        elif t.name in open_:
            del open_[len(open_) - 1 - open_[::-1].index(t.name) :]
    return open_[-1] if open_ else None


class ReferenceTagsProtocol(TagsProtocol):
    """:class:`~hopgym.turns.TagsProtocol` with the old (quadratic) parser."""

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        if self.parse_mode == "strict":
            return valid_issues(self._parse_strict(text, sources))
        return valid_issues(self._parse_lenient(text, sources))

    def _parse_strict(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        blocks = [(m.group(1).lower(), m.group(2), m.span()) for m in _TAG_RE.finditer(text)]
        # Anything tag-shaped left after removing the well-formed blocks is unbalanced or stray.
        rest = _TAG_RE.sub("", text)
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
        # Blank thoughts dropped, as in lenient mode (commit 91d24e9 fixed this in the parser).
        think = "\n".join(b for b in (body.strip() for kind, body, _ in blocks if kind == "think") if b)
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
            j = next((k for k in range(i + 1, len(tags)) if tags[k].name == t.name and tags[k].closing), None)
            if j is None:
                issue("stray_tag", f"<{t.name}> is never closed")
                covered.append((t.start, t.end))
                prev_end = t.end
                i += 1
                continue
            if j > i + 1:
                return ParsedTurn(None, error=_NESTED_ERROR, issues=tuple(issues))
            if think_at is not None:
                later = next((u for u in tags[j + 1 :] if u.name == "think"), None)
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
        outside = _strip_spans(text, covered, " ")
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
