"""What ``gym.make_vec`` builds for a hopgym text id: :func:`vector_entry_point`.

It sits above both vector envs (:mod:`hopgym.envs.vector` and :mod:`hopgym.envs.ray_vector`), so
neither imports the other's module back.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.vector import AutoresetMode, VectorEnv

from hopgym.envs.vector import BatchedSearchVectorEnv

__all__ = ["vector_entry_point"]


def vector_entry_point(
    env_id: str,
    num_envs: int = 1,
    *,
    autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    ray_workers: int | None = None,
    **kwargs: Any,
) -> VectorEnv:
    """What ``gym.make_vec(env_id, num_envs=n, **kwargs)`` builds for a hopgym text env.

    A :class:`~hopgym.envs.vector.BatchedSearchVectorEnv` of ``gym.make(env_id, **kwargs)``, or,
    with ``ray_workers=W``, a :class:`~hopgym.envs.ray_vector.RayVectorEnv` whose sub-envs live
    in ``W`` Ray actors (``pip install 'hopgym[ray]'``).

    Registered for each id as ``functools.partial(vector_entry_point, env_id)`` (the spec's
    ``vector_entry_point``), which Gymnasium uses when ``make_vec`` is given no
    ``vectorization_mode``; ``vectorization_mode="sync"`` or ``"async"`` still gives Gymnasium's
    own. The autoreset mode is a keyword here (Gymnasium passes no ``vector_kwargs`` to a vector
    entry point): ``gym.make_vec(id, num_envs=n, autoreset_mode="SameStep")``.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> envs = gym.make_vec("hopgym/Tiny-v1", num_envs=2, autoreset_mode="SameStep")
        >>> envs.num_envs, envs.metadata["autoreset_mode"].value
        (2, 'SameStep')
    """
    fns = [lambda: gym.make(env_id, **kwargs)] * num_envs
    if ray_workers is not None:
        from hopgym.envs.ray_vector import RayVectorEnv

        return RayVectorEnv(fns, workers=ray_workers, autoreset_mode=autoreset_mode)
    return BatchedSearchVectorEnv(fns, autoreset_mode=autoreset_mode)
