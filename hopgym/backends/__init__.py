"""Language-model backends: one interface over local models, vLLM and OpenAI-compatible servers.

A backend completes prompts: ``generate(prompts, params) -> list[str]``, where a prompt is raw text
or a list of chat messages, and ``apply_chat_template(messages)`` renders messages to text. The
agents (:class:`~hopgym.agents.llm.LLMAgent`) and the judges
(:class:`~hopgym.rewards.judges.PromptJudge`) both run on one.

- :class:`SamplingParams`, :class:`Backend` (the protocol), :class:`BackendError`,
  :class:`Completion` (a result with its finish reason, reasoning and token counts) and
  :func:`complete` (a backend's completions, also from one with only ``generate``).
- :class:`TransformersBackend` — a local ``transformers`` model (``hopgym[train]``).
- :class:`VLLMBackend` — an in-process vLLM engine (``hopgym[vllm]``; not run in our tests).
- :class:`OpenAIBackend` — an OpenAI-compatible HTTP server (vLLM, SGLang, llama.cpp, OpenAI)
  through :class:`~hopgym.httpclient.HTTPClient`, standard library only.
- :mod:`hopgym.backends.stops` — where a turn ends (:func:`cut_at_stop`, :func:`close_open_tag`)
  and how returned reasoning goes back in front of it (:func:`merge_reasoning`).

This package is on hopgym's lowest floor, beside :mod:`hopgym.errors` and
:mod:`hopgym.httpclient`: it imports no other part of hopgym, so every floor (corpora, rewards,
envs, agents) can use a model. Nothing here imports torch, transformers or vllm at module level.
"""

from __future__ import annotations

from hopgym.backends.base import (
    FINISH_REASONS,
    Backend,
    BackendError,
    Completion,
    Message,
    Prompt,
    SamplingParams,
    complete,
)
from hopgym.backends.openai_backend import REASONING_FIELDS, OpenAIBackend
from hopgym.backends.stops import close_open_tag, cut_at_stop, merge_reasoning, stop_is_kept
from hopgym.backends.transformers_backend import TransformersBackend
from hopgym.backends.vllm_backend import VLLMBackend

__all__ = [
    "SamplingParams",
    "Backend",
    "BackendError",
    "Message",
    "Prompt",
    "BACKENDS",
    "Completion",
    "complete",
    "FINISH_REASONS",
    "REASONING_FIELDS",
    "TransformersBackend",
    "VLLMBackend",
    "OpenAIBackend",
    "cut_at_stop",
    "close_open_tag",
    "merge_reasoning",
    "stop_is_kept",
]

#: Backend names, as :func:`hopgym.agents.llm.make_llm_agent` and the CLI take them.
BACKENDS = ("transformers", "vllm", "openai")
