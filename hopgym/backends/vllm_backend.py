"""An in-process vLLM engine as a backend: :class:`VLLMBackend` (``pip install 'hopgym[vllm]'``)."""

from __future__ import annotations

from collections.abc import Sequence

from hopgym.backends.base import Completion, Message, Prompt, SamplingParams, _render_template
from hopgym.backends.stops import cut_at_stop
from hopgym.errors import DependencyNotInstalled

__all__ = ["VLLMBackend"]


class VLLMBackend:
    """An in-process vLLM engine (``pip install 'hopgym[vllm]'``).

    Not run in our tests (vLLM is not among hopgym's test dependencies); this class
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

    #: A chat prompt may end with an assistant message, which the model continues.
    supports_prefill = True

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
        self.llm = vllm.LLM(
            model=model,
            tokenizer=tokenizer,
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.has_chat_template = bool(getattr(self.tokenizer, "chat_template", None))
        self.supports_chat = self.has_chat_template

    def apply_chat_template(self, messages: Sequence[Message], *, add_generation_prompt: bool = True) -> str:
        return _render_template(self.tokenizer, messages, add_generation_prompt)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[str]:
        return [c.text for c in self.complete(prompts, params)]

    def complete(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[Completion]:
        """:meth:`generate` with each output's finish reason and token counts."""
        texts = [p if isinstance(p, str) else self.apply_chat_template(p) for p in prompts]
        sampling = [
            self._vllm.SamplingParams(
                temperature=float(params.temperature),
                top_p=float(params.top_p),
                max_tokens=params.max_new_tokens,
                seed=None if params.seed is None else params.seed + i,
                stop=list(params.stop),
                include_stop_str_in_output=True,
            )
            for i in range(len(texts))
        ]
        outputs = self.llm.generate(texts, sampling, use_tqdm=False)
        out = []
        for o in outputs:
            first = o.outputs[0]
            reason = getattr(first, "finish_reason", None)
            out.append(
                Completion(
                    cut_at_stop(first.text, params.stop),
                    finish_reason=reason if reason in ("stop", "length") else None,
                    prompt_tokens=len(o.prompt_token_ids or ()),
                    cached_tokens=getattr(o, "num_cached_tokens", None),
                    completion_tokens=len(first.token_ids or ()),
                )
            )
        return out
