from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import pytest

import hopgym  # noqa: F401

# The tests import their shared helpers as ``from episodes import ...``: this folder is a package
# (``__init__.py``), so pytest does not put it on sys.path when run from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def tiny_sample():
    env = gym.make("hopgym/Tiny-v1")
    env.reset(options={"question_id": "tiny-6"})
    return env.unwrapped.sample
