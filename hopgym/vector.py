"""Vector envs for hopgym: ``hopgym.vector`` (as ``gymnasium.vector``).

``gym.make_vec("hopgym/...", num_envs=n)`` is the one way to build them:

- :class:`~hopgym.envs.vector.BatchedSearchVectorEnv`: a ``gymnasium.vector.VectorEnv`` that
  answers its sub-envs' searches with one ``search_batch`` call per retriever per step (what
  ``gym.make_vec`` builds for a hopgym text id).
- :class:`~hopgym.envs.ray_vector.RayVectorEnv`: the same, with the sub-envs in Ray actors
  (``gym.make_vec(id, num_envs=n, ray_workers=W)``; ``pip install 'hopgym[ray]'``; Ray is
  imported when it is built).
- :func:`~hopgym.envs.vector.step_batched`, :func:`~hopgym.envs.vector.prefetch_searches`,
  :class:`~hopgym.envs.vector.EnvBatch`, :class:`~hopgym.envs.vector.SearchStats`.

Example:
    >>> import gymnasium as gym, hopgym
    >>> envs = gym.make_vec("hopgym/Tiny-v1", num_envs=2, autoreset_mode="SameStep")
    >>> type(envs).__name__, envs.num_envs
    ('BatchedSearchVectorEnv', 2)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hopgym.envs.vector import (
    BatchedSearchVectorEnv,
    EnvBatch,
    SearchStats,
    prefetch_searches,
    step_batched,
)

if TYPE_CHECKING:
    from hopgym.envs.ray_vector import RayVectorEnv, WorkerError

__all__ = [
    "BatchedSearchVectorEnv",
    "RayVectorEnv",
    "WorkerError",
    "EnvBatch",
    "SearchStats",
    "step_batched",
    "prefetch_searches",
]


def __getattr__(name: str) -> Any:
    # The Ray vector env is looked up when asked for, so that `import hopgym.vector` stays light.
    if name in ("RayVectorEnv", "WorkerError"):
        from hopgym.envs import ray_vector

        return getattr(ray_vector, name)
    raise AttributeError(f"module 'hopgym.vector' has no attribute {name!r}")
