"""What every adapter shares: building a hopgym env by id, and importing a framework lazily.

Functions: :func:`make_env` (``gym.make`` behind a check of the id, so that an unknown id fails
with hopgym's error naming it), :func:`require` (import a framework or raise
:class:`~hopgym.errors.DependencyNotInstalled` naming the extra), :func:`add_terms` (sum
``info["reward_terms"]`` over an episode), :func:`replay_episode` (hopgym's own reward for a list of
turns: what the adapters' checks compare a trainer's reward with).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import gymnasium as gym

from hopgym._kwargs import unknown_name_error
from hopgym.errors import DependencyNotInstalled, InvalidOptionTypeError

__all__ = [
    "make_env",
    "require",
    "add_terms",
    "replay_episode",
    "text_env_ids",
    "question_rows",
    "check_question",
    "plain_info",
    "INFO_KEYS",
]


def text_env_ids() -> list[str]:
    """The registered hopgym text-env ids (the featurized env takes no text and is left out)."""
    return [i for i in gym.registry if i.startswith("hopgym/") and "Featurized" not in i]


def make_env(env_id: str, **env_kwargs: Any) -> gym.Env:
    """``gym.make(env_id, **env_kwargs)`` for a hopgym text env.

    Raises:
        hopgym.errors.InvalidOptionTypeError: ``env_id`` is not a registered hopgym text env (the
            message names it and the closest id), or an option is unknown.
        hopgym.errors.InvalidOptionError: an option has a bad value.

    Example:
        >>> make_env("Tiny-v1")
        Traceback (most recent call last):
            ...
        hopgym.errors.InvalidOptionTypeError: unknown env id 'Tiny-v1' (did you mean 'hopgym/Tiny-v1'?)
    """
    import hopgym  # noqa: F401  (registers the ids)

    ids = text_env_ids()
    if not isinstance(env_id, str):
        raise InvalidOptionTypeError(f"env_id must be a string such as 'hopgym/Synthetic-v1', got {env_id!r}")
    if env_id not in ids:
        raise unknown_name_error(env_id, ids, what="env id")
    return gym.make(env_id, **env_kwargs)


def require(module: str, extra: str) -> ModuleType:
    """Import ``module`` or raise :class:`~hopgym.errors.DependencyNotInstalled` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra(module, extra) from exc


def add_terms(total: dict[str, float], info: Mapping[str, Any]) -> dict[str, float]:
    """Add one step's ``info["reward_terms"]`` into ``total`` (in place) and return it."""
    for name, value in info.get("reward_terms", {}).items():
        total[name] = total.get(name, 0.0) + float(value)
    return total


def replay_episode(
    env_id: str, question_id: str, turns: list[Any], **env_kwargs: Any
) -> tuple[float, dict[str, float], list[Any]]:
    """Play ``turns`` on a fresh ``gym.make(env_id, **env_kwargs)`` reset on ``question_id``.

    Returns hopgym's episode reward, its reward terms summed over the steps, and the observations;
    turns after the one that ends the episode are not played.

    Example:
        >>> total, terms, _ = replay_episode("hopgym/Tiny-v1", "tiny-1", ["<answer>1962</answer>"])
        >>> total, terms
        (1.0, {'outcome': 1.0})
    """
    env = make_env(env_id, **env_kwargs)
    try:
        env.reset(options={"question_id": check_question(env, question_id)})
        total, terms, observations = 0.0, dict[str, float](), list[Any]()
        for turn in turns:
            obs, reward, terminated, truncated, info = env.step(turn)
            total += float(reward)
            observations.append(obs)
            add_terms(terms, info)
            if terminated or truncated:
                break
    finally:
        env.close()
    return total, terms, observations


def question_rows(env: gym.Env) -> list[dict[str, Any]]:
    """One row per question of ``env``'s task: ``question_id``, ``question``, ``answers``.

    The rows are what a trainer's dataset carries; the adapter resets the env on
    ``question_id``, so the env (not the dataset) decides what the agent sees.
    """
    return [
        {"question_id": s.id, "question": s.question, "answers": list(s.answers)}
        for s in env.unwrapped.task.samples  # type: ignore[attr-defined]
    ]


#: The ``info`` keys an adapter passes on: plain JSON values (``documents`` holds Passage objects).
INFO_KEYS = (
    "question_id",
    "turn",
    "action_type",
    "invalid_action",
    "query",
    "source",
    "answer",
    "new_ids",
    "reward_terms",
)


def plain_info(info: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON-safe part of a step's ``info`` (see :data:`INFO_KEYS`)."""
    return {k: info[k] for k in INFO_KEYS if k in info}


def check_question(env: gym.Env, question_id: Any) -> str:
    """``question_id`` as a string, or an error naming it if ``env``'s task has no such question.

    Raises:
        hopgym.errors.InvalidOptionTypeError: no question has that id (the message names the closest).
    """
    ids = [s.id for s in env.unwrapped.task.samples]  # type: ignore[attr-defined]
    if str(question_id) not in ids:
        raise unknown_name_error(str(question_id), ids, what="question_id")
    return str(question_id)
