"""LLM agents: :class:`LLMAgent` drives a causal language model through a backend.

Classes: :class:`LLMAgent`. Function: :func:`make_llm_agent` builds an agent from a model name and
a backend name (the CLI's ``hopgym eval --agent llm``).

The backends live one floor down, in :mod:`hopgym.backends` (so that judges can use them too), and
are re-exported here: :class:`SamplingParams`, :class:`Backend` (the protocol),
:class:`TransformersBackend` (local ``transformers`` model, batched ``generate``),
:class:`VLLMBackend` (optional ``vllm`` extra; untested here), :class:`OpenAIBackend` (an
OpenAI-compatible HTTP server such as vLLM, SGLang or llama.cpp, over the standard library),
:class:`BackendError`.

Nothing here imports torch, transformers or vllm at module level.

Example:
    >>> from hopgym.agents.llm import LLMAgent, SamplingParams
    >>> class Echo:  # any object with the Backend methods works
    ...     has_chat_template = False
    ...     supports_chat = False
    ...     def apply_chat_template(self, messages, *, add_generation_prompt=True):
    ...         raise NotImplementedError
    ...     def generate(self, prompts, params):
    ...         return ["<think>hm</think><search>Acme</search><information>"] * len(prompts)
    >>> agent = LLMAgent(Echo(), system_prompt="")
    >>> agent.reset()
    >>> agent.act("Question: who founded Acme?\\n", {"turn": 0})
    '<think>hm</think><search>Acme</search>'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from hopgym.agents.prompts import (
    chat_messages,
    continuation_parts,
    cut_at_stop,
    default_system_prompt,
    plain_head,
)

# The backends moved to hopgym.backends; these names stay importable from here.
from hopgym.backends import (
    BACKENDS,
    Backend,
    BackendError,
    Message,
    OpenAIBackend,
    Prompt,
    SamplingParams,
    TransformersBackend,
    VLLMBackend,
)
from hopgym.envs.protocols import Protocol as TurnProtocol
from hopgym.envs.protocols import get_protocol

__all__ = ["SamplingParams", "Backend", "BackendError", "TransformersBackend", "VLLMBackend",
           "OpenAIBackend", "LLMAgent", "make_llm_agent", "BACKENDS", "Message", "Prompt"]

MODES = ("auto", "chat", "continuation")


# ---------------------------------------------------------------------------------- agent
def _unbatch_infos(infos: Any, n: int) -> list[dict[str, Any]]:
    """Per-env info dicts from a list of dicts or a Gymnasium vector env's info dict."""
    if isinstance(infos, (list, tuple)):
        if len(infos) != n:
            raise ValueError(f"got {len(infos)} infos for {n} observations")
        return [dict(i or {}) for i in infos]
    if not isinstance(infos, dict):
        raise TypeError(f"infos must be a list of dicts or a vector env's info dict, "
                        f"got {type(infos).__name__}")
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get("_" + key)
        if isinstance(value, dict):
            for i, sub in enumerate(_unbatch_infos(value, n)):
                if mask is None or mask[i]:
                    out[i][key] = sub
            continue
        for i in range(n):
            if mask is None or bool(mask[i]):
                out[i][key] = value[i]
    return out


class LLMAgent:
    """A language-model agent for hopgym envs: keeps the conversation and generates one turn.

    The agent mirrors the env's transcript (``env.unwrapped.transcript``): the first observation
    of an episode (``info["turn"] == 0``, as ``reset`` gives) starts a new conversation; each
    later observation is appended as the env's message. It renders the conversation for the
    backend, generates one turn, cuts it at the protocol's stop strings and returns the text.

    Args:
        backend: a :class:`Backend`.
        protocol: the env's protocol, ``"tags"`` or ``"r3"`` (or a protocol object).
        system_prompt: ``None`` for the protocol's default, ``""`` for none (templates without a
            system role), or your own.
        sampling: temperature, top-p, max new tokens and seed (its ``stop`` is replaced by the
            protocol's stop strings unless ``stop`` is given).
        use_chat_template: render through the model's chat template; ``False`` uses raw text
            (``system_prompt``, a blank line, the prompt, then the rollout).
        mode: ``"chat"`` (one chat message per turn and observation), ``"continuation"`` (the
            prompt as the user message, the whole rollout as one growing assistant message,
            as Search-R1 trains), or ``"auto"``: chat when the chat template is used and the
            backend supports chat, else continuation.
        stop: stop strings instead of the protocol's.

    Example:
        >>> class Fixed:
        ...     has_chat_template = supports_chat = True
        ...     def apply_chat_template(self, messages, *, add_generation_prompt=True):
        ...         return "".join(m["content"] for m in messages)
        ...     def generate(self, prompts, params):
        ...         return ["<answer>Oslo</answer>"] * len(prompts)
        >>> agent = LLMAgent(Fixed(), system_prompt="Be brief.")
        >>> agent.act("Question: where?\\n", {"turn": 0})
        '<answer>Oslo</answer>'
        >>> [m["role"] for m in agent.messages()]
        ['system', 'user', 'assistant', 'user']
    """

    def __init__(
        self,
        backend: Backend,
        *,
        protocol: str | TurnProtocol = "tags",
        system_prompt: str | None = None,
        sampling: SamplingParams | None = None,
        use_chat_template: bool = True,
        mode: str = "auto",
        stop: Sequence[str] | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.backend = backend
        self.protocol = get_protocol(protocol)
        self.system_prompt = (default_system_prompt(self.protocol) if system_prompt is None
                              else system_prompt)
        self.stop = tuple(self.protocol.stop if stop is None else stop)
        sampling = sampling if sampling is not None else SamplingParams()
        self.sampling = replace(sampling, stop=self.stop)
        self.use_chat_template = use_chat_template
        if mode == "auto":
            mode = "chat" if use_chat_template and backend.supports_chat else "continuation"
        if mode == "chat" and not (use_chat_template and backend.supports_chat):
            raise ValueError("mode='chat' needs a backend with a chat template and "
                             "use_chat_template=True; use mode='continuation' for raw text")
        self.mode = mode
        self._rng = None if sampling.seed is None else np.random.default_rng(sampling.seed)
        self.transcripts: list[list[Message]] = [[]]

    # -------------------------------------------------------------- conversation
    @property
    def transcript(self) -> list[Message]:
        """The conversation of slot 0 (single-env acting), in the env's transcript format."""
        return self.transcripts[0]

    def reset(self) -> None:
        """Forget every conversation (the sampling seed sequence continues)."""
        self.transcripts = [[]]

    def _slot(self, i: int) -> list[Message]:
        while len(self.transcripts) <= i:
            self.transcripts.append([])
        return self.transcripts[i]

    def observe(self, observation: str, info: dict[str, Any] | None = None, slot: int = 0) -> None:
        """Add an env observation to conversation ``slot`` (a new episode when ``turn == 0``)."""
        info = info or {}
        if not isinstance(observation, str):
            raise TypeError(f"observations are strings, got {type(observation).__name__}")
        conv = self._slot(slot)
        if info.get("turn") == 0 or not conv:
            conv[:] = [{"role": "user", "content": observation}]
        elif observation:
            conv.append({"role": "user", "content": observation})

    def messages(self, slot: int = 0) -> list[Message]:
        """The chat messages for conversation ``slot`` (system prompt first)."""
        return chat_messages(self._slot(slot), self.system_prompt)

    def build_prompt(self, slot: int = 0) -> Prompt:
        """What :meth:`act` sends the backend for conversation ``slot``."""
        conv = self._slot(slot)
        if self.mode == "chat":
            return self.messages(slot)
        prompt, rollout = continuation_parts(conv)
        if self.use_chat_template and self.backend.has_chat_template:
            head = [{"role": "user", "content": prompt}]
            if self.system_prompt:
                head.insert(0, {"role": "system", "content": self.system_prompt})
            return self.backend.apply_chat_template(head, add_generation_prompt=True) + rollout
        return plain_head(prompt, self.system_prompt) + rollout

    def _params(self) -> SamplingParams:
        seed = None if self._rng is None else int(self._rng.integers(2**31 - 1))
        return replace(self.sampling, seed=seed)

    def _generate(self, prompts: list[Prompt]) -> list[str]:
        texts = self.backend.generate(prompts, self._params())
        if len(texts) != len(prompts):
            raise BackendError(f"the backend returned {len(texts)} texts for {len(prompts)} "
                               f"prompts")
        return [cut_at_stop(t, self.stop) for t in texts]

    # -------------------------------------------------------------- acting
    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Read an observation and return the model's next turn as text."""
        self.observe(observation, info, 0)
        text = self._generate([self.build_prompt(0)])[0]
        self.transcripts[0].append({"role": "assistant", "content": text})
        return text

    def act_batch(
        self,
        observations: Sequence[str],
        infos: Sequence[dict[str, Any]] | dict[str, Any],
        *,
        active: Sequence[bool] | None = None,
    ) -> list[str]:
        """One turn for each of ``n`` envs (a vector env's sub-envs) with one generate call.

        Args:
            observations: one observation per env.
            infos: a list of per-env info dicts, or a Gymnasium vector env's info dict.
            active: optional mask; inactive envs are neither read nor generated for and get
                ``""`` (e.g. envs that will be reset by ``autoreset_mode=NEXT_STEP``).

        Use a vector env with ``autoreset_mode=gym.vector.AutoresetMode.SAME_STEP`` so that a
        finished sub-env hands back its next prompt at once (``info["turn"] == 0``).
        """
        n = len(observations)
        per_env = _unbatch_infos(infos, n)
        mask = [True] * n if active is None else [bool(a) for a in active]
        if len(mask) != n:
            raise ValueError(f"active has {len(mask)} entries for {n} observations")
        rows = [i for i in range(n) if mask[i]]
        for i in rows:
            self.observe(observations[i], per_env[i], i)
        texts = self._generate([self.build_prompt(i) for i in rows]) if rows else []
        out = [""] * n
        for i, text in zip(rows, texts, strict=True):
            out[i] = text
            self.transcripts[i].append({"role": "assistant", "content": text})
        return out


def make_llm_agent(
    model: str,
    backend: str = "transformers",
    protocol: str = "tags",
    base_url: str | None = None,
    temperature: float = 0.0,
    max_new_tokens: int = SamplingParams.max_new_tokens,
    seed: int = 0,
    *,
    top_p: float = 1.0,
    mode: str = "auto",
    system_prompt: str | None = None,
    api_key: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
) -> LLMAgent:
    """An :class:`LLMAgent` for ``model`` on a named backend (the CLI's ``--agent llm``).

    Args:
        model: a model id or path (``transformers``/``vllm``; a ``.gguf`` file works with
            transformers and the ``gguf`` package), or the served model name (``openai``).
        backend: ``"transformers"``, ``"vllm"`` or ``"openai"``.
        protocol: the env's protocol.
        base_url: the server's API root, required for ``openai``.
        temperature, max_new_tokens, seed, top_p: sampling.
        mode, system_prompt: see :class:`LLMAgent`.
        api_key: for ``openai``.
        device, dtype: for ``transformers``.

    Example:
        >>> make_llm_agent("m", backend="tgi")
        Traceback (most recent call last):
        ...
        ValueError: unknown backend 'tgi'; choose one of transformers, vllm, openai
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    sampling = SamplingParams(temperature=temperature, top_p=top_p,
                              max_new_tokens=max_new_tokens, seed=seed)
    impl: Backend
    if backend == "transformers":
        impl = TransformersBackend(model, device=device, dtype=dtype)
    elif backend == "vllm":
        impl = VLLMBackend(model, seed=seed)
    else:
        if not base_url:
            raise ValueError("backend 'openai' needs base_url, e.g. http://127.0.0.1:8000/v1")
        impl = OpenAIBackend(base_url, model, api_key=api_key)
    return LLMAgent(impl, protocol=protocol, system_prompt=system_prompt, sampling=sampling,
                    mode=mode)
