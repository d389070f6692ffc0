"""Scripted agents that write tool calls: :class:`ToolCallAgent`, :func:`speak_tools`.

The scripted agents and teachers think in structured actions (``Search``, ``Route``, ``Answer``).
Under the ``tools`` protocol there is no route tool: a search names its ``source``. A
:class:`ToolCallAgent` wraps any such agent, folds each ``Route`` into the next search (the inner
agent sees the route happen at once, without a turn spent), and writes each action as the text a
model would generate: a hermes ``<tool_call>`` block after the thought. Those episodes are SFT
data for tool-calling models, and they spend no more turns than the same agent under ``tags``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from hopgym.turns.actions import Action, Route, Search, Think
from hopgym.turns.base import Protocol
from hopgym.turns.registry import get_protocol

__all__ = ["ToolCallAgent", "speak_tools"]

_ROUTES_IN_A_ROW = 8  # more Routes than this without a search: the inner agent is stuck


class ToolCallAgent:
    """Wraps an agent that acts with structured actions so that it writes tool calls.

    Args:
        agent: the inner agent (``reset()``, ``act(observation, info)``).
        protocol: the chat-tools protocol the calls are written in (a name or an instance).

    Example:
        >>> import gymnasium as gym, hopgym
        >>> from hopgym.agents.scripted import OracleAgent
        >>> env = gym.make("hopgym/Tiny-v1", protocol="tools")
        >>> agent = ToolCallAgent(OracleAgent(env))
        >>> obs, info = env.reset(seed=0)
        >>> print(agent.act(obs, info))
        <think>Who is the father of Sefa Quill?</think>
        <tool_call>
        {"name": "search", "arguments": {"query": "Sefa Quill father"}}
        </tool_call>
    """

    def __init__(self, agent: Any, protocol: str | Protocol = "tools") -> None:
        self.agent = agent
        self.protocol = get_protocol(protocol)

    def reset(self) -> None:
        self.agent.reset()

    def act(self, observation: str, info: dict[str, Any]) -> str | Action:
        action = self.agent.act(observation, info)
        route: Route | None = None
        for _ in range(_ROUTES_IN_A_ROW):
            if not isinstance(action, Route):
                break
            route = action
            # The route happens at once: the inner agent sees its effect and acts again.
            routed = {
                **info,
                "action_type": "route",
                "source": action.source,
                "routed_to": action.source,
                "query": None,
                "retrieved_ids": [],
                "new_ids": [],
                "documents": [],
                "answer": None,
                "invalid_action": None,
            }
            routed.pop("question", None)  # not a new episode
            action = self.agent.act("", routed)
        if isinstance(action, Route):
            return Think(f"route to {action.source}")  # never reached by the built-in agents
        if isinstance(action, Search) and route is not None and action.source is None:
            action = Search(action.query, action.think or route.think, source=route.source)
        if isinstance(action, str) or isinstance(action, Think):
            return action
        return self.protocol.render(action)


def speak_tools(agent: Any, env: gym.Env) -> Any:
    """``agent`` wrapped in a :class:`ToolCallAgent` when ``env``'s protocol acts by chat tools
    (``tools``), else ``agent`` itself."""
    protocol = getattr(env.unwrapped, "protocol", None)
    if getattr(protocol, "chat_tools", False) and not isinstance(agent, ToolCallAgent):
        return ToolCallAgent(agent, protocol)  # type: ignore[arg-type]
    return agent
