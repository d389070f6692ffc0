"""Scripted turns and hopgym's own rewards for them, shared by the adapter tests."""

from __future__ import annotations

import gymnasium as gym

import hopgym  # noqa: F401


def oracle_turns(sample) -> list[str]:
    """The gold decomposition as tagged turns: one search per hop, then the answer."""
    turns = [
        f"<think>hop {i}</think><search>{hop.query}</search>" for i, hop in enumerate(sample.decomposition)
    ]
    return [*turns, f"<think>done</think><answer>{sample.answers[0]}</answer>"]


def reference_episode(env_id: str, question_id: str, turns: list, **env_kwargs) -> tuple[float, dict, list]:
    """hopgym's own reward, reward terms and observations for ``turns`` (plain gym.make)."""
    env = gym.make(env_id, **env_kwargs)
    env.reset(options={"question_id": question_id})
    total, terms, observations = 0.0, {}, []
    for turn in turns:
        obs, reward, terminated, truncated, info = env.step(turn)
        total += reward
        observations.append(obs)
        for k, v in info["reward_terms"].items():
            terms[k] = terms.get(k, 0.0) + v
        if terminated or truncated:
            break
    return total, terms, observations
