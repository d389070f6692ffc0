"""hopgym envs in verifiers (``verifiers.v1``): :func:`load_environment`.

``load_environment("hopgym/Synthetic-v1", **env_kwargs)`` returns a verifiers ``Env`` whose
taskset is the hopgym env's questions (one task per question, its prompt hopgym's) and whose
episodes are played against hopgym's env: the model's first reply is the first turn, each hopgym
observation (search results, or the corrective message for a malformed turn) goes back as the
next user turn, and the exchange ends when hopgym's env ends the episode. The score is hopgym's
composed reward, each reward term recorded as its own reward (weight 1), so that verifiers'
total equals hopgym's episode reward and every term is reported beside it; ``turns``,
``invalid_turns`` and ``answered`` are metrics. Turns use the tags protocol (hopgym's default;
any ``protocol=`` option is passed on to the env).

The module is a verifiers plugin in its own right: once it is imported, a run config naming the
taskset id ``"hopgym"`` loads the same classes (with ``env_id`` and ``env_kwargs`` as the
taskset's fields). verifiers imports a plugin by a top-level name, or from its own
``verifiers.v1.tasksets`` package, and cannot import a dotted one such as this module's; so
importing it files the module there as ``verifiers.v1.tasksets.hopgym``. The
player's harness is verifiers' ``null`` harness (a plain chat loop, no tools, no sandbox).

Needs ``pip install 'hopgym[verifiers]'``; without it, importing this module raises
:class:`~hopgym.errors.DependencyNotInstalled`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import gymnasium as gym

from hopgym.integrations._common import add_terms, make_env, question_rows, require

require("verifiers.v1", "verifiers")
import verifiers.v1 as vf  # noqa: E402
from verifiers.v1.harnesses.null import NullHarnessConfig  # noqa: E402

# verifiers finds a plugin's classes through ``__all__``: exactly one Taskset and one Env here.
__all__ = ["load_environment", "HopgymTaskset", "HopgymEnv", "HopgymTasksetConfig", "HopgymEnvConfig"]

#: The taskset id verifiers knows this module by (see the end of the module).
TASKSET_ID = "hopgym"


class HopgymTasksetConfig(vf.TasksetConfig):
    """Which hopgym env to play: its id and its keyword arguments (``gym.make``'s)."""

    env_id: str = "hopgym/Synthetic-v1"
    env_kwargs: dict[str, Any] = {}


class HopgymData(vf.TaskData):
    """One question: its id (the env resets on it) and gold answers (never shown to the model)."""

    question_id: str
    answers: list[str] = []


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

    def load(self) -> Iterator[HopgymTask]:
        for row in question_rows(self.env):
            obs, _ = self.env.reset(options={"question_id": row["question_id"]})
            data = HopgymData(
                name=row["question_id"], prompt=obs, question_id=row["question_id"], answers=row["answers"]
            )
            yield HopgymTask(data, self.config.task)


class HopgymEnvConfig(vf.EnvConfig):
    """The run's agent: one ``player`` on the null (chat) harness."""

    player: vf.AgentConfig = vf.AgentConfig(harness=NullHarnessConfig(id="null"))


class HopgymEnv(vf.Env[HopgymEnvConfig]):
    """Plays one hopgym episode per verifiers episode (see the module docstring)."""

    def __init__(self, config: HopgymEnvConfig) -> None:
        super().__init__(config)
        # Concurrent episodes each take an env of their own; finished ones go back here.
        self._free: list[gym.Env] = [self.taskset.env]  # type: ignore[attr-defined]

    def _env(self) -> gym.Env:
        if self._free:
            return self._free.pop()
        cfg = self.taskset.config
        return make_env(cfg.env_id, **cfg.env_kwargs)  # type: ignore[attr-defined]

    async def run(self, task: Any, agents: Any) -> None:
        env = self._env()
        try:
            await play(env, task.data.question_id, agents.player.interaction(task))
        finally:
            self._free.append(env)


async def play(env: gym.Env, question_id: str, interaction_cm: Any) -> dict[str, float]:
    """One episode of ``env`` on ``question_id`` against a verifiers interaction, scored on its trace.

    Each of hopgym's reward terms, summed over the episode, is recorded on the trace as a reward
    of weight 1 (so verifiers' total is hopgym's reward); turns, invalid turns and whether it
    answered are recorded as metrics.

    Returns:
        the episode's reward terms by name.
    """
    env.reset(options={"question_id": question_id})
    terms: dict[str, float] = {}
    turns = invalid = answered = 0
    async with interaction_cm as interaction:
        segment = await interaction.turn()  # the task's prompt is hopgym's: the model speaks first
        while not segment.terminated:
            obs, _, terminated, truncated, info = env.step(segment.last_reply)
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


# verifiers resolves a taskset id ``x`` to ``verifiers.v1.tasksets.x`` or a top-level ``x``; a
# dotted module name cannot be an id (its find_spec fails on the missing parent package).
sys.modules.setdefault(f"verifiers.v1.tasksets.{TASKSET_ID}", sys.modules[__name__])
