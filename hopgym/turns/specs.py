"""The env's tools as OpenAI function schemas: :func:`tool_specs`, :data:`TOOL_NAMES`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["tool_specs", "TOOL_NAMES"]

#: The tools of the env, in the order :func:`tool_specs` lists them.
TOOL_NAMES: tuple[str, ...] = ("search", "answer")


def tool_specs(sources: Mapping[str, str] | Sequence[str]) -> list[dict[str, Any]]:
    """The env's tools as OpenAI function schemas (what ``tools=`` takes).

    ``search`` takes a ``source`` (an enum of the source names) only when there are several
    sources: that is how an agent routes.

    Args:
        sources: the source names (a mapping: names to descriptions), the default first.

    Example:
        >>> [s["function"]["name"] for s in tool_specs(["local"])]
        ['search', 'answer']
        >>> search = tool_specs({"local": "", "web": "the web"})[0]["function"]
        >>> search["parameters"]["properties"]["source"]["enum"]
        ['local', 'web']
    """
    names = list(sources)
    props: dict[str, Any] = {"query": _string("The search query: a few keywords.")}
    if len(names) > 1:
        desc = sources if isinstance(sources, Mapping) else {}
        listed = ", ".join(f"{n} ({desc[n]})" if desc.get(n) else n for n in names)
        where = f"Where to search: {listed}. Default: the last source searched (at first {names[0]})."
        props["source"] = {"type": "string", "enum": names, "description": where}
    answer = _string(
        "The answer only, as a short span such as 'Oslo' or '1921', no explanation and no full sentence."
    )
    return [
        _function("search", "Search for documents about the query; returns the best new documents.", props),
        _function(
            "answer",
            "Give the final answer to the question; this ends the episode. The answer is a short span "
            "(a name, a place, a date, yes or no), not a sentence.",
            {"answer": answer},
        ),
    ]


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _function(name: str, description: str, props: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI function schema of one tool with object ``props``, of which the first is required."""
    parameters = {"type": "object", "properties": props, "required": [next(iter(props))]}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }
