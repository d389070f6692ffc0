"""Environments and their registration.

Ids (``gym.make(id, **kwargs)``):

- ``hopgym/Synthetic-v0``: the procedural synthetic world, one source.
- ``hopgym/SyntheticRouting-v0``: the synthetic world split between a cheap ``local`` and a
  complete, costlier ``web`` source.
- ``hopgym/Tiny-v0``: a hand-written corpus of 18 passages (tests, docs).
- ``hopgym/SyntheticFeaturized-v0``: numeric observations and discrete actions over any text env,
  for Stable-Baselines3 (needs no extra; SB3 itself is ``hopgym[sb3]``).
- ``hopgym/HotpotQA-v0``, ``hopgym/2WikiMultiHopQA-v0``, ``hopgym/MuSiQue-v0``,
  ``hopgym/Bamboogle-v0``, ``hopgym/MultiHopQA-v0``: real benchmark files (need ``path=``), all
  on one entry point, :func:`hopgym.envs.datasets.make_dataset_env`.

Every text env takes the options of :class:`~hopgym.envs.options.EnvOptions` as keywords, and
``gym.make_vec(id, num_envs=n)`` on a text id builds a
:class:`~hopgym.envs.vector.BatchedSearchVectorEnv` (see :mod:`hopgym.vector`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from gymnasium.envs.registration import register, registry

from hopgym.envs.actions import Answer, Route, Search, Think
from hopgym.envs.multihop_qa import MultiHopQAEnv
from hopgym.envs.options import EnvKwargs, EnvOptions
from hopgym.envs.spaces import FreeText

__all__ = ["MultiHopQAEnv", "EnvOptions", "EnvKwargs", "FreeText", "Think", "Search", "Route",
           "Answer", "register_envs"]

# One table: id -> (entry point, kwargs). Variants of a family share its entry point and differ
# by kwargs, as Gymnasium's LunarLanderContinuous-v3 is LunarLander with {"continuous": True}.
# max_episode_steps stays None: the factories put the step budget (``max_turns``) in a TimeLimit
# *under* the reward wrappers, so that rewards see the truncation.
_DATASET_ENTRY = "hopgym.envs.datasets:make_dataset_env"
_IDS: dict[str, tuple[str, dict[str, Any]]] = {
    "hopgym/Synthetic-v0": ("hopgym.envs.registration:make_synthetic", {}),
    "hopgym/SyntheticRouting-v0": (
        "hopgym.envs.registration:make_synthetic", {"sources": ("local", "web")}),
    "hopgym/Tiny-v0": ("hopgym.envs.registration:make_tiny", {}),
    "hopgym/SyntheticFeaturized-v0": ("hopgym.envs.featurized:make_featurized", {"max_turns": 6}),
    "hopgym/HotpotQA-v0": (_DATASET_ENTRY, {"dataset": "hotpotqa"}),
    "hopgym/2WikiMultiHopQA-v0": (_DATASET_ENTRY, {"dataset": "2wiki"}),
    "hopgym/MuSiQue-v0": (_DATASET_ENTRY, {"dataset": "musique"}),
    "hopgym/Bamboogle-v0": (_DATASET_ENTRY, {"dataset": "bamboogle"}),
    "hopgym/MultiHopQA-v0": (_DATASET_ENTRY, {"dataset": "auto"}),
}

#: Ids that need no files: the conformance tests run over these.
BUILTIN_IDS = ("hopgym/Synthetic-v0", "hopgym/SyntheticRouting-v0", "hopgym/Tiny-v0")
#: Ids whose ``gym.make_vec`` builds a BatchedSearchVectorEnv (the text envs).
_BATCHED_IDS = tuple(i for i in _IDS if i != "hopgym/SyntheticFeaturized-v0")


def register_envs() -> None:
    """Register every hopgym id with Gymnasium (idempotent)."""
    from hopgym.envs.vector import vector_entry_point

    for env_id, (entry_point, kwargs) in _IDS.items():
        if env_id not in registry:
            vector = partial(vector_entry_point, env_id) if env_id in _BATCHED_IDS else None
            register(id=env_id, entry_point=entry_point, kwargs=kwargs,
                     vector_entry_point=vector)


register_envs()
