"""Agents: scripted baselines, the evaluation harness and (with extras) LLM agents and training.

Scripted: :class:`RandomAgent`, :class:`DirectAgent`, :class:`SingleSearchAgent`,
:class:`IterativeAgent`, :class:`OracleAgent`; :func:`make_agent` by name (:func:`register_agent`
adds one); :func:`evaluate`.
"""

from __future__ import annotations

from hopgym.agents.scripted import (
    AGENTS,
    Agent,
    DirectAgent,
    OracleAgent,
    RandomAgent,
    SingleSearchAgent,
    agent_names,
    make_agent,
    register_agent,
)

# name -> module, imported on first use so that `import hopgym.agents` pulls in no torch or trl.
_LAZY = {
    "IterativeAgent": "iterative",
    "ToolCallAgent": "tool_calls",
    "speak_tools": "tool_calls",
    "evaluate": "evaluation",
    "run_episode": "evaluation",
    "aggregate": "evaluation",
    "make_vector_env": "evaluation",
    "read_trajectories": "trajectories",
    "trajectory_header": "trajectories",
    "EpisodeRecorder": "trajectories",
    "TrajectoryWriter": "trajectories",
    "LLMAgent": "llm",
    "SamplingParams": "llm",
    "make_llm_agent": "llm",
    "few_shot_examples": "llm",
    "TransformersBackend": "llm",
    "OpenAIBackend": "llm",
    "VLLMBackend": "llm",
    "BackendError": "llm",
    "RolloutCollector": "rollout",
    "RolloutConfig": "rollout",
    "Trajectory": "rollout",
    "ImperfectTeacher": "teachers",
    "TeacherConfig": "teachers",
    "train_sft": "sft",
    "train_grpo": "grpo",
    "train_rft": "rft",
    "RFTRunConfig": "rft",
}

__all__ = [
    "Agent",
    "RandomAgent",
    "DirectAgent",
    "SingleSearchAgent",
    "OracleAgent",
    "make_agent",
    "register_agent",
    "agent_names",
    "AGENTS",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"hopgym.agents.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'hopgym.agents' has no attribute {name!r}")
