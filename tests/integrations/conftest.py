from __future__ import annotations

import gymnasium as gym
import pytest

import hopgym  # noqa: F401


@pytest.fixture
def tiny_sample():
    env = gym.make("hopgym/Tiny-v1")
    env.reset(options={"question_id": "tiny-6"})
    return env.unwrapped.sample
