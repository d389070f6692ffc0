"""LLM agents: :class:`LLMAgent` drives a causal language model through a backend.

Classes: :class:`LLMAgent`. Functions: :func:`make_llm_agent` builds an agent from a model name
and a backend name (the CLI's ``hopgym eval --agent llm`` and ``--agent llm-direct``, the
closed-book baseline); :func:`few_shot_examples` builds worked examples from a teacher's
episodes; :func:`unbatch_infos` splits a vector env's info dict per sub-env.

The backends live one floor down, in :mod:`hopgym.backends` (so that judges can use them too), and
are re-exported here: :class:`SamplingParams`, :class:`Backend` (the protocol),
:class:`TransformersBackend` (local ``transformers`` model, batched ``generate``),
:class:`VLLMBackend` (optional ``vllm`` extra; not run in our tests), :class:`OpenAIBackend` (an
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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hopgym.agents.prompts import (
    CLOSED_BOOK_SYSTEM_PROMPTS,
    answer_prefix,
    chat_messages,
    closed_book_prompt,
    continuation_parts,
    default_system_prompt,
    few_shot_messages,
    few_shot_text,
    last_turn_message,
    plain_head,
    think_delimiters,
)

# The backends moved to hopgym.backends; these names stay importable from here.
from hopgym.backends import (
    BACKENDS,
    Backend,
    BackendError,
    Completion,
    Message,
    OpenAIBackend,
    Prompt,
    SamplingParams,
    TransformersBackend,
    VLLMBackend,
    close_open_tag,
    complete,
    cut_at_stop,
    merge_reasoning,
)
from hopgym.envs.conversation import Conversation
from hopgym.envs.multihop_qa import qa_env
from hopgym.errors import InvalidOptionError, InvalidOptionTypeError
from hopgym.turns.base import Protocol as TurnProtocol
from hopgym.turns.registry import get_protocol

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = [
    "SamplingParams",
    "Backend",
    "BackendError",
    "TransformersBackend",
    "VLLMBackend",
    "OpenAIBackend",
    "LLMAgent",
    "make_llm_agent",
    "BACKENDS",
    "Message",
    "Prompt",
    "Completion",
    "FORCE_ANSWER",
    "few_shot_examples",
    "unbatch_infos",
]

MODES = ("auto", "chat", "continuation")


# ---------------------------------------------------------------------------------- agent
def unbatch_infos(infos: Any, n: int) -> list[dict[str, Any]]:
    """Per-env info dicts from a list of dicts or a Gymnasium vector env's info dict.

    Example:
        >>> import numpy as np
        >>> unbatch_infos({"turn": np.array([0, 2]), "answer": np.array([None, "x"]),
        ...                "_answer": np.array([False, True])}, 2)
        [{'turn': 0}, {'turn': 2, 'answer': 'x'}]
    """
    if isinstance(infos, (list, tuple)):
        if len(infos) != n:
            raise InvalidOptionError(f"got {len(infos)} infos for {n} observations")
        return [dict(i or {}) for i in infos]
    if not isinstance(infos, dict):
        raise InvalidOptionTypeError(
            f"infos must be a list of dicts or a vector env's info dict, got {type(infos).__name__}"
        )
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get("_" + key)
        if isinstance(value, dict):
            for i, sub in enumerate(unbatch_infos(value, n)):
                if mask is None or mask[i]:
                    out[i][key] = sub
            continue
        for i in range(n):
            if mask is None or bool(mask[i]):
                item = value[i]
                out[i][key] = item.item() if isinstance(item, np.generic) else item
    return out


#: When :class:`LLMAgent` prefills the answer: never, on the last turn, or on every turn.
FORCE_ANSWER = ("never", "last", "always")


class LLMAgent:
    """A language-model agent for hopgym envs: keeps the conversation and generates one turn.

    The agent mirrors the env's transcript (``env.unwrapped.transcript``): the first observation
    of an episode (``info["turn"] == 0``, as ``reset`` gives) starts a new conversation; each
    later observation is appended as the env's message. It renders the conversation for the
    backend, generates one turn, cuts it at the protocol's stop strings and returns the text.

    Args:
        backend: a :class:`Backend`.
        protocol: the env's protocol, ``"tags"`` or ``"r3"`` (or a protocol object).
        system_prompt: ``None`` for the default (the protocol's, or the closed-book one), ``""``
            for none (templates without a system role), or your own.
        sampling: temperature, top-p, max new tokens and seed (its ``stop`` is replaced by the
            protocol's stop strings unless ``stop`` is given); default: ``SamplingParams()``
            (greedy, seed 0, 500 tokens a turn).
        use_chat_template: render through the model's chat template; ``False`` uses raw text
            (``system_prompt``, a blank line, the prompt, then the rollout).
        mode: ``"chat"`` (one chat message per turn and observation), ``"continuation"`` (the
            prompt as the user message, the whole rollout as one growing assistant message,
            as Search-R1 trains), or ``"auto"``: chat when the chat template is used and the
            backend supports chat, else continuation.
        stop: stop strings instead of the protocol's.
        force_answer: ``"last"`` (default): on the episode's last turn (``info["turns_left"]
            == 1``) the protocol's answer opening (``<answer>``) is prefilled and the model
            completes the answer; ``"always"``: on every turn; ``"never"``. Continuation mode
            appends the opening to the text; chat mode continues it as a final assistant
            message when the backend can (``backend.supports_prefill``: local models, or an
            :class:`OpenAIBackend` made with ``prefill=True``), and otherwise adds the
            protocol's last-turn notice (:func:`~hopgym.agents.prompts.last_turn_message`) to
            the observation unless the env's ``last_turn_notice`` already did.
        closed_book: the closed-book baseline: the conversation starts from the bare question
            (``info["question"]``, without the env's search instructions), the system prompt
            defaults to :data:`~hopgym.agents.prompts.CLOSED_BOOK_SYSTEM_PROMPTS`, and every
            turn is an answer (``force_answer="always"``). It still acts in the env, so its
            metrics compare with the searching agent's.
        few_shot: worked examples, each a transcript that ends with the answer (see
            :func:`few_shot_examples`; build them from training questions). Chat mode puts them
            before the conversation as prior messages; continuation mode appends them to the
            system prompt as text. A question that appears in an example raises ``ValueError``
            when it is asked.
        tools: ``protocol="tools"``: the env's tool schemas (``env.unwrapped.tool_specs``;
            default: ``search(query)`` and ``answer(answer)``). A backend that takes ``tools=``
            (:class:`OpenAIBackend`) gets the messages and the tools, and a reply's
            ``tool_calls`` come back as the turn: the assistant message itself, which the env
            reads. A local backend gets the conversation rendered with the model's chat template
            and the tools (:class:`~hopgym.envs.conversation.Conversation`); the history keeps
            the model's own text, so each prompt extends the last and the backend's prefix cache
            reuses it. Tool results are tool messages (``info["tool_messages"]``). Answer forcing
            adds the last-turn notice unless the env's already did.

    A turn that ends inside an open action tag — cut at ``max_new_tokens``, or ended by the
    model without its closing tag — gets the closing tag (``<answer>Oslo`` becomes
    ``<answer>Oslo</answer>``), so that the action counts; a thought cut inside ``<think>`` with
    no action is left open for the env to report (``info["truncated_turn"]``). Reasoning a
    server returns apart from the text goes back in front of it as the protocol's thought.
    :attr:`turn_info` records, per conversation, how the last turn was made: ``finish_reason``,
    ``truncated`` (cut at ``max_new_tokens``), ``closed`` (the closing tag added, or ``None``),
    ``forced`` (the answer was prefilled or asked for), the backend's token counts and the
    generated ``token_ids`` (local models).

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
        force_answer: str = "last",
        closed_book: bool = False,
        few_shot: Sequence[Sequence[Message]] = (),
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        if mode not in MODES:
            raise InvalidOptionError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if force_answer not in FORCE_ANSWER:
            raise InvalidOptionError(
                f"force_answer must be one of {', '.join(FORCE_ANSWER)}, got {force_answer!r}"
            )
        self.backend = backend
        self.protocol = get_protocol(protocol)
        self.closed_book = bool(closed_book)
        if system_prompt is None:
            system_prompt = (
                CLOSED_BOOK_SYSTEM_PROMPTS.get(self.protocol.name, "")
                if self.closed_book
                else default_system_prompt(self.protocol)
            )
        self.system_prompt = system_prompt
        self.force_answer = "always" if self.closed_book else force_answer
        self.stop = tuple(self.protocol.stop if stop is None else stop)
        sampling = sampling if sampling is not None else SamplingParams()
        self.sampling = replace(sampling, stop=self.stop)
        self.use_chat_template = use_chat_template
        if mode == "auto":
            mode = "chat" if use_chat_template and backend.supports_chat else "continuation"
        if mode == "chat" and not (use_chat_template and backend.supports_chat):
            raise InvalidOptionError(
                "mode='chat' needs a backend with a chat template and "
                "use_chat_template=True; use mode='continuation' for raw text"
            )
        self.mode = mode
        #: ``protocol="tools"``: the env's tool schemas (``env.unwrapped.tool_specs``).
        self.tools: list[dict[str, Any]] | None = None
        if self.protocol.chat_tools:
            if closed_book:
                raise InvalidOptionError("the closed-book baseline answers in text: use protocol='tags'")
            if few_shot:
                raise InvalidOptionError("few_shot is not supported with protocol='tools' yet")
            self.tools = [
                dict(t) for t in (tools if tools is not None else self.protocol.tool_specs(["local"]))
            ]
            self._check_tools_backend(backend)
        self.few_shot = [list(example) for example in few_shot]
        for example in self.few_shot:
            if not example or example[-1].get("role") != "assistant":
                raise InvalidOptionError(
                    "each few-shot example is a transcript that ends with the model's answer turn"
                )
        self._examples: list[Message] = few_shot_messages(self.few_shot) if self.few_shot else []
        self._examples_text = few_shot_text(self.few_shot) if self.few_shot else ""
        self._prefix = answer_prefix(self.protocol)
        self._think = think_delimiters(self.protocol)
        self._rng = None if sampling.seed is None else np.random.default_rng(sampling.seed)
        self.transcripts: list[list[Message]] = [[]]
        self._turns_left: list[int | None] = [None]
        #: How the last turn of each conversation was made (see the class docstring).
        self.turn_info: list[dict[str, Any]] = [{}]

    @staticmethod
    def _check_tools_backend(backend: Any) -> None:
        if getattr(backend, "supports_tools", False):
            return
        tok = getattr(backend, "tokenizer", None)
        if tok is None or not getattr(tok, "chat_template", None):
            raise InvalidOptionError(
                "protocol='tools' renders the conversation with the model's chat template and the "
                "env's tools: the backend needs a tokenizer with a chat template (a local model), "
                "or must send tools= itself (OpenAIBackend)"
            )

    # -------------------------------------------------------------- conversation
    @property
    def transcript(self) -> list[Message]:
        """The conversation of slot 0 (single-env acting), in the env's transcript format."""
        return self.transcripts[0]

    def reset(self) -> None:
        """Forget every conversation (the sampling seed sequence continues)."""
        self.transcripts = [[]]
        self._turns_left = [None]
        self.turn_info = [{}]

    def _slot(self, i: int) -> list[Message]:
        while len(self.transcripts) <= i:
            self.transcripts.append([])
            self._turns_left.append(None)
            self.turn_info.append({})
        return self.transcripts[i]

    def _check_not_an_example(self, observation: str, info: dict[str, Any]) -> None:
        question = info.get("question")
        for example in self.few_shot:
            first = example[0].get("content", "")
            if (question and question in first) or first == observation:
                raise InvalidOptionError(
                    f"the question being asked is one of the few-shot examples "
                    f"({question or observation[:80]!r}): build the examples from "
                    f"training questions, never from the evaluated ones"
                )

    def observe(self, observation: str, info: dict[str, Any] | None = None, slot: int = 0) -> None:
        """Add an env observation to conversation ``slot`` (a new episode when ``turn == 0``)."""
        info = info or {}
        if not isinstance(observation, str):
            raise InvalidOptionTypeError(f"observations are strings, got {type(observation).__name__}")
        conv = self._slot(slot)
        if info.get("turn") == 0 or not conv:
            if self.few_shot:
                self._check_not_an_example(observation, info)
            if self.closed_book and isinstance(info.get("question"), str):
                observation = closed_book_prompt(info["question"])
            conv[:] = [{"role": "user", "content": observation}]
            self._turns_left[slot] = info.get("max_turns")
        else:
            if self.tools is not None and info.get("tool_messages") is not None:
                # Tool results come back as tool messages (a corrective as a user message).
                conv.extend(dict(m) for m in info["tool_messages"])
            elif observation:
                conv.append({"role": "user", "content": observation})
            self._turns_left[slot] = info.get("turns_left")

    def messages(self, slot: int = 0) -> list[Message]:
        """The chat messages for conversation ``slot`` (system prompt and examples first)."""
        msgs = chat_messages(self._slot(slot), self.system_prompt)
        if not self._examples:
            return msgs
        at = 1 if self.system_prompt else 0
        return msgs[:at] + self._examples + msgs[at:]

    def _forced(self, slot: int) -> bool:
        if self.force_answer == "always":
            return True
        return self.force_answer == "last" and self._turns_left[slot] == 1

    def _system_text(self) -> str:
        if not self._examples_text:
            return self.system_prompt
        head = "Worked examples:\n\n" + self._examples_text
        return f"{self.system_prompt}\n\n{head}" if self.system_prompt else head

    def _tools_request(self, slot: int) -> Prompt:
        """``protocol="tools"``: the messages for a server that takes ``tools=``, else the
        conversation rendered with the model's chat template and the tools (the history keeps
        the model's own text, so each prompt extends the last one and a local backend's prefix
        cache reuses it)."""
        msgs = [dict(m) for m in self._slot(slot)]
        notice = self.protocol.LAST_TURN
        if self._forced(slot) and msgs and notice not in (msgs[-1].get("content") or ""):
            msgs.append({"role": "user", "content": notice})
        system = self.system_prompt or None
        if getattr(self.backend, "supports_tools", False):
            return ([{"role": "system", "content": system}] if system else []) + msgs
        conv = Conversation(msgs, self.tools or (), system)
        # A backend without tool support is a local one: it renders with its own tokenizer, which
        # the Backend protocol does not declare.
        return conv.render(cast(Any, self.backend).tokenizer, add_generation_prompt=True)

    def _request(self, slot: int) -> tuple[Prompt, str]:
        """What to send the backend for ``slot``, and the prefilled text the reply continues."""
        if self.tools is not None:
            return self._tools_request(slot), ""
        conv = self._slot(slot)
        forced = self._forced(slot)
        if self.mode == "chat":
            msgs = self.messages(slot)
            if not forced:
                return msgs, ""
            if getattr(self.backend, "supports_prefill", False):
                return msgs + [{"role": "assistant", "content": self._prefix}], self._prefix
            note = last_turn_message(self.protocol)
            last = msgs[-1]
            if note not in last["content"]:  # the env's last_turn_notice already says it
                msgs[-1] = {"role": "user", "content": f"{last['content']}\n{note}".lstrip()}
            return msgs, ""
        prompt, rollout = continuation_parts(conv)
        prefix = self._prefix if forced else ""
        system = self._system_text()
        if self.use_chat_template and self.backend.has_chat_template:
            head = [{"role": "user", "content": prompt}]
            if system:
                head.insert(0, {"role": "system", "content": system})
            rendered = self.backend.apply_chat_template(head, add_generation_prompt=True)
            return rendered + rollout + prefix, prefix
        return plain_head(prompt, system) + rollout + prefix, prefix

    def build_prompt(self, slot: int = 0) -> Prompt:
        """What :meth:`act` sends the backend for conversation ``slot``."""
        return self._request(slot)[0]

    def _params(self) -> SamplingParams:
        seed = None if self._rng is None else int(self._rng.integers(2**31 - 1))
        return replace(self.sampling, seed=seed)

    def _turns(self, slots: list[int]) -> list[Any]:
        """Generate one turn for each slot with one backend call; record and return them."""
        requests = [self._request(i) for i in slots]
        prompts = [r for r, _ in requests]
        if self.tools is not None and getattr(self.backend, "supports_tools", False):
            # supports_tools: a backend whose complete() takes the tool schemas (not in Backend).
            results = cast(Any, self.backend).complete(prompts, self._params(), tools=self.tools)
        else:
            results = complete(self.backend, prompts, self._params())
        texts: list[Any] = []
        for slot, (_, prefix), res in zip(slots, requests, results, strict=True):
            text = merge_reasoning(
                cut_at_stop(res.text, self.stop),
                res.reasoning,
                res.truncated,
                open_tag=self._think[0],
                close_tag=self._think[1],
            )
            text = prefix + text
            closed = close_open_tag(text, self.stop)
            self.turn_info[slot] = {
                "finish_reason": res.finish_reason,
                "truncated": res.truncated,
                "closed": closed[len(text) :] or None,
                "forced": self._forced(slot),
                "prompt_tokens": res.prompt_tokens,
                "cached_tokens": res.cached_tokens,
                "completion_tokens": res.completion_tokens,
                "token_ids": res.token_ids,
            }
            if res.tool_calls:
                # The server's structured message: the env reads its tool_calls as they are.
                message: dict[str, Any] = {
                    "role": "assistant",
                    "content": closed,
                    "tool_calls": [dict(c) for c in res.tool_calls],
                }
                self.transcripts[slot].append(message)
                texts.append(dict(message))
                continue
            self.transcripts[slot].append({"role": "assistant", "content": closed})
            texts.append(closed)
        return texts

    # -------------------------------------------------------------- acting
    def act(self, observation: str, info: dict[str, Any]) -> str | dict[str, Any]:
        """Read an observation and return the model's next turn: its text, or (``tools``
        protocol, a server that returned ``tool_calls``) the assistant message with them."""
        self.observe(observation, info, 0)
        return self._turns([0])[0]

    def act_batch(
        self,
        observations: Sequence[str],
        infos: Sequence[dict[str, Any]] | dict[str, Any],
        *,
        active: Sequence[bool] | None = None,
    ) -> list[Any]:
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
        per_env = unbatch_infos(infos, n)
        mask = [True] * n if active is None else [bool(a) for a in active]
        if len(mask) != n:
            raise InvalidOptionError(f"active has {len(mask)} entries for {n} observations")
        rows = [i for i in range(n) if mask[i]]
        for i in rows:
            self.observe(observations[i], per_env[i], i)
        out: list[Any] = [""] * n
        for i, text in zip(rows, self._turns(rows) if rows else [], strict=True):
            out[i] = text
        return out


def few_shot_examples(
    env: gym.Env,
    n: int,
    *,
    seed: int = 0,
    agent_fn: Callable[[gym.Env], Any] | None = None,
    closed_book: bool = False,
) -> list[list[Message]]:
    """``n`` worked examples for :class:`LLMAgent`'s ``few_shot``: transcripts of a teacher (the
    oracle by default) on the env's questions, in a seeded order, keeping those it answered right.

    Build them from *training* questions (``split="train"`` for the synthetic world, another
    file or slice for a benchmark): :class:`LLMAgent` refuses to be asked an example's question.

    Args:
        env: the env whose questions the examples use.
        n: how many examples.
        seed: seeds the question order and each episode's reset.
        agent_fn: builds the teacher for ``env`` (default :class:`~hopgym.agents.OracleAgent`).
        closed_book: question-and-answer pairs for the closed-book baseline
            (:func:`~hopgym.agents.prompts.closed_book_prompt` and the answer turn).

    Raises:
        hopgym.errors.InvalidOptionError: ``n < 1``, or fewer than ``n`` questions the teacher answers right.
    """
    from hopgym.agents.scripted import OracleAgent
    from hopgym.rewards.scoring import exact_match

    if not isinstance(n, int) or n < 1:
        raise InvalidOptionError(f"n must be an int >= 1, got {n!r}")
    teacher = (agent_fn or OracleAgent)(env)
    base = qa_env(env)
    count = len(base.task.samples)
    out: list[list[Message]] = []
    for k, index in enumerate(np.random.default_rng(seed).permutation(count)):
        teacher.reset()
        obs, info = env.reset(seed=seed + k, options={"index": int(index)})
        answer, done = None, False
        while not done:
            obs, _, terminated, truncated, info = env.step(teacher.act(obs, info))
            done = terminated or truncated
            answer = info.get("answer") or answer
        sample = base.current_sample
        if answer is None or not exact_match(answer, list(sample.answers)):
            continue
        transcript = [dict(m) for m in base.transcript]
        if closed_book:
            transcript = [{"role": "user", "content": closed_book_prompt(sample.question)}, transcript[-1]]
        out.append(transcript)
        if len(out) == n:
            return out
    raise InvalidOptionError(
        f"only {len(out)} of the env's {count} questions were answered right by the "
        f"teacher; asked for {n} examples"
    )


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
    closed_book: bool = False,
    force_answer: str = "last",
    few_shot: Sequence[Sequence[Message]] = (),
    tools: Sequence[Mapping[str, Any]] | None = None,
) -> LLMAgent:
    """An :class:`LLMAgent` for ``model`` on a named backend (the CLI's ``--agent llm``, and
    ``--agent llm-direct`` with ``closed_book=True``).

    Args:
        model: a model id or path (``transformers``/``vllm``; a ``.gguf`` file works with
            transformers and the ``gguf`` package), or the served model name (``openai``).
        backend: ``"transformers"``, ``"vllm"`` or ``"openai"``.
        protocol: the env's protocol.
        base_url: the server's API root, required for ``openai``.
        temperature, max_new_tokens, seed, top_p: sampling.
        mode, system_prompt, closed_book, force_answer, few_shot, tools: see :class:`LLMAgent`.
        api_key: for ``openai``.
        device, dtype: for ``transformers``.

    Example:
        >>> make_llm_agent("m", backend="tgi")
        Traceback (most recent call last):
        ...
        hopgym.errors.InvalidOptionError: unknown backend 'tgi'; choose one of transformers, vllm, openai
    """
    if backend not in BACKENDS:
        raise InvalidOptionError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)
    impl: Backend
    if backend == "transformers":
        impl = TransformersBackend(model, device=device, dtype=dtype)
    elif backend == "vllm":
        impl = VLLMBackend(model, seed=seed)
    else:
        if not base_url:
            raise InvalidOptionError("backend 'openai' needs base_url, e.g. http://127.0.0.1:8000/v1")
        impl = OpenAIBackend(base_url, model, api_key=api_key)
    return LLMAgent(
        impl,
        protocol=protocol,
        system_prompt=system_prompt,
        sampling=sampling,
        mode=mode,
        closed_book=closed_book,
        force_answer=force_answer,
        few_shot=few_shot,
        tools=tools,
    )
