"""An OpenAI-compatible HTTP server as a backend: :class:`OpenAIBackend` (standard library only)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from hopgym.backends.base import (
    BackendError,
    Completion,
    Message,
    Prompt,
    SamplingParams,
    _render_template,
    _transformers,
)
from hopgym.backends.stops import close_open_tag, cut_at_stop, merge_reasoning
from hopgym.errors import InvalidOptionError
from hopgym.httpclient import HTTPClient, HTTPError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["OpenAIBackend", "REASONING_FIELDS"]

#: Fields of a chat reply's ``message`` that hold thinking returned apart from ``content``, in the
#: order they are read: ``reasoning_content`` (SGLang, llama.cpp's ``llama-server``,
#: ``transformers serve``, DeepSeek, vLLM before 0.11), ``reasoning`` (vLLM since 0.11, OpenRouter,
#: Ollama's OpenAI-compatible API), ``thinking`` (Ollama's own API, some response templates).
REASONING_FIELDS: tuple[str, ...] = ("reasoning_content", "reasoning", "thinking")


class OpenAIBackend:
    """An OpenAI-compatible server (``vllm serve``, SGLang, llama.cpp's ``llama-server``, …).

    Chat prompts go to ``POST {base_url}/chat/completions``, raw text to ``{base_url}/completions``,
    one request per prompt, up to ``max_concurrency`` at a time (the server batches them).
    Requests go through :class:`~hopgym.httpclient.HTTPClient` (keep-alive connections, the
    retry policy and the time bound are described there); only the standard library is used.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``; a URL without a path
            (``http://127.0.0.1:8000``) gets ``/v1``, any other is used as given.
        model: the served model's name.
        api_key: sent as ``Authorization: Bearer …`` when given.
        timeout: seconds one attempt may take (connecting, sending, the whole reply).
        retries: further attempts after a connection error, a timeout or a
            :data:`~hopgym.httpclient.RETRYABLE_STATUS` reply (408, 429, 5xx).
        backoff: the nominal wait before the first retry in seconds, doubled for each further
            one, jittered, lengthened to the server's ``Retry-After``.
        max_backoff: the longest wait between two attempts.
        max_concurrency: requests in flight at once.
        tokenizer: optional local tokenizer (object, id or path) used only to render a chat
            template locally (``LLMAgent(mode="continuation")`` with a template).
        headers: extra HTTP headers sent with every request.
        extra_body: more fields for every request body, e.g. ``{"n": 1}`` or
            ``{"chat_template_kwargs": {"enable_thinking": False}}``; they override the fields
            the backend sets. No ``n`` is sent unless given here (some servers warn about it).
        prefill: the server continues a final ``assistant`` message when asked with
            ``continue_final_message`` (vLLM and SGLang do; ``transformers serve`` does not).
            Chat prompts that end with an assistant message (a prefilled answer tag) are only
            accepted with ``prefill=True``.

    Servers drop the stop string from the reply; for closing-tag stops (``</search>``) it is
    put back (:func:`~hopgym.backends.stops.close_open_tag`) so that the turn parses.
    Thinking that the server returns apart from the content (:data:`REASONING_FIELDS`, filled
    when the server runs a reasoning parser) comes back in :attr:`Completion.reasoning
    <hopgym.backends.base.Completion.reasoning>` from :meth:`complete`; :meth:`generate` puts it
    back in front of the text as ``<think>…</think>``, as the model wrote it.

    Example:
        >>> OpenAIBackend("http://127.0.0.1:8000", "m").base_url
        'http://127.0.0.1:8000/v1'
        >>> OpenAIBackend("https://example.org/v1beta/openai/", "m").base_url
        'https://example.org/v1beta/openai'
    """

    supports_chat = True
    #: :meth:`complete` sends ``tools=`` and returns the reply's ``tool_calls``.
    supports_tools = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_concurrency: int = 8,
        tokenizer: str | PreTrainedTokenizerBase | None = None,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        prefill: bool = False,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise InvalidOptionError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not isinstance(max_concurrency, int) or max_concurrency < 1:
            raise InvalidOptionError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        base = base_url.rstrip("/")
        self.base_url = base if urlsplit(base).path else base + "/v1"
        self.model, self.api_key = model, api_key
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # The client checks timeout, retries and the waits, with one set of messages.
        self._http = HTTPClient(
            self.base_url,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_backoff=max_backoff,
            headers={**(headers or {}), **auth},
        )
        self.max_concurrency = max_concurrency
        if extra_body is not None and not isinstance(extra_body, Mapping):
            raise InvalidOptionError(
                f"extra_body must be a mapping of request fields, got {type(extra_body).__name__}"
            )
        self.extra_body = dict(extra_body or {})
        #: Whether a chat prompt may end with an assistant message for the model to continue.
        self.supports_prefill = bool(prefill)
        if isinstance(tokenizer, str):
            tokenizer = _transformers().AutoTokenizer.from_pretrained(tokenizer)
        self.tokenizer = tokenizer
        self.has_chat_template = bool(tokenizer is not None and getattr(tokenizer, "chat_template", None))

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIBackend({self.base_url!r}, {self.model!r})"

    # The retry policy lives in the client; these read it.
    timeout = property(lambda self: self._http.timeout, doc="Seconds one attempt may take.")
    retries = property(lambda self: self._http.retries, doc="Further attempts after a failure.")
    backoff = property(lambda self: self._http.backoff, doc="The first nominal wait (seconds).")
    max_backoff = property(lambda self: self._http.max_backoff, doc="The longest wait (seconds).")

    def apply_chat_template(self, messages: Sequence[Message], *, add_generation_prompt: bool = True) -> str:
        if self.tokenizer is None:
            raise InvalidOptionError(
                "OpenAIBackend renders chat templates on the server; pass "
                "tokenizer= to render one locally (mode='continuation')"
            )
        return _render_template(self.tokenizer, messages, add_generation_prompt)

    # -------------------------------------------------------------- requests
    def _post(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            return self._http.post_json(path, payload)
        except HTTPError as exc:
            hint = " Check that the server is up, or raise timeout=/retries=." if exc.transient else ""
            raise BackendError(f"{exc}.{hint}") from exc

    def _one(
        self, prompt: Prompt, params: SamplingParams, seed: int | None, tools: list[Any] | None = None
    ) -> Completion:
        payload: dict[str, Any] = {
            "model": self.model,
            "max_tokens": params.max_new_tokens,
            "temperature": float(params.temperature),
            "top_p": float(params.top_p),
        }
        if seed is not None:
            payload["seed"] = seed
        if params.stop:
            payload["stop"] = list(params.stop)
        chat = not isinstance(prompt, str)
        if tools and not chat:
            raise InvalidOptionError("tools= needs a chat prompt (messages), not raw text")
        if isinstance(prompt, str):
            payload["prompt"] = prompt
        else:
            payload["messages"] = list(prompt)
            if tools:
                payload["tools"] = list(tools)
            if prompt and prompt[-1].get("role") == "assistant":
                if not self.supports_prefill:
                    raise InvalidOptionError(
                        "the chat prompt ends with an assistant message to continue: "
                        "pass OpenAIBackend(prefill=True) if the server supports "
                        "continue_final_message (vLLM, SGLang)"
                    )
                payload.update(continue_final_message=True, add_generation_prompt=False)
        payload.update(self.extra_body)
        reply = self._post("/chat/completions" if chat else "/completions", payload)
        try:
            choice = reply["choices"][0]
            message = choice["message"] if chat else choice
            text = message["content" if chat else "text"]
        except (KeyError, IndexError, TypeError):
            field = "message.content" if chat else "text"
            raise BackendError(
                f"unexpected reply from {self.base_url}: no choices[0].{field} in {json.dumps(reply)[:300]}"
            ) from None
        text = text or ""
        reasoning = next(
            (message[f] for f in REASONING_FIELDS if isinstance(message.get(f), str) and message[f]), None
        )
        finish = choice.get("finish_reason")
        calls = _tool_calls(message.get("tool_calls")) if chat else None
        if finish == "tool_calls":  # the model ended its turn with calls
            finish = "stop"
        if finish == "stop" and params.stop:
            text = close_open_tag(text, params.stop)
        given_usage = reply.get("usage")
        usage: dict[str, Any] = given_usage if isinstance(given_usage, dict) else {}
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        return Completion(
            cut_at_stop(text, params.stop),
            finish_reason=finish if finish in ("stop", "length") else None,
            reasoning=reasoning,
            prompt_tokens=usage.get("prompt_tokens"),
            cached_tokens=cached,
            completion_tokens=usage.get("completion_tokens"),
            tool_calls=calls,
        )

    def complete(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Completion]:
        """One :class:`~hopgym.backends.base.Completion` per prompt (finish reason, reasoning
        and the server's token counts); requests run ``max_concurrency`` at a time.

        Args:
            prompts: raw texts or chat message lists.
            params: sampling.
            tools: OpenAI tool schemas, sent as ``tools=`` with chat prompts; the reply's
                ``tool_calls`` come back in :attr:`Completion.tool_calls
                <hopgym.backends.base.Completion.tool_calls>` (arguments as JSON strings).
        """
        prompts = list(prompts)
        spec = [dict(t) for t in tools] if tools else None
        seeds = [None if params.seed is None else params.seed + i for i in range(len(prompts))]
        if len(prompts) <= 1 or self.max_concurrency == 1:
            return [self._one(p, params, s, spec) for p, s in zip(prompts, seeds, strict=True)]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(prompts))) as pool:
            jobs = [pool.submit(self._one, p, params, s, spec) for p, s in zip(prompts, seeds, strict=True)]
            return [job.result() for job in jobs]

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[str]:
        """The texts of :meth:`complete`, with returned reasoning put back as ``<think>…</think>``."""
        return [merge_reasoning(c.text, c.reasoning, c.truncated) for c in self.complete(prompts, params)]


def _tool_calls(raw: Any) -> tuple[dict[str, Any], ...] | None:
    """A reply's ``tool_calls`` as OpenAI entries with JSON-string arguments (servers differ: some
    return the arguments as an object), or ``None`` when there are none. Entries that are not
    calls are kept as they are: the env reports them."""
    if not isinstance(raw, list) or not raw:
        return None
    out = []
    for call in raw:
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            fn = dict(call["function"])
            if not isinstance(fn.get("arguments"), str):
                fn["arguments"] = json.dumps(fn.get("arguments") or {}, ensure_ascii=False)
            call = {**call, "type": call.get("type") or "function", "function": fn}
        out.append(dict(call) if isinstance(call, Mapping) else call)
    return tuple(out)
