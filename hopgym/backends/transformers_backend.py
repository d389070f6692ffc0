"""A local ``transformers`` causal LM as a backend: :class:`TransformersBackend`.

Needs the ``train`` extra (torch, transformers); importing this module imports neither.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from hopgym.backends.base import (
    Message,
    Prompt,
    SamplingParams,
    _fix_stops,
    _render_template,
    _torch,
    _transformers,
)

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
            raise ValueError(f"{model} holds several .gguf files ({', '.join(ggufs)}): pass "
                             f"gguf_file= or the path of one file")
    return model, None



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
