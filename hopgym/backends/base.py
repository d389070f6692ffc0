"""What every backend shares: :class:`SamplingParams`, the :class:`Backend` protocol, the
prompt types and the chat-template rendering.

Types: ``Message`` (a ``{"role", "content"}`` dict) and ``Prompt`` (raw text, or chat messages).
:class:`BackendError` is defined in :mod:`hopgym.errors` and re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hopgym.backends.stops import cut_at_stop
from hopgym.errors import BackendError, DependencyNotInstalled

__all__ = ["SamplingParams", "Backend", "BackendError", "Message", "Prompt"]

Message = dict[str, str]
#: A raw text prompt (completed as is) or chat messages (rendered with the chat template).
Prompt = str | list[Message]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn.

    Attributes:
        temperature: 0 means greedy decoding.
        top_p: nucleus sampling mass (ignored when greedy).
        max_new_tokens: the most tokens one turn may have; the default, 500, is Search-R1's
            per-response budget, room for a small model's thought and an action.
        seed: seeds sampling (``None``: unseeded). :class:`~hopgym.agents.llm.LLMAgent` derives one
            seed per generate call from its own seed, so a run is reproducible and calls differ.
        stop: strings that end a turn; :class:`~hopgym.agents.llm.LLMAgent` fills in its
            protocol's.

    Example:
        >>> SamplingParams(temperature=0.7).greedy
        False
        >>> SamplingParams(max_new_tokens=0)
        Traceback (most recent call last):
        ...
        ValueError: max_new_tokens must be an int >= 1, got 0
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 500
    seed: int | None = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature >= 0
                and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite float >= 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a tuple of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        """Whether decoding is greedy (temperature 0)."""
        return self.temperature == 0


@runtime_checkable
class Backend(Protocol):
    """What agents (:class:`~hopgym.agents.llm.LLMAgent`) and judges need from a model.

    ``generate`` completes each prompt once: a string is completed as raw text, a list of chat
    messages is rendered with the model's chat template first (a final ``assistant`` message is
    continued rather than closed). It returns the new text only, cut after the first stop string
    of ``params.stop`` (kept or dropped by :func:`~hopgym.backends.stops.cut_at_stop`'s rule).
    """

    #: Whether :meth:`apply_chat_template` can render messages to text locally.
    has_chat_template: bool
    #: Whether :meth:`generate` accepts chat messages.
    supports_chat: bool

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[str]: ...

    def apply_chat_template(self, messages: Sequence[Message], *,
                            add_generation_prompt: bool = True) -> str: ...


# ---------------------------------------------------------------------------------- helpers
def _torch():
    try:
        import torch
    except ImportError:
        raise DependencyNotInstalled.for_extra("torch", "train") from None
    return torch


def _transformers():
    try:
        import transformers
    except ImportError:
        raise DependencyNotInstalled.for_extra("transformers", "train") from None
    return transformers


def _render_template(tokenizer: Any, messages: Sequence[Message],
                     add_generation_prompt: bool) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template: use LLMAgent(mode='continuation', "
                         "use_chat_template=False) for raw text, or set tokenizer.chat_template")
    messages = list(messages)
    continue_final = bool(messages) and messages[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(
        messages, tokenize=False, continue_final_message=continue_final,
        add_generation_prompt=add_generation_prompt and not continue_final)


def _fix_stops(texts: Sequence[str], stops: Sequence[str]) -> list[str]:
    return [cut_at_stop(t, stops) for t in texts]
