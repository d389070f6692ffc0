"""A local ``transformers`` causal LM as a backend: :class:`TransformersBackend`.

Needs the ``train`` extra (torch, transformers); importing this module imports neither.

Multi-turn agents send the whole conversation again every turn. The backend keeps the KV states of
recent sequences (prompt and generation) in a prefix cache and, when a new prompt starts with one
of them, reuses those states and prefills only the new tokens (the env's observation and the next
turn's header): see :class:`TransformersBackend`'s ``prefix_cache``.
"""

from __future__ import annotations

import inspect
import os
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from hopgym.backends.base import (
    Completion,
    Message,
    Prompt,
    SamplingParams,
    _render_template,
    _torch,
    _transformers,
)
from hopgym.backends.stops import cut_at_stop
from hopgym.errors import InvalidOptionError

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["TransformersBackend"]


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
            raise InvalidOptionError(
                f"{model} holds several .gguf files ({', '.join(ggufs)}): pass "
                f"gguf_file= or the path of one file"
            )
    return model, None


@dataclass
class _Entry:
    ids: np.ndarray  # the token ids whose KV states are held
    kv: list[tuple[Any, Any]]  # per layer: keys and values, [heads, len(ids), head_dim]
    prompt_len: int  # how many of ``ids`` were the prompt (the rest were generated)


class PrefixCache:
    """KV states of recent sequences, by token ids, for prompts that start with one of them.

    A prompt reuses the longest common prefix with any held sequence (at most all but its last
    token, which is computed for the next-token logits). Sequences are dropped least recently
    used first once more than ``max_tokens`` token positions are held, and a sequence is dropped
    at once when a prompt that continued it (reused its whole prompt part) has been stored.

    Args:
        max_tokens: the most token positions held, over all sequences.
    """

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def clear(self) -> None:
        """Drop every held sequence."""
        self._entries.clear()
        self.tokens = 0

    def match(self, ids: Sequence[int]) -> tuple[int | None, int]:
        """``(key, n)``: the held sequence sharing the longest prefix with ``ids``, and its length."""
        arr = np.asarray(ids, dtype=np.int64)
        limit = len(arr) - 1
        best, best_n = None, 0
        for key, entry in self._entries.items():
            m = min(len(entry.ids), limit)
            if m <= best_n:
                continue
            diff = np.flatnonzero(entry.ids[:m] != arr[:m])
            n = int(diff[0]) if diff.size else m
            if n > best_n:
                best, best_n = key, n
        if best is not None:
            self._entries.move_to_end(best)
        return best, best_n

    def get(self, key: int) -> _Entry:
        return self._entries[key]

    def drop(self, key: int) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.tokens -= len(entry.ids)

    def add(self, ids: np.ndarray, kv: list[tuple[Any, Any]], prompt_len: int) -> None:
        if len(ids) > self.max_tokens or len(ids) == 0:
            return
        self._entries[self._next_key] = _Entry(ids, kv, prompt_len)
        self._next_key += 1
        self.tokens += len(ids)
        while self.tokens > self.max_tokens:
            _, old = self._entries.popitem(last=False)
            self.tokens -= len(old.ids)


def _load_tokenizer(tf: Any, name: str, **kwargs: Any) -> PreTrainedTokenizerBase:
    """``AutoTokenizer.from_pretrained``, typed: transformers' stubs return a union with ``str``."""
    return tf.AutoTokenizer.from_pretrained(name, **kwargs)


def _cache_kwarg(model: Any) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (older): the KV-cache argument."""
    return "cache" if "cache" in _forward_params(model) else "past_key_values"


def _logits_kwargs(model: Any) -> dict[str, int]:
    """``{"logits_to_keep": 1}`` where the model's ``forward`` takes it (a prefill then projects
    only the last position onto the vocabulary, not every prompt token), else ``{}``."""
    return {"logits_to_keep": 1} if "logits_to_keep" in _forward_params(model) else {}


def _forward_params(model: Any) -> Any:
    """The parameters of the model's ``forward``; a PEFT model's ``forward`` takes ``**kwargs``
    and hands them to its base model, whose signature decides."""
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    return inspect.signature(base.forward).parameters


def _full_attention_only(model: Any) -> bool:
    """Whether every layer of the model's cache is a plain, growing ``DynamicLayer``: only then
    can held KV states be cut and stacked (sliding-window and linear-attention layers cannot)."""
    try:
        from transformers.cache_utils import DynamicCache, DynamicLayer

        layers = DynamicCache(config=model.config).layers
    except Exception:  # noqa: BLE001 - an older transformers, or a model without a plain cache
        return False
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers)


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
        prefix_cache: the most token positions whose KV states are kept between calls for
            reuse (0: none). A prompt that starts with a kept sequence — the previous turn's
            prompt and generation, as a multi-turn conversation does — has only its new tokens
            prefilled. Under greedy decoding the texts are the same as without reuse (float
            rounding aside). Models whose cache is not plain full attention (sliding windows,
            linear attention) are run without reuse.

    Stop strings end each row through ``generate(stop_strings=...)`` and the text is cut again
    after decoding, so a row stops at its first stop string even when the batch runs on.
    Sampling with a seed runs under ``torch.random.fork_rng``: the global RNG is left untouched.

    :attr:`stats` counts, over all calls, ``prompt_tokens``, ``cached_tokens`` (reused, not
    prefilled), ``completion_tokens`` and ``calls``.
    """

    has_chat_template: bool
    supports_chat: bool
    #: A chat prompt may end with an assistant message, which the model continues.
    supports_prefill = True

    def __init__(
        self,
        model: str | PreTrainedModel,
        tokenizer: str | PreTrainedTokenizerBase | None = None,
        *,
        device: str = "auto",
        dtype: str | torch.dtype = "auto",
        gguf_file: str | None = None,
        batch_size: int | None = None,
        prefix_cache: int = 32768,
    ) -> None:
        torch = _torch()
        tf = _transformers()
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise InvalidOptionError(f"batch_size must be None or an int >= 1, got {batch_size!r}")
        if not isinstance(prefix_cache, int) or isinstance(prefix_cache, bool) or prefix_cache < 0:
            raise InvalidOptionError(
                f"prefix_cache must be an int >= 0 (token positions; 0: off), got {prefix_cache!r}"
            )
        self.batch_size = batch_size
        if device == "auto":
            dev = None if not isinstance(model, str) else ("cuda" if torch.cuda.is_available() else "cpu")
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
                tokenizer = _load_tokenizer(tf, path, **extra)
            self.model = loaded
        else:
            if tokenizer is None:
                raise InvalidOptionError("pass tokenizer= with a loaded model")
            if dev is not None:
                model.to(torch.device(dev))
            if dtype != "auto":
                # transformers' stubs type the decorated PreTrainedModel.to without its self.
                model.to(getattr(torch, dtype) if isinstance(dtype, str) else dtype)  # type: ignore[arg-type]
            self.model = model
        if isinstance(tokenizer, str):
            tokenizer = _load_tokenizer(tf, tokenizer)
        self.tokenizer: PreTrainedTokenizerBase = tokenizer
        self.model.eval()
        self.device = next(self.model.parameters()).device
        self.has_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self.supports_chat = self.has_chat_template
        self.pad_token_id = tokenizer.pad_token_id
        if self.pad_token_id is None:
            self.pad_token_id = tokenizer.eos_token_id
        if self.pad_token_id is None:
            raise InvalidOptionError(
                "the tokenizer has neither a pad nor an eos token: set "
                "tokenizer.pad_token before building the backend"
            )
        eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer.eos_token_id is not None:
            eos.append(tokenizer.eos_token_id)
        #: Token ids that end a row (end of sequence, and the padding after it).
        self._end_ids = {int(t) for t in (*eos, self.pad_token_id)}
        self._cache_kw = _cache_kwarg(self.model)
        #: The prefix cache (``None`` when off or when the model's cache cannot be reused).
        self.prefix_cache = (
            PrefixCache(prefix_cache) if prefix_cache and _full_attention_only(self.model) else None
        )
        self.stats = {"calls": 0, "prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0}

    def apply_chat_template(self, messages: Sequence[Message], *, add_generation_prompt: bool = True) -> str:
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
        return [c.text for c in self.complete(prompts, params)]

    def complete(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Completion]:
        """One :class:`~hopgym.backends.base.Completion` per prompt, with its finish reason and
        token counts (``cached_tokens``: prompt tokens reused from the prefix cache)."""
        prompts = list(prompts)
        if not prompts:
            return []
        step = self.batch_size or len(prompts)
        out: list[Completion] = []
        for start in range(0, len(prompts), step):
            chunk = prompts[start : start + step]
            seed = None if params.seed is None else params.seed + start
            out += self._generate([self.encode(p) for p in chunk], replace(params, seed=seed))
        return out

    def _reused(self, ids: list[list[int]]) -> list[tuple[int | None, int]]:
        if self.prefix_cache is None:
            return [(None, 0)] * len(ids)
        return [self.prefix_cache.match(row) for row in ids]

    def _past(self, matches: list[tuple[int | None, int]], width: int) -> Any:
        """The held KV states of each row's reused prefix, left-padded to ``width`` positions."""
        torch = _torch()
        from transformers.cache_utils import DynamicCache

        assert self.prefix_cache is not None
        entries = [(self.prefix_cache.get(k), n) for k, n in matches if k is not None]
        ref = entries[0][0].kv
        layers = []
        for layer, (k0, v0) in enumerate(ref):
            keys = torch.zeros(
                (len(matches), k0.shape[0], width, k0.shape[-1]), dtype=k0.dtype, device=k0.device
            )
            values = torch.zeros(
                (len(matches), v0.shape[0], width, v0.shape[-1]), dtype=v0.dtype, device=v0.device
            )
            for i, (key, n) in enumerate(matches):
                if key is not None:
                    k, v = self.prefix_cache.get(key).kv[layer]
                    keys[i, :, width - n :] = k[:, :n]
                    values[i, :, width - n :] = v[:, :n]
            layers.append((keys, values))
        return DynamicCache(ddp_cache_data=layers)

    def _hold(
        self, cache: Any, seqs: Any, mask: Any, ids: list[list[int]], matches: list[tuple[int | None, int]]
    ) -> None:
        """Keep each row's prompt and generation (padding removed) in the prefix cache."""
        torch = _torch()
        store = self.prefix_cache
        layers = getattr(cache, "layers", None)
        if store is None or not layers:
            return
        held = layers[0].keys.shape[-2]
        full = torch.cat(
            [
                mask.to(seqs.device),
                torch.ones(
                    (mask.shape[0], seqs.shape[1] - mask.shape[1]), dtype=mask.dtype, device=seqs.device
                ),
            ],
            dim=1,
        )[:, :held]
        for key, n in matches:
            if key is not None and key in store and n >= store.get(key).prompt_len:
                store.drop(key)  # continued by this row: its new entry holds the same prefix
        for i, row in enumerate(ids):
            pos = torch.nonzero(full[i], as_tuple=True)[0]
            kept = seqs[i, :held].index_select(0, pos).cpu().numpy().astype(np.int64)
            pos = pos.to(layers[0].keys.device)
            kv = [
                (layer.keys[i].index_select(1, pos), layer.values[i].index_select(1, pos)) for layer in layers
            ]
            store.add(kept, kv, len(row))

    def _generate(self, ids: list[list[int]], params: SamplingParams) -> list[Completion]:
        torch = _torch()
        matches = self._reused(ids)
        reused = max(n for _, n in matches)
        width = reused + max(len(row) - n for row, (_, n) in zip(ids, matches, strict=True))
        input_ids = torch.full((len(ids), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(ids), width), dtype=torch.long)
        for i, (row, (_, n)) in enumerate(zip(ids, matches, strict=True)):
            # Left padding, so that the new tokens line up on the right; a reused prefix sits at
            # the end of the cached part, and the padding between it and the new tokens is
            # masked out (positions come from the mask, so they stay consecutive).
            if n:
                input_ids[i, reused - n : reused] = torch.tensor(row[:n], dtype=torch.long)
                mask[i, reused - n : reused] = 1
            rest = row[n:]
            if rest:
                input_ids[i, width - len(rest) :] = torch.tensor(rest, dtype=torch.long)
                mask[i, width - len(rest) :] = 1
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.to(self.device),
            "attention_mask": mask.to(self.device),
            "max_new_tokens": params.max_new_tokens,
            "pad_token_id": self.pad_token_id,
            "do_sample": not params.greedy,
            "return_dict_in_generate": True,
        }
        if reused:
            kwargs[self._cache_kw] = self._past(matches, reused)
        if not params.greedy:
            kwargs.update(temperature=float(params.temperature), top_p=float(params.top_p), top_k=0)
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
        seqs = out.sequences
        gen = seqs[:, width:].tolist()
        texts = self.tokenizer.batch_decode(seqs[:, width:], skip_special_tokens=True)
        result = []
        for row, (_, n), toks, text in zip(ids, matches, gen, texts, strict=True):
            cut = cut_at_stop(text, params.stop)
            by_stop = len(cut) < len(text) or any(cut.endswith(s) for s in params.stop)
            end = next((j for j, t in enumerate(toks) if t in self._end_ids), None)
            done = by_stop or end is not None or len(toks) < params.max_new_tokens
            count = len(toks) if end is None else end + (0 if by_stop else 1)
            result.append(
                Completion(
                    cut,
                    finish_reason="stop" if done else "length",
                    prompt_tokens=len(row),
                    cached_tokens=n,
                    completion_tokens=count,
                    token_ids=tuple(toks[:count]),
                )
            )
        self.stats["calls"] += 1
        self.stats["prompt_tokens"] += sum(len(row) for row in ids)
        self.stats["cached_tokens"] += sum(n for _, n in matches)
        self.stats["completion_tokens"] += sum(c.completion_tokens or 0 for c in result)
        if self.prefix_cache is not None:
            self._hold(
                getattr(out, "cache", None) or getattr(out, "past_key_values", None), seqs, mask, ids, matches
            )
        return result
