"""The R3 parser as it was before its strict mode was made linear (issue 21): a reference for
``test_r3_parser_linear.py``, which checks that the linear parser reads every turn as this one
does.

Quadratic in runs of blank lines (strict mode); test-only, never imported by ``hopgym``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from tag_parser_reference import valid_issues as _valid_issues

from hopgym.turns import FormatIssue, ParsedTurn
from hopgym.turns.base import make_action as _make_action
from hopgym.turns.base import quote as _quote
from hopgym.turns.r3 import (
    _R3_DOCS_ERROR,
    _R3_FIELDS,
    _R3_LABELS,
    _R3_LOOSE_RE,
    _R3_STEP_HEAD_RE,
    _R3_TRUNCATED_ERROR,
    _SENTENCE_END,
    R3Protocol,
)

_R3_RE = re.compile(r"(?im)^\s*" + _R3_LABELS)
_R3_STEP_RE = re.compile(r"(?im)^\s*step\s+\d+\s*:\s*$")


class ReferenceR3Protocol(R3Protocol):
    """:class:`R3Protocol` with the earlier (quadratic) parse."""

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        return _valid_issues(self._parse(text, sources))

    def _parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        lenient = self.parse_mode == "lenient"
        text = (_R3_STEP_HEAD_RE if lenient else _R3_STEP_RE).sub("", text)
        marks = list((_R3_LOOSE_RE if lenient else _R3_RE).finditer(text))
        issues: list[FormatIssue] = []

        def issue(code: str, detail: str) -> None:
            if all(i.code != code for i in issues):
                issues.append(FormatIssue(code, detail))

        head = text[: marks[0].start()] if marks else ""
        if head.strip():
            issue("text_outside_fields", f"text before the first field: {_quote(head)}")
        fields: list[tuple[str, str]] = []
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            key = m.group(1).lower()
            if key == "the retrieval documents:":
                return ParsedTurn(None, error=_R3_DOCS_ERROR, issues=tuple(issues))
            line_start = text.rfind("\n", 0, m.start()) + 1
            if text[line_start : m.start()].strip():
                issue("inline_field", f"{m.group(1)!r} inside a line")
            kind, value = _R3_FIELDS[key], text[m.end() : end].strip()
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
