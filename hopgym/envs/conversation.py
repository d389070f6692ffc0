"""An episode as an OpenAI message list, rendered with a tokenizer's chat template: :class:`Conversation`.

Constants: :data:`DEFAULT_TOOLS_BLOCK`.

Under the ``tools`` protocol the env's :attr:`~hopgym.envs.multihop_qa.MultiHopQAEnv.transcript`
already is a message list (the user's question, assistant turns with their ``tool_calls``, one
``tool`` message per call); :class:`Conversation` adds the system message and the tool schemas
and renders the whole with ``tokenizer.apply_chat_template(messages, tools=...)``.

A chat template that knows no tools (it never reads ``tools``, ``tool_calls`` or the ``tool``
role) is given what it can show instead: the :data:`DEFAULT_TOOLS_BLOCK` (the schemas, and how
to write a call, in the hermes format that the ``tools`` protocol reads) at the end of the system
message, assistant calls written into their content as ``<tool_call>`` blocks, and tool results
as user messages of ``<tool_response>`` blocks.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hopgym.errors import InvalidOptionError
from hopgym.turns.base import Protocol
from hopgym.turns.registry import get_protocol

__all__ = ["Conversation", "DEFAULT_TOOLS_BLOCK"]

#: The tools block appended to the system message for a chat template without tool support
#: (``{tools}``: one JSON schema per line). Hermes' wording, which the ``tools`` protocol reads.
DEFAULT_TOOLS_BLOCK = (
    "# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n{tools}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


def _supports_tools(template: str) -> bool:
    """Whether a chat template reads tools (its schemas and the calls)."""
    return "tools" in template and "tool_calls" in template


class Conversation:
    """An episode as OpenAI chat messages (system, user question, assistant turns with tool calls,
    tool results), with the env's tool schemas.

    Args:
        messages: the messages without the system message (e.g. an env's transcript).
        tools: the tool schemas (``env.unwrapped.tool_specs``).
        system: the system message's text (``None``: no system message, unless a template
            without tool support needs one for the tools block).
        protocol: the chat-tools protocol whose text renders calls and results for a template
            without tool support (a name or an instance).

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = gym.make("hopgym/Tiny-v1", protocol="tools")
        >>> _ = env.reset(seed=0)
        >>> _ = env.step('<tool_call>{"name": "search", "arguments": {"query": "Lorn"}}</tool_call>')
        >>> [m["role"] for m in Conversation.from_env(env, system="Be brief.").messages]
        ['system', 'user', 'assistant', 'tool']
    """

    def __init__(
        self,
        messages: Iterable[Mapping[str, Any]] = (),
        tools: Sequence[Mapping[str, Any]] = (),
        system: str | None = None,
        protocol: str | Protocol = "tools",
    ) -> None:
        self._messages = [dict(m) for m in messages]
        self.tools = [dict(t) for t in tools]
        self.system = system
        self.protocol = get_protocol(protocol)

    @classmethod
    def from_env(cls, env: Any, system: str | None = None) -> Conversation:
        """The episode so far of ``env`` (any wrapper of a text env whose protocol acts by chat
        tools, such as ``tools``)."""
        base = env.unwrapped
        if not getattr(base.protocol, "chat_tools", False):
            raise InvalidOptionError(
                f"Conversation needs an env with protocol='tools', this one speaks {base.protocol.name!r}"
            )
        return cls(copy.deepcopy(base.transcript), base.tool_specs, system, base.protocol)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI message list, the system message first (tool-call arguments as JSON
        strings, as OpenAI-compatible servers take them)."""
        head = [{"role": "system", "content": self.system}] if self.system is not None else []
        return head + [dict(m) for m in self._messages]

    def append(self, message: Mapping[str, Any]) -> None:
        """Add one message (an assistant turn, a tool result, ...)."""
        self._messages.append(dict(message))

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> None:
        """Add messages, e.g. a step's ``info["tool_messages"]``."""
        for m in messages:
            self.append(m)

    # ------------------------------------------------------------------ rendering
    def template_messages(self, tools_supported: bool = True) -> list[dict[str, Any]]:
        """The messages as chat templates take them: tool-call arguments as dicts (templates
        ``tojson`` them); with ``tools_supported=False``, tools as plain text (see the module
        docstring)."""
        out: list[dict[str, Any]] = []
        for m in self.messages:
            m = dict(m)
            if m.get("tool_calls"):
                m["tool_calls"] = [_with_dict_args(c) for c in m["tool_calls"]]
            out.append(m)
        if tools_supported:
            return out
        plain: list[dict[str, Any]] = []
        block = DEFAULT_TOOLS_BLOCK.format(tools="\n".join(json.dumps(t) for t in self.tools))
        if not out or out[0]["role"] != "system":
            plain.append({"role": "system", "content": block})
        for m in out:
            if m["role"] == "system":
                plain.append({"role": "system", "content": f"{m['content']}\n\n{block}".lstrip()})
            elif m["role"] == "assistant":
                plain.append({"role": "assistant", "content": self.protocol.assistant_text(self._as_json(m))})
            elif m["role"] == "tool":
                text = self.protocol.observation_text([m]).rstrip("\n")
                if plain and plain[-1]["role"] == "user" and plain[-1].get("_tool"):
                    plain[-1]["content"] += "\n" + text
                else:
                    plain.append({"role": "user", "content": text, "_tool": True})
            else:
                plain.append({"role": m["role"], "content": m.get("content") or ""})
        for m in plain:
            m.pop("_tool", None)
        return plain

    @staticmethod
    def _as_json(message: Mapping[str, Any]) -> dict[str, Any]:
        m = dict(message)
        m["tool_calls"] = [
            {**c, "function": {**c["function"], "arguments": _json_args(c["function"]["arguments"])}}
            for c in m.get("tool_calls") or ()
        ]
        return m

    def render(
        self, tokenizer: Any, *, add_generation_prompt: bool = True, tokenize: bool = False, **kwargs: Any
    ) -> Any:
        """The conversation through ``tokenizer``'s chat template, tools included.

        Args:
            tokenizer: a Hugging Face tokenizer with a ``chat_template``.
            add_generation_prompt: end with the assistant's header (the prompt of the next turn).
            tokenize: return token ids instead of text.
            **kwargs: passed to ``apply_chat_template`` (e.g. ``enable_thinking``).
        """
        template = getattr(tokenizer, "chat_template", None) or ""
        if not isinstance(template, str):  # a dict of named templates: the default one
            template = template.get("tool_use") or template.get("default") or ""
        supported = _supports_tools(template)
        extra = {"tools": self.tools} if supported and self.tools else {}
        return tokenizer.apply_chat_template(
            self.template_messages(supported),
            add_generation_prompt=add_generation_prompt,
            tokenize=tokenize,
            **extra,
            **kwargs,
        )


def _json_args(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)


def _with_dict_args(call: Mapping[str, Any]) -> dict[str, Any]:
    fn = dict(call.get("function") or {})
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            fn["arguments"] = json.loads(args)
        except ValueError:
            pass
    return {**call, "function": fn}
