"""Trajectory files of the ``tools`` protocol for the viewer tests: a real ``hopgym eval`` run, and
one episode whose turns hold several calls (a tool error, calls not run, ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
from viewer_helpers import eval_run

from hopgym.agents import evaluate

TOOLS_EVAL = ("--env", "hopgym/Tiny-v1", "--protocol", "tools", "--agent", "iterative", "--episodes", "6")


def tools_eval_run(folder: Path) -> Path:
    """``hopgym eval --protocol tools --agent iterative --trajectories``: one call a turn."""
    return eval_run(folder, "tools", *TOOLS_EVAL)


def _call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


class ManyCallsAgent:
    """Two turns: (1) a search for each gold document's title, an unknown tool, then an answer
    that is not run; (2) an OpenAI assistant message: the first search again (nothing new), the
    gold answer, and a call with malformed arguments that is not run."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env

    def reset(self) -> None:
        self.turn = 0

    def act(self, observation: str, info: dict[str, Any]) -> Any:
        inner = self.env.unwrapped
        titles = [inner.task.documents[d].title for d in inner.sample.supporting_ids]
        self.turn += 1
        if self.turn == 1:
            calls = "".join(_call("search", query=t) for t in titles)
            return f"<think>both at once</think>{calls}{_call('serch')}{_call('answer', answer='x')}"
        fn = lambda name, args: {"name": name, "arguments": args}  # noqa: E731
        return {
            "role": "assistant",
            "content": "again, then answer",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": fn("search", json.dumps({"query": titles[0]}))},
                {
                    "id": "c2",
                    "type": "function",
                    "function": fn("answer", json.dumps({"answer": inner.sample.answer})),
                },
                {"id": "c3", "type": "function", "function": fn("search", '{"query": ')},
            ],
        }


def many_calls_run(folder: Path) -> Path:
    """One episode of :class:`ManyCallsAgent` in ``hopgym/Tiny-v1`` with ``protocol="tools"``."""
    env = gym.make("hopgym/Tiny-v1", protocol="tools")
    path = folder / "many_calls.jsonl"
    evaluate(env, ManyCallsAgent(env), episodes=1, trajectories=path, agent_name="many-calls")
    return path
