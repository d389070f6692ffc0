"""hopgym: multi-hop question answering as a Gymnasium environment.

``import hopgym`` registers the envs (``hopgym/Synthetic-v1`` and friends) and imports no torch,
faiss or trl.
"""

from __future__ import annotations

import warnings

from hopgym import envs as envs  # registers the ids
from hopgym import rewards as rewards
from hopgym import vector as vector
from hopgym._version import __version__
from hopgym.corpora.types import Hop, Passage, QASample
from hopgym.envs import Answer, MultiHopQAEnv, Route, Search, Think
from hopgym.errors import HopgymError

__all__ = ["MultiHopQAEnv", "Passage", "QASample", "Hop", "Think", "Search", "Route", "Answer",
           "HopgymError", "envs", "rewards", "vector", "__version__"]


def __getattr__(name: str):
    # The facade sits below `agents` (floors: corpora < rewards < envs < agents < cli), so it does
    # not offer the evaluation harness any more; the old name keeps working for one release.
    if name == "evaluate":
        warnings.warn("hopgym.evaluate is deprecated and will be removed in hopgym 0.3: use "
                      "hopgym.agents.evaluate", DeprecationWarning, stacklevel=2)
        from hopgym.agents.evaluation import evaluate

        return evaluate
    raise AttributeError(f"module 'hopgym' has no attribute {name!r}")
