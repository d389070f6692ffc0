"""Scripted turns and hopgym's own rewards for them, shared by the adapter tests."""

from __future__ import annotations

import hopgym  # noqa: F401
from hopgym.integrations._common import replay_episode


def oracle_turns(sample) -> list[str]:
    """The gold decomposition as tagged turns: one search per hop, then the answer."""
    turns = [
        f"<think>hop {i}</think><search>{hop.query}</search>" for i, hop in enumerate(sample.decomposition)
    ]
    return [*turns, f"<think>done</think><answer>{sample.answers[0]}</answer>"]


def reference_episode(env_id: str, question_id: str, turns: list, **env_kwargs) -> tuple[float, dict, list]:
    """hopgym's own reward, reward terms and observations for ``turns`` (plain gym.make)."""
    return replay_episode(env_id, question_id, turns, **env_kwargs)
