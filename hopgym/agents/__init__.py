"""Agents: scripted baselines, the evaluation harness and (with extras) LLM agents and training.

Scripted: :class:`RandomAgent`, :class:`DirectAgent`, :class:`SingleSearchAgent`,
:class:`IterativeAgent`, :class:`OracleAgent`; :func:`make_agent` by name; :func:`evaluate`.
"""

from __future__ import annotations

from hopgym.agents.scripted import (
    AGENTS,
    Agent,
    DirectAgent,
    OracleAgent,
    RandomAgent,
    SingleSearchAgent,
    make_agent,
)

__all__ = ["Agent", "RandomAgent", "DirectAgent", "SingleSearchAgent", "OracleAgent",
           "IterativeAgent", "make_agent", "AGENTS", "evaluate", "run_episode"]


def __getattr__(name: str):
    if name == "IterativeAgent":
        from hopgym.agents.iterative import IterativeAgent

        return IterativeAgent
    if name in ("evaluate", "run_episode"):
        from hopgym.agents import evaluation

        return getattr(evaluation, name)
    raise AttributeError(f"module 'hopgym.agents' has no attribute {name!r}")
