"""hopgym: multi-hop question answering as a Gymnasium environment.

``import hopgym`` registers the envs (``hopgym/Synthetic-v1`` and friends) and imports no torch,
faiss or trl.
"""

from __future__ import annotations

from hopgym import envs as envs  # registers the ids
from hopgym import rewards as rewards
from hopgym import vector as vector
from hopgym._version import __version__
from hopgym.corpora.types import Hop, Passage, QASample
from hopgym.envs import Answer, MultiHopQAEnv, Route, Search, Think
from hopgym.errors import HopgymError

__all__ = [
    "MultiHopQAEnv",
    "Passage",
    "QASample",
    "Hop",
    "Think",
    "Search",
    "Route",
    "Answer",
    "HopgymError",
    "envs",
    "rewards",
    "vector",
    "__version__",
]
