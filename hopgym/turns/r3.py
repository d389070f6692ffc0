"""The ``r3`` protocol (R3-RAG's plain-text steps): :class:`R3Protocol`."""

from __future__ import annotations

import re
from collections.abc import Sequence

from hopgym.corpora.types import Passage
from hopgym.turns.actions import Action, ParsedTurn, Think
from hopgym.turns.base import (
    ARGUMENT,
    Protocol,
    Reading,
    between,
    join_docs,
    over_limit,
    quote,
    split_docs,
)

__all__ = ["R3Protocol"]

_R3_FIELDS = {
    "the problem analysis:": "think",
    "the retrieval query:": "search",
    "the retrieval source:": "route",
    "the final answer:": "answer",
}
_R3_LABEL = {kind: label.capitalize() for label, kind in _R3_FIELDS.items()}  # "The final answer:"
_R3_LABELS = f"({'|'.join([*_R3_FIELDS, 'the retrieval documents:'])})"  # the model's and the env's
# Strict: a label at the start of a line, after white space (see _at_line_starts).
_R3_RE = re.compile(r"(?i)" + _R3_LABELS)
# Lenient: a label anywhere, as long as it starts a word ("...done. The final answer: X").
_R3_LOOSE_RE = re.compile(r"(?i)(?<![a-z])" + _R3_LABELS)
_R3_NOT_ANALYSIS_RE = re.compile(r"(?i)(?<![a-z])(?!the problem analysis:)" + _R3_LABELS)
_R3_ENV_RE = re.compile(r"(?i)(?:the retrieval documents:|format error:)")
_R3_STEP_RE = re.compile(r"(?im)step\s+\d+\s*:\s*$")
_LINE_START_RE = re.compile(r"(?m)^\s*+")  # a line start and the white space after it
_R3_STEP_HEAD_RE = re.compile(r"(?im)^[ \t]*step\s+\d+\s*:[ \t]*")
_R3_DOCS_ERROR = "'The retrieval documents:' is written by the environment, not by you"
_R3_TRUNCATED_ERROR = (
    "the step ended inside 'The problem analysis:' before a query or an answer "
    "(cut off at the length limit?): keep the analysis short"
)
_SENTENCE_END = tuple(".!?\"')]»”’")


def _at_line_starts(body: re.Pattern[str], text: str) -> list[tuple[int, int, re.Match[str]]]:
    """``(start, end, body's match)`` of each match of ``(?m)^\\s*`` + ``body`` in ``text``, as
    ``finditer`` finds them (leftmost, not overlapping), for a ``body`` that starts with a
    character that is not white space.

    In time linear in ``text``: as one regular expression, ``^\\s*`` scans a run of white space
    from each line start inside it, which is quadratic in a run of blank lines. All those line
    starts reach the same end of the run, so it is scanned once (a search for a line start and
    its white space goes on after the run): the match starts at the first line start in the
    run and ``body`` must match where the run ends.
    """
    out: list[tuple[int, int, re.Match[str]]] = []
    pos = 0
    while pos <= len(text) and (run := _LINE_START_RE.search(text, pos)) is not None:
        m = body.match(text, run.end())
        if m is not None:
            out.append((run.start(), m.end(), m))
        # After a run that body does not follow: every line start in it reaches the same end.
        pos = run.end() + 1 if m is None else m.end()
    return out


def _steps(text: str) -> list[str]:
    """``text`` cut at each ``Step k:`` header (at the start of a line), the headers dropped."""
    return between(text, [(start, end) for start, end, _ in _at_line_starts(_R3_STEP_RE, text)])


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
    system_prompt = (
        "You are a careful research assistant who answers questions by searching a document "
        "collection. Write exactly one step per reply: a line 'The problem analysis: ...' and then "
        "either a line 'The retrieval query: ...' or a line 'The final answer: ...', and stop. "
        "Never write 'The retrieval documents:' yourself: they come in the next message. Keep "
        "the analysis short. The final answer is a short span, such as a name, a place, a year, "
        "yes or no, without explanation.\n"
        "Example replies:\n"
        "The problem analysis: I need the founder of Acme first.\n"
        "The retrieval query: Acme founder\n\n"
        "The problem analysis: Acme was founded by Jo Lee, who was born in Beijing.\n"
        "The final answer: Beijing"
    )
    closed_book_prompt = (
        "Answer the question from your own knowledge, without searching. Reply with one line "
        "'The final answer: ...' that holds only the answer as a short span, for example "
        "'The final answer: Paris'."
    )
    PROMPT = (
        "Solve the question step by step. Each step starts with 'The problem analysis:' and ends with "
        "either 'The retrieval query:' (a search query; documents follow) or 'The final answer:' (a short "
        "answer; this ends the episode).\n",
        "Instead of a query, 'The retrieval source:' chooses where later queries go: {names}. Queries "
        "start in {first}.\n",
        "You have at most {max_turns} steps.\nThe question: {question}\n",
        "The retrieval documents: {background}\n",
    )

    def split_text(self, text: str) -> list[str]:
        """The model's steps of a rollout's text: cut at each ``Step k:`` header, and each cut
        before the env's part (``The retrieval documents: …`` or ``Format error: …``).

        Example:
            >>> R3Protocol().split_text("The retrieval query: a\\nThe retrieval documents: (1) x\\n"
            ...                         "Step 2:\\nThe final answer: b")
            ['The retrieval query: a\\n', '\\nThe final answer: b']
        """
        return [p[: env[0][0]] if (env := _at_line_starts(_R3_ENV_RE, p)) else p for p in _steps(text)]

    def parse(self, text: str, sources: Sequence[str]) -> ParsedTurn:
        refused = over_limit(text, (_R3_LOOSE_RE, _R3_STEP_HEAD_RE), "labels in one step")
        if refused is not None:
            return refused
        lenient = self.parse_mode == "lenient"
        if lenient:
            text = _R3_STEP_HEAD_RE.sub("", text)
            marks = [(m.start(), m.end(), m) for m in _R3_LOOSE_RE.finditer(text)]
        else:
            text = "".join(_steps(text))
            marks = _at_line_starts(_R3_RE, text)
        r = Reading()
        head = text[: marks[0][0]] if marks else ""
        if head.strip():
            r.issue("text_outside_fields", f"text before the first field: {quote(head)}")
        fields: list[tuple[str, str]] = []
        for i, (start, label_end, m) in enumerate(marks):
            end = marks[i + 1][0] if i + 1 < len(marks) else len(text)
            key = m.group(1).lower()
            if key == "the retrieval documents:":
                return ParsedTurn(None, error=_R3_DOCS_ERROR)
            # Text before the label on its line; only since the previous label is looked at
            # (on the previous label's line, that label is such text), so this stays linear.
            since = marks[i - 1][0] if i else 0
            newline = text.rfind("\n", since, start)
            if (newline < 0 and i > 0) or text[newline + 1 if newline >= 0 else 0 : start].strip():
                r.issue("inline_field", f"{m.group(1)!r} inside a line")
            kind, value = _R3_FIELDS[key], text[label_end:end].strip()
            if lenient and kind != "think" and "\n" in value:
                value, rest = value.split("\n", 1)
                if rest.strip():
                    r.issue("text_outside_fields", f"text after the {kind} line: {quote(rest)}")
            fields.append((kind, value))
        think = "\n".join(v for k, v in fields if k == "think")
        if not any(k == "think" for k, _ in fields):
            r.issue("missing_analysis", "no 'The problem analysis:' line")
        r.acts = acts = [(k, " ".join(v.split())) for k, v in fields if k != "think"]
        if not acts:
            # Cut mid-sentence (the fields are analyses), with no other label anywhere (not even
            # one strict mode skips).
            cut = bool(fields) and not fields[-1][1].rstrip().endswith(_SENTENCE_END)
            cut = cut and _R3_NOT_ANALYSIS_RE.search(text) is None
            error = _R3_TRUNCATED_ERROR if cut else "no 'The retrieval query:' or 'The final answer:' line"
            return ParsedTurn(None, think=think, error=error, truncated=cut)
        duplicate = f"the {acts[0][0]} line written {len(acts)} times" if lenient else None
        return r.action(think, sources, "step", duplicate)

    def render(self, action: Action) -> str:
        think = action.text if isinstance(action, Think) else action.think
        head = f"The problem analysis: {think or '-'}"
        if isinstance(action, Think):
            return head
        return f"{head}\n{_R3_LABEL[action.kind]} {getattr(action, ARGUMENT[action.kind])}"

    def prompt(self, question: str, sources: dict[str, str], max_turns: int, background: str = "") -> str:
        return super().prompt(question, sources, max_turns, background) + "Step 1:\n"

    def format_documents(
        self, docs: Sequence[Passage], doc_chars: int | None, turn: int, note: str = ""
    ) -> str:
        head = f"\n{note}" if note else ""
        return head + self.format_notice(join_docs(docs, doc_chars, "({0}) {1}: {2}"), turn)

    def format_notice(self, message: str, turn: int) -> str:
        return f"\nThe retrieval documents: {message}\nStep {turn + 1}:\n"

    def documents_of(self, observation: str, count: int) -> list[tuple[str, str]] | None:
        body = observation.strip()
        if "The retrieval documents:" not in body:
            return None
        body = re.split(r"\nStep \d+:", body.split("The retrieval documents:", 1)[1])[0].strip()
        return split_docs(body, "(1) ", r"\n\(\d+\) ", ": ", count)

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
