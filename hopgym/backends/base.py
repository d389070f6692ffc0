"""What every backend shares: :class:`SamplingParams`, the :class:`Backend` protocol, the
:class:`Completion` record, the prompt types and the chat-template rendering.

Types: ``Message`` (a ``{"role", "content"}`` dict) and ``Prompt`` (raw text, or chat messages).
Function: :func:`complete` (a backend's :class:`Completion` records, also for backends that only
have ``generate``). Constant: :data:`FINISH_REASONS`.
:class:`BackendError` is defined in :mod:`hopgym.errors` and re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from hopgym.errors import BackendError, DependencyNotInstalled, InvalidOptionError

__all__ = [
    "SamplingParams",
    "Backend",
    "BackendError",
    "Message",
    "Prompt",
    "Completion",
    "complete",
    "FINISH_REASONS",
]

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
        hopgym.errors.InvalidOptionError: max_new_tokens must be an int >= 1, got 0
    """

    temperature: float = 0.0
    top_p: float = 1.0
    max_new_tokens: int = 500
    seed: int | None = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (
            isinstance(self.temperature, (int, float))
            and self.temperature >= 0
            and math.isfinite(self.temperature)
        ):
            raise InvalidOptionError(f"temperature must be a finite float >= 0, got {self.temperature!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise InvalidOptionError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise InvalidOptionError(f"max_new_tokens must be an int >= 1, got {self.max_new_tokens!r}")
        if self.seed is not None and not isinstance(self.seed, int):
            raise InvalidOptionError(f"seed must be an int or None, got {self.seed!r}")
        if isinstance(self.stop, str) or not all(isinstance(s, str) and s for s in self.stop):
            raise InvalidOptionError(f"stop must be a tuple of non-empty strings, got {self.stop!r}")
        object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        """Whether decoding is greedy (temperature 0)."""
        return self.temperature == 0


#: Why a completion ended: ``"stop"`` (a stop string or the end-of-sequence token) or
#: ``"length"`` (``max_new_tokens`` reached, so the text may end mid-tag). ``None`` means unknown.
FINISH_REASONS: tuple[str, ...] = ("stop", "length")


@dataclass(frozen=True)
class Completion:
    """One completed prompt: the text and what is known about how it was made.

    Attributes:
        text: the new text, cut after the first stop string (as ``generate`` returns it), without
            ``reasoning``.
        finish_reason: one of :data:`FINISH_REASONS`, or ``None`` when the backend cannot tell.
        reasoning: thinking that the server returned apart from the text (an OpenAI-compatible
            server's ``message.reasoning_content``, ``reasoning`` or ``thinking`` field), or
            ``None``.
        prompt_tokens: tokens in the prompt, if known.
        cached_tokens: prompt tokens whose KV states were reused rather than computed (a
            prefix cache), if known; ``prompt_tokens - cached_tokens`` were prefilled.
        completion_tokens: tokens generated, if known.
        token_ids: the generated token ids (before the text was cut at a stop string), when the
            backend has them (local models).
        tool_calls: the calls a server returned in the assistant message (``tools=`` sent), as
            OpenAI ``tool_calls`` entries (``{"id", "type": "function", "function": {"name",
            "arguments": "<json>"}}``), or ``None``.

    Example:
        >>> Completion("<answer>Oslo", finish_reason="length").truncated
        True
    """

    text: str
    finish_reason: str | None = None
    reasoning: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    token_ids: tuple[int, ...] | None = None
    tool_calls: tuple[dict[str, Any], ...] | None = None

    @property
    def truncated(self) -> bool:
        """Whether generation stopped at ``max_new_tokens`` (the text may end inside a tag)."""
        return self.finish_reason == "length"


@runtime_checkable
class Backend(Protocol):
    """What agents (:class:`~hopgym.agents.llm.LLMAgent`) and judges need from a model.

    ``generate`` completes each prompt once: a string is completed as raw text, a list of chat
    messages is rendered with the model's chat template first (a final ``assistant`` message is
    continued rather than closed). It returns the new text only, cut after the first stop string
    of ``params.stop`` (kept or dropped by :func:`~hopgym.backends.stops.cut_at_stop`'s rule).

    A backend may also have ``complete(prompts, params) -> list[Completion]``, the same
    generation with its finish reason, separate reasoning and token counts; every hopgym backend
    has it, and :func:`complete` falls back to ``generate`` for one that does not. And it may set
    ``supports_prefill = True`` when a chat prompt may end with an ``assistant`` message that the
    model continues (answer forcing prefills ``<answer>`` that way).
    """

    # Read-only properties here, so that a backend may have them as plain attributes or as
    # properties (a lazily loaded backend asks its model).
    @property
    def has_chat_template(self) -> bool:
        """Whether :meth:`apply_chat_template` can render messages to text locally."""
        ...

    @property
    def supports_chat(self) -> bool:
        """Whether :meth:`generate` accepts chat messages."""
        ...

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[str]: ...

    def apply_chat_template(
        self, messages: Sequence[Message], *, add_generation_prompt: bool = True
    ) -> str: ...


def complete(backend: Any, prompts: Sequence[Prompt], params: SamplingParams) -> list[Completion]:
    """``backend.complete(prompts, params)``, or ``generate`` wrapped in :class:`Completion` records
    (finish reason unknown) for a backend without ``complete``.

    Raises:
        BackendError: the backend returned a different number of results than prompts.

    Example:
        >>> class Echo:
        ...     def generate(self, prompts, params):
        ...         return [p.upper() for p in prompts]
        >>> complete(Echo(), ["a"], SamplingParams())
        [Completion(text='A', finish_reason=None, reasoning=None, prompt_tokens=None, \
cached_tokens=None, completion_tokens=None, token_ids=None, tool_calls=None)]
    """
    prompts = list(prompts)
    method = getattr(backend, "complete", None)
    if callable(method):
        out = list(method(prompts, params))
    else:
        out = [Completion(t) for t in backend.generate(prompts, params)]
    if len(out) != len(prompts):
        raise BackendError(f"the backend returned {len(out)} results for {len(prompts)} prompts")
    return out


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


def _render_template(tokenizer: Any, messages: Sequence[Message], add_generation_prompt: bool) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidOptionError(
            "the tokenizer has no chat template: use LLMAgent(mode='continuation', "
            "use_chat_template=False) for raw text, or set tokenizer.chat_template"
        )
    messages = list(messages)
    continue_final = bool(messages) and messages[-1]["role"] == "assistant"
    return tokenizer.apply_chat_template(
        messages,
        tokenize=False,
        continue_final_message=continue_final,
        add_generation_prompt=add_generation_prompt and not continue_final,
    )
