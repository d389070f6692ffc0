"""Prompts for LLM agents: system prompts per protocol, chat messages from an env transcript, stops.

Functions: :func:`default_system_prompt`, :func:`chat_messages`, :func:`continuation_parts`,
:func:`plain_head`, :func:`cut_at_stop`, :func:`close_open_tag`, :func:`stop_is_kept`.
Constants: :data:`SYSTEM_PROMPTS`, :data:`CONTINUE_MESSAGE`.

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

Stop strings: a protocol's ``stop`` strings end one model turn. Those that close a tag
(``</search>``) belong to the turn and are kept; the others (``r3``'s ``"\\nThe retrieval
documents:"``, ``"\\nStep "``) are where the model starts writing the env's part, and are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

from hopgym.backends.stops import close_open_tag, cut_at_stop, stop_is_kept  # re-exported
from hopgym.envs.protocols import Protocol, get_protocol

__all__ = ["SYSTEM_PROMPTS", "CONTINUE_MESSAGE", "default_system_prompt", "chat_messages",
           "continuation_parts", "plain_head", "cut_at_stop", "close_open_tag", "stop_is_kept"]

#: Default system prompts, by protocol name. The env's first observation already holds the full
#: instructions; the system prompt restates the one-step-per-reply contract with an example of a
#: search and of a short answer span (Search-R1's template: "For example, <answer> Beijing
#: </answer>.").
SYSTEM_PROMPTS: dict[str, str] = {
    "tags": (
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
    ),
    "r3": (
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
    ),
}

#: The user message that stands for an empty observation (after a think-only turn) in chat mode.
CONTINUE_MESSAGE = "Continue with the next step."


def default_system_prompt(protocol: str | Protocol) -> str:
    """The default system prompt for a protocol (``""`` for a protocol without one).

    Example:
        >>> default_system_prompt("tags").startswith("You are a careful research assistant")
        True
    """
    return SYSTEM_PROMPTS.get(get_protocol(protocol).name, "")


def _check_transcript(transcript: Sequence[dict[str, str]]) -> None:
    if not transcript:
        raise ValueError("empty transcript: it must start with the env's prompt (reset's "
                         "observation) as a user message")
    if transcript[0].get("role") != "user":
        raise ValueError(f"a transcript starts with the prompt as a user message, got role "
                         f"{transcript[0].get('role')!r}")
    for m in transcript:
        if m.get("role") not in ("user", "assistant") or not isinstance(m.get("content"), str):
            raise ValueError(f"transcript messages are {{'role': 'user'|'assistant', 'content': "
                             f"str}}, got {m!r}")


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
        if m["role"] == "assistant" and out and out[-1]["role"] == "assistant":
            out.append({"role": "user", "content": CONTINUE_MESSAGE})
        if m["role"] == "user":
            content = m["content"].strip() or CONTINUE_MESSAGE
            if out and out[-1]["role"] == "user":  # two observations in a row: merge them
                out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + content}
                continue
            out.append({"role": "user", "content": content})
        else:
            out.append({"role": "assistant", "content": m["content"]})
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
