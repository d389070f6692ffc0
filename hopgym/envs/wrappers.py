"""Env wrappers of the core: :class:`StepBudget`."""

from __future__ import annotations

from typing import Any

from gymnasium.wrappers import TimeLimit

__all__ = ["StepBudget"]


class StepBudget(TimeLimit):
    """A ``TimeLimit`` that never reports ``truncated`` on the step that terminates.

    Gymnasium's ``TimeLimit`` sets ``truncated=True`` whenever the budget is reached, even if the
    agent answered on that very step; hopgym's contract is that an answer on the last turn is a
    termination only (``terminated`` and ``truncated`` are never both true).

    Example:
        >>> import gymnasium as gym, hopgym
        >>> env = gym.make("hopgym/Tiny-v1", max_turns=1)
        >>> _ = env.reset(seed=0)
        >>> env.step("<answer>x</answer>")[2:4]
        (True, False)
    """

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if terminated:
            truncated = False
        return obs, reward, terminated, truncated, info
