"""LLM agents: :class:`LLMAgent` drives a causal language model through a backend.

Classes: :class:`SamplingParams`, :class:`Backend` (the protocol), :class:`TransformersBackend`
(local ``transformers`` model, batched ``generate``), :class:`VLLMBackend` (optional ``vllm``
extra; untested here), :class:`OpenAIBackend` (an OpenAI-compatible HTTP server such as vLLM,
SGLang or llama.cpp, over the standard library), :class:`LLMAgent`, :class:`BackendError`.
:func:`make_llm_agent` builds an agent from a model name and a backend name (the CLI's
``hopgym eval --agent llm``).

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

import json
import math
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from hopgym.agents.prompts import (
    chat_messages,
    close_open_tag,
    continuation_parts,
    cut_at_stop,
    default_system_prompt,
    plain_head,
)
from hopgym.corpora.retrieval import DependencyNotInstalled
from hopgym.envs.protocols import Protocol as TurnProtocol
from hopgym.envs.protocols import get_protocol

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["SamplingParams", "Backend", "BackendError", "TransformersBackend", "VLLMBackend",
           "OpenAIBackend", "LLMAgent", "make_llm_agent", "BACKENDS", "Message", "Prompt"]

Message = dict[str, str]
#: A raw text prompt (completed as is) or chat messages (rendered with the chat template).
Prompt = str | list[Message]

BACKENDS = ("transformers", "vllm", "openai")
MODES = ("auto", "chat", "continuation")


class BackendError(RuntimeError):
    """A backend failed to generate (server error, timeout, bad reply)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn.

    Attributes:
        temperature: 0 means greedy decoding.
        top_p: nucleus sampling mass (ignored when greedy).
        max_new_tokens: the most tokens one turn may have.
        seed: seeds sampling (``None``: unseeded). :class:`LLMAgent` derives one seed per
            generate call from its own seed, so a run is reproducible and calls differ.
        stop: strings that end a turn; :class:`LLMAgent` fills in its protocol's.

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
    max_new_tokens: int = 128
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
    """What :class:`LLMAgent` needs from a model.

    ``generate`` completes each prompt once: a string is completed as raw text, a list of chat
    messages is rendered with the model's chat template first (a final ``assistant`` message is
    continued rather than closed). It returns the new text only, cut after the first stop string
    of ``params.stop`` (kept or dropped by :func:`~hopgym.agents.prompts.cut_at_stop`'s rule).
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


def _resolve_gguf(model: str, gguf_file: str | None) -> tuple[str, str | None]:
    """Accept a ``.gguf`` file path, or a directory that holds one ``.gguf`` file and no config."""
    if gguf_file is not None:
        return model, gguf_file
    if model.endswith(".gguf") and os.path.isfile(model):
        return os.path.dirname(model) or ".", os.path.basename(model)
    if os.path.isdir(model) and not os.path.exists(os.path.join(model, "config.json")):
        ggufs = sorted(f for f in os.listdir(model) if f.endswith(".gguf"))
        if len(ggufs) == 1:
            return model, ggufs[0]
        if len(ggufs) > 1:
            raise ValueError(f"{model} holds several .gguf files ({', '.join(ggufs)}): pass "
                             f"gguf_file= or the path of one file")
    return model, None


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


# ---------------------------------------------------------------------------------- transformers
class TransformersBackend:
    """A local ``transformers`` causal LM: batched ``generate`` with left padding.

    Args:
        model: a model id or path (a directory with ``config.json``, a ``.gguf`` file, or a
            directory holding one ``.gguf`` file, loaded with the ``gguf`` package), or a loaded
            ``PreTrainedModel``.
        tokenizer: a tokenizer, or its id/path; ``None`` loads the model's (required when
            ``model`` is an object).
        device: ``"auto"`` (CUDA when available, else CPU; a loaded model stays where it is),
            ``"cpu"``, ``"cuda"``, ``"cuda:1"``.
        dtype: ``"auto"`` (bfloat16 on CUDA, float32 on CPU), a ``torch.dtype`` or its name.
        gguf_file: the ``.gguf`` file name inside ``model``'s directory.
        batch_size: the most prompts per ``generate`` call (``None``: all at once).

    Stop strings end each row through ``generate(stop_strings=...)`` and the text is cut again
    after decoding, so a row stops at its first stop string even when the batch runs on.
    Sampling with a seed runs under ``torch.random.fork_rng``: the global RNG is left untouched.
    """

    has_chat_template: bool
    supports_chat: bool

    def __init__(
        self,
        model: str | PreTrainedModel,
        tokenizer: str | PreTrainedTokenizerBase | None = None,
        *,
        device: str = "auto",
        dtype: str | torch.dtype = "auto",
        gguf_file: str | None = None,
        batch_size: int | None = None,
    ) -> None:
        torch = _torch()
        tf = _transformers()
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be None or an int >= 1, got {batch_size!r}")
        self.batch_size = batch_size
        if device == "auto":
            dev = None if not isinstance(model, str) else (
                "cuda" if torch.cuda.is_available() else "cpu")
        else:
            dev = device
        if isinstance(model, str):
            path, gguf = _resolve_gguf(model, gguf_file)
            target = torch.device(dev or "cpu")
            if dtype == "auto":
                torch_dtype = torch.bfloat16 if target.type == "cuda" else torch.float32
            else:
                torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
            extra = {"gguf_file": gguf} if gguf else {}
            loaded = tf.AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **extra)
            loaded.to(target)
            if tokenizer is None:
                tokenizer = tf.AutoTokenizer.from_pretrained(path, **extra)
            self.model = loaded
        else:
            if tokenizer is None:
                raise ValueError("pass tokenizer= with a loaded model")
            if dev is not None:
                model.to(torch.device(dev))
            if dtype != "auto":
                model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)
            self.model = model
        if isinstance(tokenizer, str):
            tokenizer = tf.AutoTokenizer.from_pretrained(tokenizer)
        self.tokenizer = tokenizer
        self.model.eval()
        self.device = next(self.model.parameters()).device
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self.supports_chat = self.has_chat_template
        self.pad_token_id = tokenizer.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = tokenizer.eos_token_id
        if self.pad_token_id is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token: set "
                             "tokenizer.pad_token before building the backend")

    def apply_chat_template(self, messages: Sequence[Message], *,
                            add_generation_prompt: bool = True) -> str:
        """Render messages with the tokenizer's chat template (a final assistant message is
        continued)."""
        return _render_template(self.tokenizer, messages, add_generation_prompt)

    def encode(self, prompt: Prompt) -> list[int]:
        """The token ids that :meth:`generate` feeds the model for ``prompt``."""
        text = self.apply_chat_template(prompt) if not isinstance(prompt, str) else prompt
        bos = getattr(self.tokenizer, "bos_token", None)
        # A rendered chat template already starts with the BOS token; do not add a second one.
        special = not (bos and text.startswith(bos))
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[str]:
        prompts = list(prompts)
        if not prompts:
            return []
        step = self.batch_size or len(prompts)
        out: list[str] = []
        for start in range(0, len(prompts), step):
            chunk = prompts[start:start + step]
            seed = None if params.seed is None else params.seed + start
            out += self._generate([self.encode(p) for p in chunk], replace(params, seed=seed))
        return out

    def _generate(self, ids: list[list[int]], params: SamplingParams) -> list[str]:
        torch = _torch()
        width = max(len(x) for x in ids)
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, row in enumerate(ids):  # left padding: the new tokens line up on the right
            if row:
                input_ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
                mask[i, width - len(row):] = 1
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.to(self.device),
            "attention_mask": mask.to(self.device),
            "max_new_tokens": params.max_new_tokens,
            "pad_token_id": self.pad_token_id,
            "do_sample": not params.greedy,
        }
        if not params.greedy:
            kwargs.update(temperature=float(params.temperature), top_p=float(params.top_p),
                          top_k=0)
        else:
            kwargs.update(temperature=None, top_p=None, top_k=None)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        with torch.inference_mode():
            if params.seed is not None and not params.greedy:
                devices = [self.device.index or 0] if self.device.type == "cuda" else []
                with torch.random.fork_rng(devices=devices):
                    torch.manual_seed(params.seed)
                    out = self.model.generate(**kwargs)
            else:
                out = self.model.generate(**kwargs)
        texts = self.tokenizer.batch_decode(out[:, width:], skip_special_tokens=True)
        return _fix_stops(texts, params.stop)


# ---------------------------------------------------------------------------------- vLLM
class VLLMBackend:
    """An in-process vLLM engine (``pip install 'hopgym[vllm]'``).

    UNTESTED: vLLM cannot be installed in the workplace where hopgym was written; this class
    follows vLLM's documented ``LLM.generate`` API and is kept deliberately small. Prefer
    :class:`OpenAIBackend` against ``vllm serve`` when in doubt: that path is tested.

    Args:
        model: a model id or path.
        tokenizer: a tokenizer id or path (``None``: the model's).
        dtype: ``"auto"`` or a dtype name vLLM accepts.
        seed: the engine's seed.
        gpu_memory_utilization: share of GPU memory vLLM may take.
        max_model_len: context length cap (``None``: the model's).
        tensor_parallel_size: GPUs per model.
    """

    def __init__(
        self,
        model: str,
        *,
        tokenizer: str | None = None,
        dtype: str = "auto",
        seed: int = 0,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
    ) -> None:
        try:
            import vllm
        except ImportError:
            raise DependencyNotInstalled.for_extra("vllm", "vllm") from None
        self._vllm = vllm
        self.llm = vllm.LLM(model=model, tokenizer=tokenizer, dtype=dtype, seed=seed,
                            gpu_memory_utilization=gpu_memory_utilization,
                            max_model_len=max_model_len,
                            tensor_parallel_size=tensor_parallel_size)
        self.tokenizer = self.llm.get_tokenizer()
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.supports_chat = self.has_chat_template

    def apply_chat_template(self, messages: Sequence[Message], *,
                            add_generation_prompt: bool = True) -> str:
        return _render_template(self.tokenizer, messages, add_generation_prompt)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[str]:
        texts = [p if isinstance(p, str) else self.apply_chat_template(p) for p in prompts]
        sampling = [
            self._vllm.SamplingParams(
                temperature=float(params.temperature), top_p=float(params.top_p),
                max_tokens=params.max_new_tokens,
                seed=None if params.seed is None else params.seed + i,
                stop=list(params.stop), include_stop_str_in_output=True)
            for i in range(len(texts))
        ]
        outputs = self.llm.generate(texts, sampling, use_tqdm=False)
        return _fix_stops([o.outputs[0].text for o in outputs], params.stop)


# ---------------------------------------------------------------------------------- HTTP
_RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class OpenAIBackend:
    """An OpenAI-compatible server (``vllm serve``, SGLang, llama.cpp's ``llama-server``, …).

    Chat prompts go to ``POST {base_url}/chat/completions``, raw text to ``{base_url}/completions``,
    one request per prompt, up to ``max_concurrency`` at a time (the server batches them).
    Only the standard library is used.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1`` (``/v1`` is appended when
            missing).
        model: the served model's name.
        api_key: sent as ``Authorization: Bearer …`` when given.
        timeout: seconds to wait for one reply.
        retries: further attempts after a connection error, a timeout or a 408/429/5xx reply,
            with exponential backoff (``backoff * 2**attempt`` seconds, or the server's
            ``Retry-After`` when shorter than 60 s).
        backoff: the first backoff in seconds.
        max_concurrency: requests in flight at once.
        tokenizer: optional local tokenizer (object, id or path) used only to render a chat
            template locally (``LLMAgent(mode="continuation")`` with a template).

    Servers drop the stop string from the reply; for closing-tag stops (``</search>``) it is
    put back (:func:`~hopgym.agents.prompts.close_open_tag`) so that the turn parses.
    """

    supports_chat = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_concurrency: int = 8,
        tokenizer: str | PreTrainedTokenizerBase | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(retries, int) or retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {retries!r}")
        if not timeout > 0 or not backoff >= 0:
            raise ValueError(f"timeout must be > 0 and backoff >= 0, got {timeout!r}, {backoff!r}")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        base = base_url.rstrip("/")
        self.base_url = base if base.endswith("/v1") else base + "/v1"
        self.model, self.api_key = model, api_key
        self.timeout, self.retries, self.backoff = float(timeout), retries, float(backoff)
        self.max_concurrency = max_concurrency
        if isinstance(tokenizer, str):
            tokenizer = _transformers().AutoTokenizer.from_pretrained(tokenizer)
        self.tokenizer = tokenizer
        self.has_chat_template = bool(tokenizer is not None
                                      and getattr(tokenizer, "chat_template", None))

    def apply_chat_template(self, messages: Sequence[Message], *,
                            add_generation_prompt: bool = True) -> str:
        if self.tokenizer is None:
            raise ValueError("OpenAIBackend renders chat templates on the server; pass "
                             "tokenizer= to render one locally (mode='continuation')")
        return _render_template(self.tokenizer, messages, add_generation_prompt)

    # -------------------------------------------------------------- requests
    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        url = self.base_url + path
        body = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            wait = self.backoff * (2 ** attempt)
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as reply:
                    raw = reply.read()
                try:
                    return json.loads(raw)
                except json.JSONDecodeError:
                    raise BackendError(f"POST {url}: the reply is not JSON: "
                                       f"{raw[:200]!r}") from None
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace")
                if exc.code not in _RETRY_STATUS:
                    raise BackendError(f"POST {url} returned HTTP {exc.code}: {detail}") from None
                last = f"HTTP {exc.code}: {detail}"
                after = exc.headers.get("Retry-After") if exc.headers else None
                if after and after.strip().isdigit() and int(after) < 60:
                    wait = float(after)
            except TimeoutError:
                last = f"no reply within {self.timeout:g} s (timeout=)"
            except urllib.error.URLError as exc:
                if isinstance(exc.reason, TimeoutError):
                    last = f"no reply within {self.timeout:g} s (timeout=)"
                else:
                    last = f"cannot connect: {exc.reason}"
            except (ConnectionError, OSError) as exc:
                last = f"connection failed: {type(exc).__name__}: {exc}"
            if attempt < self.retries:
                time.sleep(wait)
        raise BackendError(f"POST {url} failed after {self.retries + 1} attempt(s): {last}. "
                           f"Check that the server is up, or raise timeout=/retries=.")

    def _one(self, prompt: Prompt, params: SamplingParams, seed: int | None) -> str:
        payload: dict[str, Any] = {"model": self.model, "max_tokens": params.max_new_tokens,
                                   "temperature": float(params.temperature),
                                   "top_p": float(params.top_p), "n": 1}
        if seed is not None:
            payload["seed"] = seed
        if params.stop:
            payload["stop"] = list(params.stop)
        if isinstance(prompt, str):
            payload["prompt"] = prompt
            reply = self._post("/completions", payload)
        else:
            payload["messages"] = list(prompt)
            reply = self._post("/chat/completions", payload)
        try:
            choice = reply["choices"][0]
            text = choice["text"] if isinstance(prompt, str) else choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"unexpected reply from {self.base_url}: "
                               f"{json.dumps(reply)[:300]}") from None
        text = text or ""
        if choice.get("finish_reason") == "stop" and params.stop:
            text = close_open_tag(text, params.stop)
        return cut_at_stop(text, params.stop)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[str]:
        prompts = list(prompts)
        seeds = [None if params.seed is None else params.seed + i for i in range(len(prompts))]
        if len(prompts) <= 1 or self.max_concurrency == 1:
            return [self._one(p, params, s) for p, s in zip(prompts, seeds, strict=True)]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            jobs = [pool.submit(self._one, p, params, s)
                    for p, s in zip(prompts, seeds, strict=True)]
            return [job.result() for job in jobs]


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
    max_new_tokens: int = 128,
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
