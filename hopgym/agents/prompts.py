"""Prompts for LLM agents: system prompts per protocol, chat messages from an env transcript.

Functions: :func:`default_system_prompt`, :func:`chat_messages`, :func:`continuation_parts`,
:func:`plain_head`;
for answer forcing, the closed-book baseline and few-shot examples: :func:`answer_prefix`,
:func:`think_delimiters`, :func:`last_turn_message`, :func:`closed_book_prompt`,
:func:`few_shot_messages`, :func:`few_shot_text`.
Constants: :data:`SYSTEM_PROMPTS`, :data:`CLOSED_BOOK_SYSTEM_PROMPTS`, :data:`CONTINUE_MESSAGE`.

An env transcript (``env.unwrapped.transcript``) is a list of ``{"role", "content"}`` messages: the
prompt (instructions and question) as the first ``user`` message, then the model's turns
(``assistant``) and the env's observations (``user``). A think-only turn under the ``tags`` protocol
has an empty observation, which the env does not record, so two ``assistant`` messages can follow
each other. Two renderings of a transcript are offered:

- *chat*: one chat message per turn (:func:`chat_messages`); observations are stripped of their
  surrounding newlines and an empty observation becomes :data:`CONTINUE_MESSAGE`, so that roles
  alternate as chat templates require.
- *continuation* (Search-R1): the prompt as the only user message and the whole rollout so far —
  turns and observations concatenated byte for byte — as one growing assistant message
  (:func:`continuation_parts`).

Stop strings (where a model's turn ends, and what of them the turn keeps) are
:mod:`hopgym.backends.stops`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from hopgym.errors import InvalidOptionError
from hopgym.turns.actions import Answer, Think
from hopgym.turns.base import Protocol
from hopgym.turns.registry import PROTOCOLS, get_protocol

__all__ = [
    "SYSTEM_PROMPTS",
    "CONTINUE_MESSAGE",
    "default_system_prompt",
    "chat_messages",
    "continuation_parts",
    "plain_head",
    "CLOSED_BOOK_SYSTEM_PROMPTS",
    "answer_prefix",
    "think_delimiters",
    "last_turn_message",
    "closed_book_prompt",
    "few_shot_messages",
    "few_shot_text",
]

#: Default system prompts, by protocol name. The env's first observation already holds the full
#: instructions; the system prompt restates the one-step-per-reply contract with an example of a
#: search and of a short answer span (Search-R1's template: "For example, <answer> Beijing
#: </answer>.").
SYSTEM_PROMPTS: dict[str, str] = {
    name: cls.system_prompt for name, cls in PROTOCOLS.items() if cls.system_prompt
}

#: The user message that stands for an empty observation (after a think-only turn) in chat mode.
CONTINUE_MESSAGE = "Continue with the next step."


def default_system_prompt(protocol: str | Protocol) -> str:
    """The default system prompt for a protocol (``""`` for a protocol without one).

    Example:
        >>> default_system_prompt("tags").startswith("You are a careful research assistant")
        True
    """
    return get_protocol(protocol).system_prompt


def _check_transcript(transcript: Sequence[dict[str, str]]) -> None:
    if not transcript:
        raise InvalidOptionError(
            "empty transcript: it must start with the env's prompt (reset's observation) as a user message"
        )
    if transcript[0].get("role") != "user":
        raise InvalidOptionError(
            f"a transcript starts with the prompt as a user message, got role {transcript[0].get('role')!r}"
        )
    for m in transcript:
        if m.get("role") not in ("user", "assistant") or not isinstance(m.get("content"), str):
            raise InvalidOptionError(
                f"transcript messages are {{'role': 'user'|'assistant', 'content': str}}, got {m!r}"
            )


def chat_messages(
    transcript: Sequence[dict[str, str]],
    system_prompt: str | None = None,
    *,
    for_generation: bool = True,
) -> list[dict[str, str]]:
    """Chat messages for a transcript: one message per turn, roles alternating.

    Args:
        transcript: the env transcript (prompt first).
        system_prompt: prepended as a ``system`` message unless ``None`` or empty.
        for_generation: when the transcript ends with the model's turn (a think-only turn), end
            the messages with :data:`CONTINUE_MESSAGE` so that the model is asked for the next one.
            Set it to ``False`` to build training data that ends with the final answer.

    Example:
        >>> t = [{"role": "user", "content": "Q?\\n"},
        ...      {"role": "assistant", "content": "<think>a</think>"},
        ...      {"role": "assistant", "content": "<search>b</search>"},
        ...      {"role": "user", "content": "\\n<information>c</information>\\n"}]
        >>> [m["content"] for m in chat_messages(t, "S")]
        ['S', 'Q?', '<think>a</think>', 'Continue with the next step.', '<search>b</search>', \
'<information>c</information>']
    """
    _check_transcript(transcript)
    out: list[dict[str, str]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    for m in transcript:
        role = m["role"]
        content = m["content"] if role == "assistant" else m["content"].strip() or CONTINUE_MESSAGE
        if out and out[-1]["role"] == role == "user":  # two observations in a row: merge them
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + content}
            continue
        if out and out[-1]["role"] == role:  # two turns in a row: the model is asked for the next
            out.append({"role": "user", "content": CONTINUE_MESSAGE})
        out.append({"role": role, "content": content})
    if for_generation and out[-1]["role"] == "assistant":
        out.append({"role": "user", "content": CONTINUE_MESSAGE})
    return out


def continuation_parts(transcript: Sequence[dict[str, str]]) -> tuple[str, str]:
    """``(prompt, rollout)``: the first user message and everything after it, concatenated.

    Example:
        >>> continuation_parts([{"role": "user", "content": "Q?\\n"},
        ...                     {"role": "assistant", "content": "<search>b</search>"},
        ...                     {"role": "user", "content": "\\n<information>c</information>\\n"}])
        ('Q?\\n', '<search>b</search>\\n<information>c</information>\\n')
    """
    _check_transcript(transcript)
    return transcript[0]["content"], "".join(m["content"] for m in transcript[1:])


def plain_head(prompt: str, system_prompt: str | None = None) -> str:
    """The start of a raw-text context, for models without a chat template.

    Example:
        >>> plain_head("Question: X?\\n", "Be brief.")
        'Be brief.\\n\\nQuestion: X?\\n'
    """
    return f"{system_prompt}\n\n{prompt}" if system_prompt else prompt


# ------------------------------------------------------------------ answer forcing, closed book
#: System prompts of the closed-book baseline (``LLMAgent(closed_book=True)``, the CLI's
#: ``--agent llm-direct``), by protocol: answer at once from memory, as a short span.
CLOSED_BOOK_SYSTEM_PROMPTS: dict[str, str] = {
    name: cls.closed_book_prompt for name, cls in PROTOCOLS.items() if cls.closed_book_prompt
}

_MARK = "\x00"


def _split_render(protocol: Protocol, action: Answer | Think) -> tuple[str, str]:
    before, _, after = protocol.render(action).partition(_MARK)
    return before, after


def answer_prefix(protocol: str | Protocol) -> str:
    """The text that opens an answer under ``protocol``: what answer forcing prefills.

    It is the protocol's own rendering of an answer, up to the answer text.

    Example:
        >>> answer_prefix("tags")
        '<answer>'
        >>> answer_prefix("r3")
        'The problem analysis: -\\nThe final answer: '
    """
    return _split_render(get_protocol(protocol), Answer(_MARK))[0]


def think_delimiters(protocol: str | Protocol) -> tuple[str, str]:
    """What opens and closes a thought under ``protocol`` (reasoning returned apart by a server
    goes back between them).

    Example:
        >>> think_delimiters("tags")
        ('<think>', '</think>')
        >>> think_delimiters("r3")
        ('The problem analysis: ', '\\n')
    """
    before, after = _split_render(get_protocol(protocol), Think(_MARK))
    return before, after or "\n"


def last_turn_message(protocol: str | Protocol) -> str:
    """The protocol's last-turn notice, which the agent adds to the last observation itself when
    it cannot prefill the answer (a chat server that does not continue a final assistant message)
    and the env did not (``last_turn_notice=False``).

    Example:
        >>> last_turn_message("tags")
        'This is your last turn: give your final answer now, as a short answer in the answer tags.'
    """
    return get_protocol(protocol).last_turn("", 0).strip()


def closed_book_prompt(question: str) -> str:
    """The user message of the closed-book baseline: the question alone, without search
    instructions.

    Example:
        >>> closed_book_prompt("Who founded Acme?")
        'Question: Who founded Acme?\\n'
    """
    return f"Question: {question}\n"


def few_shot_messages(examples: Sequence[Sequence[dict[str, str]]]) -> list[dict[str, str]]:
    """Worked examples (env transcripts, each ending with the answer) as prior chat messages.

    Example:
        >>> ex = [{"role": "user", "content": "Q?\\n"},
        ...       {"role": "assistant", "content": "<answer>A</answer>"}]
        >>> [m["role"] for m in few_shot_messages([ex, ex])]
        ['user', 'assistant', 'user', 'assistant']
    """
    out: list[dict[str, str]] = []
    for example in examples:
        msgs = chat_messages(example, None, for_generation=False)
        if msgs[-1]["role"] != "assistant":
            raise InvalidOptionError("a few-shot example must end with the model's turn (its answer)")
        out += msgs
    return out


def few_shot_text(examples: Sequence[Sequence[dict[str, str]]]) -> str:
    """Worked examples as text (continuation mode): each prompt and rollout, byte for byte.

    Example:
        >>> ex = [{"role": "user", "content": "Q?\\n"},
        ...       {"role": "assistant", "content": "<answer>A</answer>"}]
        >>> print(few_shot_text([ex]))
        Example 1:
        Q?
        <answer>A</answer>
    """
    return "\n\n".join(
        f"Example {i}:\n" + "".join(continuation_parts(ex)) for i, ex in enumerate(examples, 1)
    )
