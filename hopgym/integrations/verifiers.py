"""hopgym envs in verifiers (``verifiers.v1``): :func:`load_environment`.

``load_environment("hopgym/Synthetic-v1", **env_kwargs)`` returns a verifiers ``Env`` whose
taskset is the hopgym env's questions (one task per question, its prompt hopgym's) and whose
episodes are played against hopgym's env: the model's first reply is the first turn, each hopgym
observation (search results, or the corrective message for a malformed turn) goes back as the
next user turn, and the exchange ends when hopgym's env ends the episode. The score is hopgym's
composed reward, each reward term recorded as its own reward (weight 1), so that verifiers'
total equals hopgym's episode reward and every term is reported beside it; ``turns``,
``invalid_turns`` and ``answered`` are metrics.

Protocols: with ``protocol="tags"`` (hopgym's default) or ``"r3"`` a turn is the model's reply
text, with any thinking the server returned apart (``reasoning_content``) put back in front of it
as hopgym's own backends do. With ``protocol="tools"`` the env's tools
(``env.unwrapped.tool_specs``: ``search``, ``answer``) are exposed as :attr:`HopgymEnv.tool_specs`
and on every task (``task.data.tools``, and the task's system prompt lists them in the hermes
``<tools>`` block that chat templates write, so a chat harness without tool servers still shows
them to the model); a turn is the model's assistant message, its structured ``tool_calls`` passed
through to hopgym's env as they are (or its text, for calls written in the text), and the next
user turn is hopgym's tool responses.

Episodes do not block the event loop: every ``reset``/``step`` of hopgym's env runs in a worker
thread (:class:`hopgym.envs.async_pool.AsyncEnv`), so many concurrent episodes of one
``HopgymEnv`` interleave on verifiers' loop.

verifiers knows the classes as the taskset id ``"hopgym-verifiers"`` (:data:`TASKSET_ID`):
``vf-eval hopgym-verifiers --env.taskset.env-id hopgym/Synthetic-v1 ...`` and every run config
naming that id load them (with ``env_id`` and ``env_kwargs`` as the taskset's fields). verifiers
imports a plugin by a top-level module name (a ``-`` read as ``_``) and reads its ``__all__``,
which must export exactly one ``Taskset`` and at most one ``Env`` subclass; hopgym's own top-level
package cannot be that module (importing it must not import verifiers), so the distribution ships
the top-level module ``hopgym_verifiers``, which re-exports this module's classes. The
player's harness is verifiers' ``null`` harness (a plain chat loop, no tools, no sandbox) in the
local ``subprocess`` runtime: verifiers installs the harness's chat program (a PEP 723 script)
with ``uv`` from a package index the first time it runs it.

Needs ``pip install 'hopgym[verifiers]'``; without it, importing this module raises
:class:`~hopgym.errors.DependencyNotInstalled`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym

from hopgym.agents.prompts import think_delimiters
from hopgym.backends import merge_reasoning
from hopgym.envs.async_pool import AsyncEnv
from hopgym.integrations._common import add_terms, make_env, question_rows, require

require("verifiers.v1", "verifiers")
import verifiers.v1 as vf  # noqa: E402
from verifiers.v1.harnesses.null import NullHarnessConfig  # noqa: E402

# verifiers finds a plugin's classes through ``__all__``: exactly one Taskset and one Env here.
__all__ = ["load_environment", "HopgymTaskset", "HopgymEnv", "HopgymTasksetConfig", "HopgymEnvConfig"]

#: The taskset id verifiers knows these classes by: it imports the top-level module
#: ``hopgym_verifiers`` (the id with ``-`` read as ``_``), which re-exports them.
TASKSET_ID = "hopgym-verifiers"


class HopgymTasksetConfig(vf.TasksetConfig):
    """Which hopgym env to play: its id and its keyword arguments (``gym.make``'s)."""

    env_id: str = "hopgym/Synthetic-v1"
    env_kwargs: dict[str, Any] = {}


class HopgymData(vf.TaskData):
    """One question: its id (the env resets on it), gold answers (never shown to the model) and,
    with ``protocol="tools"``, the env's tools as OpenAI function schemas."""

    question_id: str
    answers: list[str] = []
    tools: list[dict[str, Any]] = []


class HopgymTask(vf.Task[HopgymData, vf.State, vf.TaskConfig]):
    """A hopgym question as a verifiers task."""


class HopgymTaskset(vf.Taskset[HopgymTask, HopgymTasksetConfig]):
    """The env's questions, each with hopgym's prompt for it.

    Raises:
        hopgym.errors.InvalidOptionTypeError: an unknown env id or option (at construction).
        hopgym.errors.InvalidOptionError: an option with a bad value.
    """

    def __init__(self, config: HopgymTasksetConfig) -> None:
        super().__init__(config)
        # Built now, so that a bad id or option fails where the environment is built.
        self.env = make_env(config.env_id, **config.env_kwargs)

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        """The env's tools (OpenAI function schemas) with ``protocol="tools"``; ``[]`` otherwise."""
        return uses_tools(self.env)

    def load(self) -> Iterator[HopgymTask]:
        tools = self.tool_specs
        system = tools_system_prompt(tools) if tools else None
        for row in question_rows(self.env):
            obs, _ = self.env.reset(options={"question_id": row["question_id"]})
            data = HopgymData(
                name=row["question_id"],
                prompt=obs,
                system_prompt=system,
                question_id=row["question_id"],
                answers=row["answers"],
                tools=tools,
            )
            yield HopgymTask(data, self.config.task)


def uses_tools(env: gym.Env) -> list[dict[str, Any]]:
    """``env.unwrapped.tool_specs``: the env's tools when its protocol acts by chat tools
    (``tools``), else ``[]``."""
    return list(getattr(env.unwrapped, "tool_specs", ()))


def tools_system_prompt(tools: list[dict[str, Any]]) -> str:
    """The tools as the hermes system block chat templates write (Qwen, SmolLM3, Hermes)."""
    listed = "\n".join(json.dumps(t) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{listed}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
        '"arguments": <args-json-object>}\n</tool_call>'
    )


def turn_action(segment: Any, tools: bool, protocol: str = "tags") -> Any:
    """What hopgym's env steps on for one verifiers segment.

    The reply text; with the tools protocol, the last assistant message with its structured
    ``tool_calls`` (OpenAI's wire form, which hopgym's tools protocol reads) when it has any.
    Thinking that the server returned apart (``reasoning_content``, as ``transformers serve``,
    vLLM or SGLang do for a reasoning model) goes back in front of the text between the
    protocol's think delimiters, as hopgym's own backends put it back
    (:func:`~hopgym.backends.merge_reasoning`).
    """
    message = next((m for m in reversed(segment.messages) if isinstance(m, vf.AssistantMessage)), None)
    reasoning = message.reasoning_content if message is not None else None
    open_tag, close_tag = think_delimiters(protocol)
    if tools and message is not None and message.tool_calls:
        return {
            "role": "assistant",
            "content": merge_reasoning(
                message.content or "", reasoning, open_tag=open_tag, close_tag=close_tag
            ),
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ],
        }
    if segment.root_reply is not None or message is None:
        return segment.last_reply
    return merge_reasoning(segment.last_reply, reasoning, open_tag=open_tag, close_tag=close_tag)


class HopgymEnvConfig(vf.EnvConfig):
    """The run's agent: one ``player`` on the null (chat) harness, in the local subprocess runtime.

    The null harness runs no tools and no model-written code, so verifiers' own default runtime
    (a remote Prime sandbox, behind a tunnel that needs a Prime login) buys nothing here; another
    runtime is one option away (``--env.player.runtime.type docker``).
    """

    player: vf.AgentConfig = vf.AgentConfig(
        harness=NullHarnessConfig(id="null"), runtime=vf.SubprocessConfig()
    )


class HopgymEnv(vf.Env[HopgymEnvConfig]):
    """Plays one hopgym episode per verifiers episode (see the module docstring)."""

    #: Most hopgym steps running at once in worker threads (the rest wait, off the loop).
    MAX_WORKERS = 32

    def __init__(self, config: HopgymEnvConfig) -> None:
        super().__init__(config)
        # Concurrent episodes each take an env of their own; finished ones go back here. The
        # taskset's env stays the taskset's (``load`` resets it on the caller's thread).
        self._free: list[AsyncEnv] = []
        self._executor = ThreadPoolExecutor(self.MAX_WORKERS, thread_name_prefix="hopgym-verifiers")

    @property
    def tool_specs(self) -> list[dict[str, Any]]:
        """The env's tools (OpenAI function schemas) with ``protocol="tools"``; ``[]`` otherwise."""
        return self.taskset.tool_specs  # type: ignore[attr-defined,no-any-return]

    def _env(self) -> AsyncEnv:
        if self._free:
            return self._free.pop()
        cfg = self.taskset.config
        return AsyncEnv(make_env(cfg.env_id, **cfg.env_kwargs), self._executor)  # type: ignore[attr-defined]

    async def run(self, task: Any, agents: Any) -> None:
        env = self._env()
        try:
            await play(env, task.data.question_id, agents.player.interaction(task))
        finally:
            self._free.append(env)


async def play(env: AsyncEnv | gym.Env, question_id: str, interaction_cm: Any) -> dict[str, float]:
    """One episode of ``env`` on ``question_id`` against a verifiers interaction, scored on its trace.

    Each of hopgym's reward terms, summed over the episode, is recorded on the trace as a reward
    of weight 1 (so verifiers' total is hopgym's reward); turns, invalid turns and whether it
    answered are recorded as metrics.

    The env's ``reset`` and ``step`` run in a worker thread (a plain ``gym.Env`` is wrapped in an
    :class:`~hopgym.envs.async_pool.AsyncEnv` of its own for the episode), never on the loop.

    Returns:
        the episode's reward terms by name.
    """
    if isinstance(env, AsyncEnv):
        return await _play(env, question_id, interaction_cm)
    with ThreadPoolExecutor(1, thread_name_prefix="hopgym-verifiers") as own:
        return await _play(AsyncEnv(env, own), question_id, interaction_cm)


async def _play(env: AsyncEnv, question_id: str, interaction_cm: Any) -> dict[str, float]:
    tools = bool(uses_tools(env.env))
    protocol = str(env.env.unwrapped.options.protocol)  # type: ignore[attr-defined]
    await env.reset(options={"question_id": question_id})
    terms: dict[str, float] = {}
    turns = invalid = answered = 0
    async with interaction_cm as interaction:
        segment = await interaction.turn()  # the task's prompt is hopgym's: the model speaks first
        while not segment.terminated:
            obs, _, terminated, truncated, info = await env.step(turn_action(segment, tools, protocol))
            add_terms(terms, info)
            turns += 1
            invalid += info.get("action_type") == "invalid"
            answered |= info.get("action_type") == "answer"
            if terminated or truncated:
                break
            segment = await interaction.turn(obs)
    trace = interaction.trace
    for name, value in terms.items():
        trace.record_reward(name, value, 1.0)
    trace.record_metrics({"turns": turns, "invalid_turns": invalid, "answered": answered})
    return terms


def load_environment(env_id: str = "hopgym/Synthetic-v1", **env_kwargs: Any) -> HopgymEnv:
    """A verifiers environment over the hopgym env ``env_id`` (``gym.make(env_id, **env_kwargs)``).

    Raises:
        hopgym.errors.InvalidOptionTypeError: an unknown env id or option.
        hopgym.errors.InvalidOptionError: an option with a bad value.
    """
    config = HopgymEnvConfig(
        taskset=HopgymTasksetConfig(id=TASKSET_ID, env_id=env_id, env_kwargs=dict(env_kwargs))
    )
    env = vf.load_environment(config)
    assert isinstance(env, HopgymEnv)
    return env
