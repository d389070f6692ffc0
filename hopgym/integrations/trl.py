"""TRL's native environment training: :func:`environment_factory`, :func:`question_dataset`.

``GRPOTrainer(environment_factory=...)`` (TRL >= 1.16, experimental there) makes one environment
object per rollout, calls its ``reset(**row)`` (the returned text is appended to the prompt's
last user message), exposes its public methods as tools (schemas built from their signatures and
Google-style docstrings), runs the calls the model writes, and reads the episode's reward from
``get_reward()``. :func:`environment_factory` returns such a factory for any hopgym env id: the
tools are the env's ``search`` (with a ``source`` enum when the env has several sources) and
``answer``; every call is one step of a ``protocol="tools"`` env built by ``gym.make``, so the
reward is the one its reward preset composes (``reward=``, every preset and wrapper stack), with
the terms of the last episode in :attr:`HopgymToolEnv.reward_terms`.

Episode ends: TRL's tool loop has no way for an environment to end a rollout (it goes on while
the model writes tool calls, up to ``max_tool_calling_iterations``), so the end is said in the
tool replies: ``answer`` replies :data:`EPISODE_OVER`, and so does every tool called after the
episode ended (by an answer or by the env's turn budget), without stepping the env: the reward
stays the episode's, and no turn of a training batch is the env's "call reset()" reply.

A rollout that ends without an ``answer`` call (the model's last turn had no tool call, or TRL's
length or tool-call limits cut it) is closed as the env would close it: one invalid turn (the
model's last, which called no tool) and the end-of-episode terms of an unanswered episode.

:func:`openenv_environment_factory` is the same over a ``hopgym serve-env`` server (OpenEnv's
client, one server session per episode): the row's ``question_id`` goes to the server's reset, so
a GRPO group shares its question there too.

Models whose chat template renders no tools (SmolLM2's) are refused by TRL ("The provided chat
template does not support tool calling"); :func:`use_tool_chat_template` gives such a ChatML
tokenizer TRL's Qwen2.5 template (hermes ``<tool_call>`` blocks), which TRL also knows how to parse
and to train on prefix by prefix.

TRL reads the model's calls with the tokenizer's response parser, which finds only calls in the
template's own form (``<tool_call>`` blocks for Qwen2.5's). A model that writes its calls as bare
JSON (Qwen2.5-Coder) gets none read; :func:`use_hopgym_tool_parser` makes TRL read the calls with
hopgym's own tools protocol instead (tagged, bare JSON and the other forms the env accepts).

Nothing here imports TRL at import time: the trainer calls these objects.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, cast

import gymnasium as gym

from hopgym.errors import InvalidOptionError
from hopgym.rewards.base import RewardTermWrapper
from hopgym.turns import StepInfo, get_protocol

__all__ = [
    "HopgymToolEnv",
    "environment_factory",
    "openenv_environment_factory",
    "question_dataset",
    "use_tool_chat_template",
    "use_hopgym_tool_parser",
    "EPISODE_OVER",
]

#: The tool reply once the episode is over (after ``answer``, and to any later call).
EPISODE_OVER = "Answer recorded. The episode is over: reply without calling a tool."


class HopgymToolEnv:
    """One hopgym episode driven by TRL's tool-calling loop (see the module docstring).

    Args:
        env: a hopgym text env made with ``protocol="tools"`` (any wrappers).

    Attributes:
        env: the env.
        reward: the episode's reward so far (the sum of its steps' rewards).
        reward_terms: the episode's reward terms so far (name to summed value).
        done: whether the episode has ended.
    """

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.reward = 0.0
        self.reward_terms: dict[str, float] = {}
        self.done = False
        self._info: dict[str, Any] = {}
        self._started = False

    def reset(self, question_id: str | None = None, **row: Any) -> str:
        """Start an episode; returns the question prompt (appended to the prompt's user message).

        Args:
            question_id: the question to ask (a dataset column, see :func:`question_dataset`,
                so that a GRPO group shares its question); ``None``: one drawn by the env.
            **row: the dataset row's other columns (ignored).
        """
        options = {"question_id": question_id} if question_id is not None else None
        obs, self._info = self.env.reset(options=options)
        self.reward, self.reward_terms, self.done, self._started = 0.0, {}, False, True
        return obs

    def _step(self, action: Any) -> str:
        if not self._started:
            self.reset()
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.reward += float(reward)
        for name, value in (info.get("reward_terms") or {}).items():
            self.reward_terms[name] = self.reward_terms.get(name, 0.0) + float(value)
        self._info = info
        self.done = self.done or terminated or truncated
        messages = info.get("tool_messages") or []
        return "\n".join(m["content"] for m in messages) if messages else obs

    def _call(self, name: str, **arguments: Any) -> str:
        import json

        if self.done:  # the env would answer "call reset()": tell the model the episode is over
            return EPISODE_OVER
        call = {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}
        return self._step({"role": "assistant", "content": "", "tool_calls": [call]})

    def search(self, query: str) -> str:
        """Search the knowledge source for documents about the query.

        Args:
            query: The search query: a few keywords.

        Returns:
            The documents found, one per line.
        """
        return self._call("search", query=query)

    def answer(self, answer: str) -> str:
        """Give the final answer to the question; this ends the episode.

        Args:
            answer: The answer: a short span, no explanation.

        Returns:
            A confirmation.
        """
        reply = self._call("answer", answer=answer)
        return EPISODE_OVER if self.done else reply

    def get_reward(self) -> float:
        """The episode's reward, composed by the env's reward wrappers; closes an unfinished episode."""
        if self._started and not self.done:
            self._step("")  # the model's last turn called no tool: an invalid turn
            if not self.done:
                for name, value in _settle(self.env, self._info).items():
                    self.reward += value
                    self.reward_terms[name] = self.reward_terms.get(name, 0.0) + value
                self.done = True
        return self.reward


def _settle(env: gym.Env, info: dict[str, Any]) -> dict[str, float]:
    """The end-of-episode terms of an unanswered episode, from every reward wrapper not yet ended."""
    out: dict[str, float] = {}
    while isinstance(env, gym.Wrapper):
        if isinstance(env, RewardTermWrapper) and not env._ended:
            env._ended = True
            for name, value in env._end_terms(cast(StepInfo, info), False).items():
                out[name] = out.get(name, 0.0) + float(value)
        env = env.env
    return out


def _routing_class(sources: tuple[str, ...]) -> type[HopgymToolEnv]:
    """A :class:`HopgymToolEnv` whose ``search`` takes a ``source`` (an enum of ``sources``)."""
    choices = ", ".join(f'"{s}"' for s in sources)

    def search(self, query: str, source: str = sources[0]) -> str:  # type: ignore[no-untyped-def]
        return self._call("search", query=query, source=source)

    search.__doc__ = f"""Search a knowledge source for documents about the query.

        Args:
            query: The search query: a few keywords.
            source: Where to search (choices: [{choices}])

        Returns:
            The documents found, one per line.
        """
    return type(
        "HopgymRoutingToolEnv", (HopgymToolEnv,), {"search": search, "__doc__": HopgymToolEnv.__doc__}
    )


def environment_factory(env_id: str, **env_kwargs: Any) -> Callable[[], HopgymToolEnv]:
    """What ``GRPOTrainer(environment_factory=...)`` takes: a callable that makes one
    :class:`HopgymToolEnv` per rollout, each over ``gym.make(env_id, protocol="tools", **env_kwargs)``.

    Args:
        env_id: a hopgym text env id (``"hopgym/Synthetic-v1"``, ...).
        **env_kwargs: env options and the id's own arguments (``reward="searchr1"``,
            ``sources=(...)``, ``max_turns``, ...); ``protocol`` is ``"tools"``.

    Raises:
        hopgym.errors.InvalidOptionError: a ``protocol`` other than ``"tools"``.

    Example:
        >>> make_env = environment_factory("hopgym/Tiny-v1", reward="em")
        >>> env = make_env()
        >>> "Question:" in env.reset(question_id="tiny-1")
        True
        >>> print(env.search("Qelvor Dynamics founded")[:60])
        Doc 1 (Title: Qelvor Dynamics) Qelvor Dynamics is a shipbuil
        >>> env.answer("1962") == EPISODE_OVER, env.get_reward(), env.reward_terms
        (True, 1.0, {'outcome': 1.0})
        >>> env.search("more") == EPISODE_OVER, env.get_reward()  # the env is not stepped again
        (True, 1.0)
    """
    kwargs = {**env_kwargs, "protocol": env_kwargs.get("protocol", "tools")}
    if not get_protocol(kwargs["protocol"]).chat_tools:
        raise InvalidOptionError(
            f"environment_factory speaks protocol='tools', got protocol={env_kwargs['protocol']!r}"
        )
    probe = gym.make(env_id, **kwargs)
    sources = tuple(getattr(probe.unwrapped, "source_names", ()))
    probe.close()
    cls = _routing_class(sources) if len(sources) > 1 else HopgymToolEnv

    def make() -> HopgymToolEnv:
        return cls(gym.make(env_id, **kwargs))

    make.__name__ = f"environment_factory({env_id!r})"
    return make


def question_dataset(env_id: str, n: int | None = None, **env_kwargs: Any) -> Any:
    """A ``datasets.Dataset`` with an empty user ``prompt`` and a ``question_id`` per row, for
    ``GRPOTrainer(train_dataset=...)``: each GRPO group then shares its question (the env's
    ``reset`` writes it into the prompt).

    Args:
        env_id: the env id (as for :func:`environment_factory`).
        n: the number of questions (``None``: all of the env's).
        **env_kwargs: the env's arguments.
    """
    from datasets import Dataset  # type: ignore[import-untyped]

    env = gym.make(env_id, **{**env_kwargs, "protocol": "tools"})
    ids = [s.id for s in env.unwrapped.task.samples][:n]  # type: ignore[attr-defined]
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": ""}] for _ in ids], "question_id": ids})


class _OpenEnvSession:
    """``reset``/``step`` of a ``hopgym serve-env`` env, one OpenEnv client session per episode.

    Each ``reset`` closes the previous episode's session and opens a new one, so no session sits
    idle between episodes (a training step can outlast the server's ``session_timeout``); within
    an episode a session idles for one model turn at most.
    """

    def __init__(self, base_url: str, **client_kwargs: Any) -> None:
        self.base_url = base_url
        self.client_kwargs = client_kwargs
        self._client: Any = None

    def reset(self, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        from hopgym.integrations.openenv import openenv_client

        self.close()
        self._client = openenv_client(self.base_url, protocol="tools", **self.client_kwargs).sync()
        self._client.connect()
        result = self._client.reset(**({"options": options} if options else {}))
        return str(result.observation["text"]), dict(result.observation["info"])

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        # An assistant message (tool calls) is the env's action as it is; text goes as a message.
        result = self._client.step(action if isinstance(action, dict) else {"message": action})
        obs = result.observation
        info = dict(obs["info"])
        return (
            str(obs["text"]),
            float(result.reward or 0.0),
            bool(obs["terminated"]),
            bool(obs["truncated"]),
            info,
        )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class HopgymOpenEnvToolEnv(HopgymToolEnv):
    """:class:`HopgymToolEnv` over a ``hopgym serve-env`` server (see
    :func:`openenv_environment_factory`).

    An episode the model leaves without an ``answer`` is played out on the server with turns that
    call no tool until the env's turn budget ends it (a server's episode cannot be ended early),
    so its reward is the server env's for those turns. The tools are :class:`HopgymToolEnv`'s
    (its public methods, which TRL exposes): the session is closed by the next ``reset``, by
    ``self.env.close()``, or when the object is collected.
    """

    env: Any

    def get_reward(self) -> float:
        while self._started and not self.done:
            self._step("")  # the model's last turn called no tool: an invalid turn
        return self.reward

    # No public ``close``: TRL makes every public method a tool. The last episode's session is
    # closed by the next reset, or with ``env.env.close()``, or when the object is collected.
    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit the client may be gone already
            self.env.close()


def openenv_environment_factory(base_url: str, **client_kwargs: Any) -> Callable[[], HopgymOpenEnvToolEnv]:
    """What ``GRPOTrainer(environment_factory=...)`` takes, over a ``hopgym serve-env`` server.

    The server must play ``protocol="tools"`` (``hopgym serve-env --env ... --protocol tools``;
    its reward preset is the episodes' reward). Each rollout's object resets the server's env on
    the dataset row's ``question_id`` (:func:`question_dataset`), in a new session, and its tools,
    reward and episode end are :class:`HopgymToolEnv`'s.

    Args:
        base_url: the server's URL (``http://host:port``).
        **client_kwargs: OpenEnv ``EnvClient`` arguments (``message_timeout_s``, ...).
    """

    def make() -> HopgymOpenEnvToolEnv:
        return HopgymOpenEnvToolEnv(_OpenEnvSession(base_url, **client_kwargs))  # type: ignore[arg-type]

    make.__name__ = f"openenv_environment_factory({base_url!r})"
    return make


def use_tool_chat_template(tokenizer: Any) -> Any:
    """Give ``tokenizer`` a tool-calling chat template if its own renders no tool calls.

    The template is TRL's Qwen2.5 one (ChatML turns, the tools listed in the system message,
    calls written as ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``): TRL recognises
    it, so it parses the model's calls and swaps in its prefix-preserving training variant. A
    template that already renders tool calls (TRL's ``supports_tool_calling``) is kept. Returns
    ``tokenizer`` (changed in place).

    Raises:
        hopgym.errors.InvalidOptionError: the template renders no tools and the vocabulary lacks
            ChatML's ``<|im_start|>``/``<|im_end|>`` tokens, which the Qwen2.5 template writes.
    """
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    if supports_tool_calling(tokenizer):
        return tokenizer
    vocab = tokenizer.get_vocab()
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in vocab]
    if missing:
        raise InvalidOptionError(
            f"the tokenizer's chat template renders no tool calls and its vocabulary lacks {missing}: "
            "use_tool_chat_template writes ChatML turns (SmolLM2, Qwen); give it a tool-capable "
            "chat_template of its own instead"
        )
    tokenizer.chat_template = qwen2_5_chat_template
    return tokenizer


def use_hopgym_tool_parser(tokenizer: Any, env_id: str, **env_kwargs: Any) -> Any:
    """Make TRL read the model's tool calls with hopgym's tools protocol (tagged or bare JSON).

    TRL parses each completion with ``tokenizer.parse_response``; this replaces it, on this
    tokenizer object only, by hopgym's reader of a ``protocol="tools"`` turn
    (:meth:`hopgym.turns.ToolProtocol.read`, the env's own), so the calls the env would read are
    the calls TRL runs: ``<tool_call>`` blocks, bare JSON objects (``{"name": ..., "arguments":
    ...}``) and the other forms the env accepts. Calls whose arguments are not a JSON object are
    left out (TRL calls a tool with keyword arguments). Returns ``tokenizer``.

    Args:
        tokenizer: the policy's tokenizer (after :func:`use_tool_chat_template`, if used).
        env_id: the env's id, and ``env_kwargs`` its options: the sources a ``search`` may name.

    Example:
        >>> from types import SimpleNamespace
        >>> tok = SimpleNamespace(decode=lambda ids, skip_special_tokens: ids, eos_token="<|im_end|>")
        >>> tok = use_hopgym_tool_parser(tok, "hopgym/Tiny-v1")
        >>> tok.parse_response('{"name": "answer", "arguments": {"answer": "1962"}}<|im_end|>')["tool_calls"]
        [{'type': 'function', 'function': {'name': 'answer', 'arguments': {'answer': '1962'}}}]
    """
    probe = gym.make(env_id, **{**env_kwargs, "protocol": "tools"})
    sources = tuple(getattr(probe.unwrapped, "source_names", ()))
    probe.close()
    protocol = probe.unwrapped.protocol  # type: ignore[attr-defined]  # the env's reader, its parse mode too

    def parse_response(ids: Any, prefix: Any = None, tools: Any = None) -> dict[str, Any]:
        text = ids if isinstance(ids, str) else tokenizer.decode(ids, skip_special_tokens=False)
        if tokenizer.eos_token:
            text = text.replace(tokenizer.eos_token, "")
        turn = protocol.read(text, sources)
        calls = [
            {"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.calls
            if c.name and isinstance(c.arguments, dict)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": turn.content}
        if calls:
            message["tool_calls"] = calls
        return message

    tokenizer.parse_response = parse_response
    return tokenizer
