"""hopgym: multi-hop question answering as a Gymnasium environment.

``import hopgym`` registers the envs (``hopgym/Synthetic-v0`` and friends) and imports no torch,
faiss or trl.
"""

from __future__ import annotations

from hopgym import envs as envs  # registers the ids
from hopgym import rewards as rewards
from hopgym.corpora.types import Hop, Passage, QASample
from hopgym.envs import Answer, MultiHopQAEnv, Route, Search, Think

__version__ = "0.1.0"

__all__ = ["MultiHopQAEnv", "Passage", "QASample", "Hop", "Think", "Search", "Route", "Answer",
           "evaluate", "envs", "rewards", "__version__"]


def __getattr__(name: str):  # lazy: the evaluation harness pulls in rich
    if name == "evaluate":
        from hopgym.agents.evaluation import evaluate

        return evaluate
    raise AttributeError(f"module 'hopgym' has no attribute {name!r}")
