"""Stop strings: where a model's turn ends, and what of the stop string the turn keeps.

Functions: :func:`stop_is_kept`, :func:`cut_at_stop`, :func:`close_open_tag` (also re-exported by
:mod:`hopgym.agents.prompts`), :func:`merge_reasoning`.

A protocol's ``stop`` strings end one model turn. Those that close a tag (``</search>``) belong to
the turn and are kept; the others (``r3``'s ``"\\nThe retrieval documents:"``, ``"\\nStep "``) are
where the model starts writing the env's part, and are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["stop_is_kept", "cut_at_stop", "close_open_tag", "merge_reasoning"]


def stop_is_kept(stop: str) -> bool:
    """Whether a stop string belongs to the model's turn: closing tags do, the env's headers don't.

    Example:
        >>> stop_is_kept("</search>"), stop_is_kept("\\nStep ")
        (True, False)
    """
    return stop.lstrip().startswith("</")


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """Cut ``text`` at the first stop string; keep it if :func:`stop_is_kept`, else drop it.

    Example:
        >>> cut_at_stop("<think>x</think><search>q</search><information>", ["</search>"])
        '<think>x</think><search>q</search>'
        >>> cut_at_stop("The final answer: Oslo\\nStep 3:", ["\\nStep "])
        'The final answer: Oslo'
    """
    found = [(at, -len(stop), stop) for stop in stops if stop and (at := text.find(stop)) >= 0]
    # The first, and the longest of those that start there (none: the whole text).
    i, _, stop = min(found, default=(len(text), 0, ""))
    return text[: i + len(stop)] if stop_is_kept(stop) else text[:i]


def close_open_tag(text: str, stops: Sequence[str]) -> str:
    """Append the closing-tag stop that a server cut off (OpenAI-style APIs drop the stop string).

    Only closing-tag stops (``</x>``) are restored, and only when ``<x>`` is open at the end.

    Example:
        >>> close_open_tag("<think>a</think><search>Acme founder", ["</search>", "</answer>"])
        '<think>a</think><search>Acme founder</search>'
        >>> close_open_tag("<think>a</think>", ["</search>"])
        '<think>a</think>'
    """
    for close in [stop.strip() for stop in stops if stop_is_kept(stop)]:
        if text.rfind("<" + close[2:]) > text.rfind(close):  # its opening tag after its last close
            return text + close
    return text


def merge_reasoning(
    text: str,
    reasoning: str | None,
    truncated: bool = False,
    *,
    open_tag: str = "<think>",
    close_tag: str = "</think>",
) -> str:
    """Put thinking that a server returned apart (``reasoning_content``) back in front of the text.

    Nothing is added when there is no reasoning or the text already opens ``open_tag``. When
    generation stopped at the token limit with no text after the thinking, the thought was cut
    before it closed, and it is left open as the model wrote it.

    Example:
        >>> merge_reasoning("<search>Acme</search>", "who founded Acme?")
        '<think>who founded Acme?</think><search>Acme</search>'
        >>> merge_reasoning("", "Acme was founded by", truncated=True)
        '<think>Acme was founded by'
        >>> merge_reasoning("The retrieval query: Acme", "need Acme",
        ...                 open_tag="The problem analysis: ", close_tag="\\n")
        'The problem analysis: need Acme\\nThe retrieval query: Acme'
    """
    if not reasoning or open_tag.strip() in text:
        return text
    return open_tag + reasoning + ("" if truncated and not text.strip() else close_tag + text)
