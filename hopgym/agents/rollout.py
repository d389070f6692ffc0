"""Token-in/token-out multi-turn rollouts with loss masks: :class:`RolloutCollector`.

Classes: :class:`RolloutConfig`, :class:`Trajectory`, :class:`RolloutCollector`,
:class:`TurnEngine` (the protocol of an external sampler), :class:`TRLVLLMEngine` (TRL's vLLM
integration as one). Functions: :func:`encode_prompt`, :func:`stop_token_ids`, :func:`summarize`,
:func:`sequence_logprobs`, :func:`policy_stats`.

A trajectory is one episode in the env (with its reward wrappers), laid out as one token stream
in Search-R1's way: the chat-templated first observation is the *prompt*; the *completion* is the
model's turns with the environment's observations (retrieved documents, notices, corrective
messages) spliced in between them. The collector samples with its own batched loop over a Hugging
Face causal LM, so that it knows the log-probability of every sampled token, and it appends the
sampled ids exactly as they came out of the model: what the model produced is never decoded and
re-tokenised (the decoded text is only what the env reads). Only the env's text is tokenised.
With an ``engine`` (for example :class:`TRLVLLMEngine`, TRL's vLLM integration in server or
colocate mode) the turns come from that engine instead, and the token ids and log-probs it returns
go into the trajectory as they are.

``mask[i]`` is 1 on model tokens and 0 on environment tokens; ``logprobs[i]`` is the sampling
log-probability (``log_softmax(logits / temperature)``) on model tokens and 0.0 elsewhere. These
are exactly TRL's ``completion_ids``, ``logprobs`` and ``env_mask``.

A model turn ends at the first of: a protocol stop string that is a single token (``</search>``
with a word-level vocabulary), the EOS token, a multi-token stop string found in the decoded turn,
or ``max_new_tokens``. After the episode ends, an EOS token is appended as an environment token
(mask 0), so TRL sees a finished sequence.

Example:
    >>> cfg = RolloutConfig(temperature=0.7, max_new_tokens=48)
    >>> cfg.greedy
    False
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from hopgym.backends.transformers_backend import _cache_kwarg, _full_attention_only, _logits_kwargs
from hopgym.errors import DependencyNotInstalled, InvalidOptionError
from hopgym.rewards.scoring import exact_match, token_f1

_log = logging.getLogger(__name__)

__all__ = [
    "RolloutConfig",
    "Trajectory",
    "RolloutCollector",
    "TurnEngine",
    "TRLVLLMEngine",
    "encode_prompt",
    "stop_token_ids",
    "summarize",
    "sequence_logprobs",
    "policy_stats",
    "frozen_copy",
]


@dataclass
class RolloutConfig:
    """How the collector samples.

    Attributes are per model turn unless said otherwise.
    """

    temperature: float = field(
        default=1.0, metadata={"help": "Sampling temperature; 0 means greedy decoding."}
    )
    top_k: int = field(default=0, metadata={"help": "Keep the k most likely tokens (0: all)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1.0: all)."})
    max_new_tokens: int = field(default=64, metadata={"help": "Longest model turn in tokens."})
    max_completion_tokens: int = field(
        default=1024,
        metadata={"help": "Longest completion (model turns + observations); the episode is cut there."},
    )
    batch_size: int = field(
        default=64,
        metadata={"help": "Trajectories sampled in one batch (more are run in successive batches)."},
    )
    chat_template: bool = field(
        default=True,
        metadata={"help": "Wrap the first observation in the tokenizer's chat template (if it has one)."},
    )
    keep_cache: bool = field(
        default=True,
        metadata={
            "help": "Keep each episode's KV cache from one model turn to the next, so that a turn "
            "prefills only the tokens added since the last one (the env's observation); False "
            "prefills the whole context every turn. Models whose cache is not plain full "
            "attention (sliding windows, linear attention) always prefill the whole context."
        },
    )
    on_token_mismatch: str = field(
        default="warn",
        metadata={
            "help": "protocol='tools': when the ids built turn by turn differ from the chat "
            "template's rendering of the whole episode, 'warn' (log it, count it in "
            "token_mismatch_rate, keep the trajectory) or 'raise' (TokenMismatchError)."
        },
    )
    env_workers: int = field(
        default=0,
        metadata={
            "help": "0: the envs run in this process; W >= 1: in W Ray workers (hopgym[ray]). "
            "Either way the searches of a turn are answered in batches."
        },
    )

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise InvalidOptionError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidOptionError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidOptionError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise InvalidOptionError("max_new_tokens and batch_size must be >= 1")
        if (
            isinstance(self.env_workers, bool)
            or not isinstance(self.env_workers, int)
            or self.env_workers < 0
        ):
            raise InvalidOptionError(
                f"env_workers must be an int >= 0 (0: envs in this process), got {self.env_workers!r}"
            )
        if self.on_token_mismatch not in ("warn", "raise"):
            raise InvalidOptionError(
                f"on_token_mismatch must be 'warn' or 'raise', got {self.on_token_mismatch!r}"
            )
        if self.max_completion_tokens < self.max_new_tokens:
            raise InvalidOptionError(
                f"max_completion_tokens ({self.max_completion_tokens}) must be >= "
                f"max_new_tokens ({self.max_new_tokens}): raise it or lower the other"
            )

    @property
    def greedy(self) -> bool:
        """Whether decoding is greedy (``temperature == 0``)."""
        return self.temperature == 0


@dataclass
class Trajectory:
    """One episode as tokens, with its outcome.

    Attributes:
        question_id: the env's question.
        prompt_ids: the chat-templated first observation.
        completion_ids: model turns and observations, in order.
        logprobs: per completion token; the sampling log-prob on model tokens, 0.0 on env tokens.
        mask: per completion token; 1 = model token, 0 = environment token.
        spans: ``(kind, start, end)`` of each segment of ``completion_ids``, kind ``"model"``
            or ``"env"``.
        turns: the model turns as the env read them (decoded text).
        observations: the env's observations after each turn (raw text, before tokenisation).
        reward: the episode return (sum of the env's rewards).
        reward_terms: per-term sums of ``info["reward_terms"]``.
        answer: the final answer, or ``None``.
        em, f1: against the gold answers.
        searches, invalid, steps: counts over the episode.
        terminated, truncated: how it ended (``truncated`` also when the token budget ran out).
        token_mismatch: ``protocol="tools"`` only: ``None``, or where the ids built turn by turn
            differ from the chat template's rendering of the whole episode (see
            :class:`~hopgym.agents.chat_tokens.ChatTokens`).
        right_source_searches: in an env with more than one source, the searches made on the
            source the oracle would search next: that of the first hop of the gold decomposition
            whose document the episode has not seen yet (a search after every one was seen
            counts as not right); ``None`` with one source or no gold decomposition.
    """

    question_id: str
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    spans: list[tuple[str, int, int]] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    reward: float = 0.0
    reward_terms: dict[str, float] = field(default_factory=dict)
    answer: str | None = None
    em: float = 0.0
    f1: float = 0.0
    searches: int = 0
    invalid: int = 0
    steps: int = 0
    terminated: bool = False
    truncated: bool = False
    token_mismatch: str | None = None
    right_source_searches: int | None = None

    def _append(self, kind: str, ids: Sequence[int], logps: Sequence[float] | None) -> None:
        if not ids:  # an observation cut to nothing by the token budget: no span
            return
        start = len(self.completion_ids)
        self.completion_ids.extend(int(i) for i in ids)
        if kind == "model":
            assert logps is not None and len(logps) == len(ids)
            self.logprobs.extend(float(x) for x in logps)
            self.mask.extend([1] * len(ids))
        else:
            self.logprobs.extend([0.0] * len(ids))
            self.mask.extend([0] * len(ids))
        self.spans.append((kind, start, len(self.completion_ids)))


def encode_prompt(tokenizer: Any, text: str, chat_template: bool = True) -> list[int]:
    """Token ids of the first observation, in the chat template when the tokenizer has one."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        out = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if not isinstance(out, list):  # transformers 5 returns a BatchEncoding
            out = out["input_ids"]
        return [int(i) for i in out]
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=True)]


def stop_token_ids(tokenizer: Any, stop: Sequence[str]) -> tuple[set[int], tuple[str, ...]]:
    """Split stop strings into single-token ids and strings that need a text check. EOS is added."""
    ids: set[int] = set()
    strings: list[str] = []
    for s in stop:
        enc = tokenizer.encode(s, add_special_tokens=False)
        if len(enc) == 1 and tokenizer.decode(enc) == s:
            ids.add(int(enc[0]))
        else:
            strings.append(s)
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids, tuple(strings)


class TurnEngine(Protocol):
    """An external sampler of model turns (instead of the collector's own loop).

    ``sample(contexts, budgets)`` gets one token-id context per episode in flight (prompt and
    completion so far) and the most tokens each turn may have, and returns, per context, the
    sampled token ids and the log-probability of each (under the sampling distribution, after
    temperature). The engine is configured to stop at the protocol's stop tokens and strings.
    """

    def sample(
        self, contexts: list[list[int]], budgets: list[int]
    ) -> tuple[list[list[int]], list[list[float]]]: ...


class TRLVLLMEngine:
    """TRL's vLLM integration (``GRPOTrainer.vllm_generation``) as a :class:`TurnEngine`.

    Each turn is one call to ``VLLMGeneration.generate(prompt_ids, None, 1)`` with the contexts
    as token ids, in either of TRL's modes: ``server`` (``VLLMClient`` talks to ``trl vllm-serve``
    / ``vllm serve``) or ``colocate`` (a ``vllm.LLM`` in the training process). TRL syncs the
    weights into the engine before each ``rollout_func`` call. The turn length, stop tokens and
    stop strings travel in ``GRPOConfig.generation_kwargs`` (see
    :func:`hopgym.agents.grpo.train_grpo`), which TRL merges into the sampling parameters in both
    modes. The returned ids are cut to each row's budget (a row near the end of its token budget
    may have less room than ``max_tokens``); nothing is decoded and re-tokenised.

    Args:
        generation: the trainer's ``vllm_generation`` (a ``trl.generation.VLLMGeneration``).
    """

    def __init__(self, generation: Any) -> None:
        self.generation = generation
        self.calls = 0

    def sample(
        self, contexts: list[list[int]], budgets: list[int]
    ) -> tuple[list[list[int]], list[list[float]]]:
        rows = [i for i, b in enumerate(budgets) if b > 0]
        ids: list[list[int]] = [[] for _ in contexts]
        logps: list[list[float]] = [[] for _ in contexts]
        if not rows:
            return ids, logps
        _, comp, lps, _ = self.generation.generate([list(contexts[i]) for i in rows], None, 1)
        self.calls += 1
        if lps is None:
            raise InvalidOptionError(
                "the vLLM engine returned no log-probs: TRL's VLLMGeneration must "
                "be built with logprobs=0 (GRPOTrainer does this)"
            )
        for i, c, lp in zip(rows, comp, lps, strict=True):
            n = min(len(c), budgets[i])
            ids[i] = [int(t) for t in c[:n]]
            # logprobs=0: one entry per position, the sampled token's log-prob first.
            logps[i] = [float(x[0] if isinstance(x, (list, tuple)) else x) for x in lp[:n]]
        return ids, logps


class _Episode:
    """Bookkeeping for one trajectory in flight, in sub-env ``index`` of the collector's vector
    env."""

    def __init__(
        self, index: int, golds: Sequence[str], traj: Trajectory, hops: Sequence[Any] | None = None
    ) -> None:
        self.index = index
        self.golds = list(golds)
        self.traj = traj
        self.done = False
        self.terms: dict[str, float] = defaultdict(float)
        #: ``protocol="tools"``: the episode as a chat, built turn by turn (ChatTokens).
        self.chat: Any = None
        #: With several sources: ``(doc_id, source)`` of each gold hop, and the documents seen.
        self.hops = [(h.doc_id, h.source) for h in hops or () if h.doc_id]
        self.seen: set[str] = set()
        if self.hops:
            traj.right_source_searches = 0

    def searched(self, info: Any) -> None:
        """Count a search's source against the first gold hop not seen yet, then note what it showed."""
        if self.hops:
            want = next((hop for hop in self.hops if hop[0] not in self.seen), None)
            right = want is not None and want[1] in (None, info.get("source"))
            self.traj.right_source_searches = (self.traj.right_source_searches or 0) + right
        self.seen.update(info.get("new_ids") or ())


class _TurnCache:
    """The KV states of a batch's episodes between their model turns (``RolloutConfig.keep_cache``).

    Row ``r`` of :attr:`cache` holds the KV states of :attr:`ids` ``[r]``, a prefix of episode
    :attr:`keys` ``[r]``'s context (prompt and completion so far): every token but the last one
    the model sampled, which was never fed. Its states sit at the positions where :attr:`mask`
    ``[r]`` is 1; the other positions are padding (between one turn's new tokens and the earlier
    ones, and after a row stopped while others were still sampling).
    """

    def __init__(self) -> None:
        self.cache: Any = None
        self.mask: Any = None
        self.keys: list[int] = []
        self.ids: list[list[int]] = []

    def take(self, keys: Sequence[int], contexts: Sequence[list[int]]) -> tuple[Any, Any, list[int]]:
        """``(cache, mask, held)`` for the episodes ``keys`` in this order: their rows, with each
        row's states moved to the right end (padding on the left only), and how many tokens of
        each context are held. A context that does not continue its held ids gets none held."""
        if self.cache is None:
            return None, None, [0] * len(keys)
        torch = _torch()
        where = {k: r for r, k in enumerate(self.keys)}
        rows, held = [], []
        for key, ctx in zip(keys, contexts, strict=True):
            r = where.get(key)
            ok = r is not None and len(self.ids[r]) < len(ctx) and ctx[: len(self.ids[r])] == self.ids[r]
            rows.append(0 if r is None else r)
            held.append(len(self.ids[r]) if ok and r is not None else 0)
        device = self.mask.device
        index_rows = torch.tensor(rows, dtype=torch.long, device=device)
        mask = self.mask.index_select(0, index_rows)
        mask[torch.tensor([h == 0 for h in held], device=device)] = 0
        width = max(held)
        if width == 0:
            return None, None, held
        # A stable sort of the 0/1 mask lists each row's padding first and its states after, in
        # order; the last ``width`` of those positions are the row's states, right-aligned.
        index = torch.sort(mask, dim=1, stable=True).indices[:, mask.shape[1] - width :]
        for layer in self.cache.layers:
            gather = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
            layer.keys = layer.keys.index_select(0, index_rows).gather(2, gather)
            layer.values = layer.values.index_select(0, index_rows).gather(2, gather)
        return self.cache, mask.gather(1, index), held

    def store(self, keys: Sequence[int], cache: Any, mask: Any, ids: list[list[int]]) -> None:
        self.keys, self.cache, self.mask, self.ids = list(keys), cache, mask, ids


class RolloutCollector:
    """Runs G episodes per question through an env with a causal LM and returns token trajectories.

    Args:
        model: a Hugging Face causal LM (``model(input_ids, attention_mask, position_ids,
            past_key_values, use_cache=True)``).
        tokenizer: its tokenizer (``pad_token_id`` and ``eos_token_id`` must be set).
        env_fn: builds one env (with its reward wrappers); the collector keeps a vector env of
            them, one per trajectory in flight (:class:`~hopgym.envs.vector.BatchedSearchVectorEnv`,
            or :class:`~hopgym.envs.ray_vector.RayVectorEnv` with ``config.env_workers``), whose
            sub-envs' searches of a turn are answered in batches.
        config: sampling settings.
        engine: an external sampler of turns (:class:`TurnEngine`, e.g. vLLM through
            :class:`TRLVLLMEngine`); ``None`` samples with ``model`` itself. The engine's own
            sampling settings apply then (``config`` still sets the token budgets).

    The model's own text is never re-tokenised: each model turn's sampled ids go into the
    trajectory as they are; only observations are tokenised. Each episode's KV cache is kept from
    one turn to the next (``config.keep_cache``), so a turn prefills only its new tokens.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        env_fn: Callable[[], gym.Env],
        config: RolloutConfig | None = None,
        engine: TurnEngine | None = None,
    ) -> None:
        if tokenizer.pad_token_id is None:
            raise InvalidOptionError("the tokenizer has no pad token: set tokenizer.pad_token first")
        self.engine = engine
        self.model = model
        self.tokenizer = tokenizer
        self.env_fn = env_fn
        self.config = config or RolloutConfig()
        self._vector: Any = None
        self._stop_cache: dict[tuple[str, ...], tuple[set[int], tuple[str, ...]]] = {}
        #: Trajectories whose ids differ from the chat template's rendering (``protocol="tools"``).
        self.token_mismatches = 0

    # ------------------------------------------------------------------ public
    def collect(
        self, question_ids: Sequence[str], group_size: int = 1, seed: int | None = None
    ) -> list[Trajectory]:
        """``group_size`` trajectories for each question id, grouped consecutively.

        Args:
            question_ids: ids of the env's task (``env.reset(options={"question_id": id})``).
            group_size: G, trajectories per question.
            seed: seeds the sampling generator (and the envs' ``reset``) for reproducible runs.
        """
        if group_size < 1:
            raise InvalidOptionError(f"group_size must be >= 1, got {group_size}")
        torch = _torch()
        rows = [q for q in question_ids for _ in range(group_size)]
        # The generator lives where the logits do (a CPU generator cannot sample CUDA tensors).
        device = "cpu" if self.engine is not None else next(self.model.parameters()).device
        gen = torch.Generator(device=device)
        gen.manual_seed(int(seed) if seed is not None else int(torch.randint(0, 2**31 - 1, ())))
        out: list[Trajectory] = []
        bs = self.config.batch_size
        for start in range(0, len(rows), bs):
            out.extend(self._collect_batch(rows[start : start + bs], gen, seed, start))
        return out

    def close(self) -> None:
        """Close the envs (and stop their Ray workers)."""
        if self._vector is not None:
            self._vector.close()
            self._vector = None

    # ------------------------------------------------------------------ internals
    def _envs(self, n: int) -> Any:
        """The vector env (``autoreset_mode=DISABLED``), with at least ``n`` sub-envs."""
        if self._vector is None or self._vector.num_envs < n:
            from gymnasium.vector import AutoresetMode

            from hopgym.envs.vector import BatchedSearchVectorEnv

            self.close()
            fns, mode = [self.env_fn] * n, AutoresetMode.DISABLED
            if self.config.env_workers:
                from hopgym.envs.ray_vector import RayVectorEnv

                self._vector = RayVectorEnv(fns, workers=min(self.config.env_workers, n), autoreset_mode=mode)
            else:
                self._vector = BatchedSearchVectorEnv(fns, autoreset_mode=mode)
        return self._vector

    def _stops(self) -> tuple[set[int], tuple[str, ...]]:
        stop = tuple(getattr(self._vector.get_attr("protocol")[0], "stop", ()))
        if stop not in self._stop_cache:
            self._stop_cache[stop] = stop_token_ids(self.tokenizer, stop)
        return self._stop_cache[stop]

    def _collect_batch(
        self, rows: Sequence[str], gen: Any, seed: int | None, offset: int
    ) -> list[Trajectory]:
        venv = self._envs(len(rows))
        n = venv.num_envs
        seeds = [None if seed is None or i >= len(rows) else seed + offset + i for i in range(n)]
        obs, _ = venv.reset(seed=seeds, options=[{"question_id": q} for q in rows] + [None] * (n - len(rows)))
        samples = venv.get_attr("sample")
        several_sources = len(venv.get_attr("source_names")[0]) > 1
        tools = getattr(venv.get_attr("protocol")[0], "chat_tools", False)
        specs: Any = venv.get_attr("tool_specs") if tools else None
        episodes: list[_Episode] = []
        for i, qid in enumerate(rows):
            chat = None
            if tools:
                from hopgym.agents.chat_tokens import ChatTokens

                chat = ChatTokens(self.tokenizer, specs[i], obs[i])
                prompt = list(chat.ids)
            else:
                prompt = encode_prompt(self.tokenizer, obs[i], self.config.chat_template)
            hops = samples[i].decomposition if several_sources else None
            ep = _Episode(i, samples[i].answers, Trajectory(question_id=str(qid), prompt_ids=prompt), hops)
            ep.chat = chat
            episodes.append(ep)
        keep = self.config.keep_cache and self.engine is None and _full_attention_only(self.model)
        turn_cache = _TurnCache() if keep else None
        while True:
            active = [e for e in episodes if not e.done]
            if not active:
                break
            self._model_turn(active, gen, turn_cache)
        return [e.traj for e in episodes]

    def _model_turn(self, active: list[_Episode], gen: Any, turn_cache: _TurnCache | None = None) -> None:
        cfg = self.config
        # One token of the completion budget stays free for the closing eos.
        budgets = [
            max(1, min(cfg.max_new_tokens, cfg.max_completion_tokens - len(e.traj.completion_ids) - 1))
            for e in active
        ]
        stop_ids, stop_strings = self._stops()
        contexts = [e.traj.prompt_ids + e.traj.completion_ids for e in active]
        if self.engine is not None:
            ids, logps = self.engine.sample(contexts, budgets)
            ids, logps = _cut_at_stops(ids, logps, stop_ids)
        else:
            keys = [e.index for e in active]
            ids, logps = self._sample(contexts, budgets, stop_ids, stop_strings, gen, turn_cache, keys)
        texts = []
        for ep, turn_ids, turn_logps in zip(active, ids, logps, strict=True):
            ep.traj._append("model", turn_ids, turn_logps)
            text = self.tokenizer.decode(turn_ids, skip_special_tokens=True)
            if ep.chat is not None:
                ep.chat.model_turn(text, turn_ids)
            for s in stop_strings:
                # A stop string that opens the env's next segment (r3's "\nThe retrieval
                # documents:") is not part of the action; one that closes it (</search>) is.
                if s[:1].isspace() and text.endswith(s):
                    text = text[: -len(s)]
            texts.append(text)
        # One step of every episode in flight: their searches are answered in batches.
        results = self._vector.step_subset([ep.index for ep in active], texts)
        for ep, text, result in zip(active, texts, results, strict=True):
            self._env_step(ep, text, result)

    def _env_step(self, ep: _Episode, text: str, result: tuple[Any, ...]) -> None:
        traj = ep.traj
        obs, reward, terminated, truncated, info = result
        traj.turns.append(text)
        traj.observations.append(obs)
        traj.steps += 1
        traj.reward += float(reward)
        for name, value in (info.get("reward_terms") or {}).items():
            ep.terms[name] += float(value)
        kind = info.get("action_type")
        # A tool-call turn may search several times: each call's info is in info["calls"].
        for call in info.get("calls") or (info,):
            if call.get("action_type") == "search":
                traj.searches += 1
                ep.searched(call)
        traj.invalid += kind == "invalid"
        if info.get("answer") is not None:
            traj.answer = info["answer"]
        out_of_tokens = False
        room = self.config.max_completion_tokens - len(traj.completion_ids)
        if ep.chat is not None and not (terminated or truncated):
            # The template's text between this turn and the next one's header (tool results).
            obs_ids = ep.chat.env_turn(info.get("tool_messages") or [], budget=max(room - 1, 0))
            out_of_tokens = ep.chat.limit is not None
            traj._append("env", obs_ids, None)
        elif obs and not (terminated or truncated):
            obs_ids = self.tokenizer.encode(obs, add_special_tokens=False)
            if len(obs_ids) > room - 1:
                obs_ids, out_of_tokens = obs_ids[: max(room - 1, 0)], True
            traj._append("env", obs_ids, None)
        elif not (terminated or truncated) and (
            self.config.max_completion_tokens - len(traj.completion_ids) < 2
        ):
            out_of_tokens = True
        if terminated or truncated or out_of_tokens:
            ep.done = True
            traj.terminated, traj.truncated = bool(terminated), bool(truncated or out_of_tokens)
            eos = self.tokenizer.eos_token_id
            if (
                eos is not None
                and (not traj.completion_ids or traj.completion_ids[-1] != eos)
                and len(traj.completion_ids) < self.config.max_completion_tokens
            ):
                traj._append("env", [eos], None)
                if ep.chat is not None:
                    ep.chat.end([eos])
            traj.reward_terms = dict(ep.terms)
            if ep.chat is not None:
                self._check_tokens(ep)
            if traj.answer is not None:
                traj.em = exact_match(traj.answer, ep.golds)
                traj.f1 = token_f1(traj.answer, ep.golds)

    def _check_tokens(self, ep: _Episode) -> None:
        """Compare the trajectory with the chat template's rendering of the whole episode."""
        from hopgym.agents.chat_tokens import TokenMismatchError

        mismatch = ep.chat.check()
        if mismatch is None:
            return
        ep.traj.token_mismatch = mismatch
        self.token_mismatches += 1
        if self.config.on_token_mismatch == "raise":
            raise TokenMismatchError(f"question {ep.traj.question_id}: {mismatch}")
        _log.warning("rollout of question %s: %s", ep.traj.question_id, mismatch)

    def _sample(
        self,
        contexts: list[list[int]],
        budgets: list[int],
        stop_ids: set[int],
        stop_strings: tuple[str, ...],
        gen: Any,
        turn_cache: _TurnCache | None = None,
        keys: Sequence[int] | None = None,
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Batched sampling of one turn per context, with a KV cache; returns ids and log-probs.

        With ``turn_cache`` (and ``keys``, the episodes of the contexts), each context's held KV
        states are reused, only the tokens after them are prefilled, and the states after this
        turn are held for the next one.
        """
        torch = _torch()
        model = self.model
        device = next(model.parameters()).device
        pad = self.tokenizer.pad_token_id
        n = len(contexts)
        past, attn, held = None, None, [0] * n
        if turn_cache is not None:
            assert keys is not None
            past, attn, held = turn_cache.take(keys, contexts)
        new = [c[h:] for c, h in zip(contexts, held, strict=True)]
        width = max(len(c) for c in new)
        input_ids = torch.full((n, width), pad, dtype=torch.long)
        new_attn = torch.zeros((n, width), dtype=torch.long)
        for i, c in enumerate(new):
            # Left padding, so that the new tokens line up on the right; with held states, the
            # padding sits between them and the new tokens and is masked out.
            input_ids[i, width - len(c) :] = torch.tensor(c, dtype=torch.long)
            new_attn[i, width - len(c) :] = 1
        input_ids, new_attn = input_ids.to(device), new_attn.to(device)
        attn = new_attn if attn is None else torch.cat([attn, new_attn], dim=1)
        # Positions count the real tokens before each one, so they run on across the padding.
        pos = (attn.cumsum(-1) - 1).clamp(min=0)[:, -width:]
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        finished = [b <= 0 for b in budgets]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                from transformers import DynamicCache

                cache_kw = _cache_kwarg(model)
                # Room for this turn's tokens after the held states: a decode step writes one
                # position instead of copying the cache (full-attention models only).
                room = max(budgets) + 1
                if past is not None:  # held states: the cache _roomy_cache made at an earlier turn
                    past.room = room

                def new_cache() -> Any:
                    return _roomy_cache(model.config, room) if turn_cache is not None else DynamicCache()

                # Rows with the same context and as many held states (a group's episodes at
                # their first turn: one prompt; later, episodes whose turns so far were the same)
                # are prefilled once, and their states copied.
                first: dict[tuple[int, ...], int] = {}
                src = [
                    first.setdefault((h, *c), i) for i, (c, h) in enumerate(zip(contexts, held, strict=True))
                ]
                share = turn_cache is not None and len(first) < n
                rows = torch.tensor(sorted(first.values()), device=device) if share else None
                if rows is not None and past is not None:
                    for layer in past.layers:
                        layer.keys = layer.keys.index_select(0, rows)
                        layer.values = layer.values.index_select(0, rows)
                sub_ids = input_ids if rows is None else input_ids[rows]
                sub_attn = attn if rows is None else attn[rows]
                sub_pos = pos if rows is None else pos[rows]
                lengths = (new_attn if rows is None else new_attn[rows]).sum(dim=1).tolist()
                buckets = _prefill_buckets(lengths) if turn_cache is not None else [list(range(len(lengths)))]
                if len(buckets) == 1:
                    res = model(
                        input_ids=sub_ids,
                        attention_mask=sub_attn,
                        position_ids=sub_pos,
                        use_cache=True,
                        **{cache_kw: past if past is not None else new_cache()},
                        **_logits_kwargs(model),  # the last position only: the rest is never sampled
                    )
                    logits = res.logits[:, -1, :].float()
                    cache = _output_cache(res)
                else:
                    logits, cache = self._prefill_in_buckets(
                        buckets, lengths, sub_ids, sub_attn, sub_pos, past, new_cache, cache_kw
                    )
                if rows is not None:
                    where = {r: k for k, r in enumerate(rows.tolist())}
                    expand = torch.tensor([where[r] for r in src], device=device)
                    logits = logits.index_select(0, expand)
                    for layer in cache.layers:
                        layer.keys = layer.keys.index_select(0, expand)
                        layer.values = layer.values.index_select(0, expand)
                last_pos = pos[:, -1]
                while not all(finished):
                    tok, lp = self._pick(logits, gen)
                    tok_l, lp_l = tok.tolist(), lp.tolist()
                    for i in range(n):
                        if finished[i]:
                            continue
                        out_ids[i].append(tok_l[i])
                        out_lp[i].append(lp_l[i])
                        if tok_l[i] in stop_ids or len(out_ids[i]) >= budgets[i]:
                            finished[i] = True
                        elif stop_strings:
                            text = self.tokenizer.decode(out_ids[i][-16:])
                            if any(text.endswith(s) for s in stop_strings):
                                finished[i] = True
                    if all(finished):
                        break
                    feed = torch.tensor(
                        [t if not f else pad for t, f in zip(tok_l, finished, strict=True)], device=device
                    )
                    if turn_cache is None:
                        column = torch.ones((n, 1), dtype=attn.dtype, device=device)
                    else:  # a stopped row's padding is kept out of its held states
                        column = torch.tensor(
                            [[int(not f)] for f in finished], dtype=attn.dtype, device=device
                        )
                    attn = torch.cat([attn, column], dim=1)
                    last_pos = last_pos + 1
                    res = model(
                        input_ids=feed[:, None],
                        attention_mask=attn,
                        position_ids=last_pos[:, None],
                        use_cache=True,
                        **{cache_kw: cache},
                    )
                    logits = res.logits[:, -1, :].float()
                    cache = _output_cache(res)
        finally:
            model.train(was_training)
        if turn_cache is not None:
            assert keys is not None
            # Every sampled token but the last one was fed: the last one starts the next prefill.
            held_ids = [c + o[:-1] for c, o in zip(contexts, out_ids, strict=True)]
            turn_cache.store(keys, cache, attn, held_ids)
        return out_ids, out_lp

    def _prefill_in_buckets(
        self,
        buckets: list[list[int]],
        lengths: list[int],
        input_ids: Any,
        attn: Any,
        pos: Any,
        past: Any,
        new_cache: Callable[[], Any],
        cache_kw: str,
    ) -> tuple[Any, Any]:
        """One turn's prefill, each bucket of rows (:func:`_prefill_buckets`) as its own pass at
        its own width; returns the last position's logits and one cache of all rows, laid out as
        a single pass would leave it (held states, then padding, then the new tokens on the right;
        the padding's states are zeros, masked out as a single pass's are), in the buffers a
        :func:`_roomy_cache` decodes into (``past``'s, or a new cache's, ``room``)."""
        torch = _torch()
        n, width = input_ids.shape
        held = attn.shape[1] - width
        out = past if past is not None else new_cache()
        room = max(0, int(getattr(out, "room", 0)))
        bufs: list[tuple[Any, Any]] = []

        def buffers(keys: Any, values: Any) -> tuple[Any, Any]:
            shape = (n, keys.shape[1], held + width + room, keys.shape[-1])
            return keys.new_zeros(shape), values.new_zeros(shape)

        if past is not None:
            # The held states move into the buffers first, layer by layer, so that they are held
            # once (a pass reads its rows' states from there).
            for layer in past.layers:
                bk, bv = buffers(layer.keys, layer.values)
                bk[:, :, :held], bv[:, :, :held] = layer.keys, layer.values
                layer.keys, layer.values = bk[..., :held, :], bv[..., :held, :]
                if hasattr(layer, "buffers"):
                    layer.buffers = None  # the last turn's: the held states were gathered out of them
                bufs.append((bk, bv))
        logits: Any = None
        for bucket in buckets:
            w = max(lengths[i] for i in bucket)
            idx = torch.tensor(list(bucket), device=input_ids.device)
            mask = attn.index_select(0, idx)
            cache = new_cache()
            cache.room = 0
            for (bk, bv), dst in zip(bufs, cache.layers, strict=False):
                dst.lazy_initialization(bk, bv)
                dst.keys, dst.values = bk[idx, :, :held], bv[idx, :, :held]
            res = self.model(
                input_ids=input_ids.index_select(0, idx)[:, width - w :],
                attention_mask=torch.cat([mask[:, :held], mask[:, held + width - w :]], dim=1),
                position_ids=pos.index_select(0, idx)[:, width - w :],
                use_cache=True,
                **{cache_kw: cache},
                **_logits_kwargs(self.model),
            )
            last = res.logits[:, -1, :].float()
            if logits is None:
                logits = last.new_empty((n, last.shape[-1]))
            logits[idx] = last
            for k, layer in enumerate(_output_cache(res).layers):
                if len(bufs) <= k:  # the first turn: no held states
                    bufs.append(buffers(layer.keys, layer.values))
                for dst, src in zip(bufs[k], (layer.keys, layer.values), strict=True):
                    dst[idx, :, held + width - w : held + width] = src[:, :, held:]
            del res, cache  # this pass's states are in the buffers now
        for layer, (keys, values) in zip(out.layers, bufs, strict=True):
            if not layer.is_initialized:
                layer.lazy_initialization(keys, values)
            if hasattr(layer, "buffers"):
                layer.buffers = (keys, values)  # decoding writes its tokens into the room after
            layer.keys, layer.values = keys[..., : held + width, :], values[..., : held + width, :]
        return logits, out

    def _pick(self, logits: Any, gen: Any) -> tuple[Any, Any]:
        torch = _torch()
        cfg = self.config
        if cfg.greedy:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logits.argmax(dim=-1)
            return tok, logp.gather(-1, tok[:, None])[:, 0]
        scaled = logits / cfg.temperature
        if cfg.top_k:
            kth = torch.topk(scaled, min(cfg.top_k, scaled.size(-1)), dim=-1).values[:, -1:]
            scaled = scaled.masked_fill(scaled < kth, -math.inf)
        if cfg.top_p < 1.0:
            sorted_l, idx = torch.sort(scaled, descending=True, dim=-1)
            cum = torch.softmax(sorted_l, dim=-1).cumsum(-1)
            drop = cum - torch.softmax(sorted_l, dim=-1) > cfg.top_p
            sorted_l = sorted_l.masked_fill(drop, -math.inf)
            scaled = torch.full_like(scaled, -math.inf).scatter(-1, idx, sorted_l)
        logp = torch.log_softmax(scaled, dim=-1)
        tok = torch.multinomial(logp.exp(), 1, generator=gen)[:, 0]
        return tok, logp.gather(-1, tok[:, None])[:, 0]


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Means over trajectories: reward, each reward term, EM, F1, searches, invalid rate, length;
    with several sources also ``right_source_rate``, the share of the searches made on the source
    the oracle would search next (:attr:`Trajectory.right_source_searches`).

    Example:
        >>> t = Trajectory("q", [1], reward=1.0, reward_terms={"em": 1.0}, em=1.0, f1=1.0,
        ...                searches=2, steps=3)
        >>> summarize([t])["searches_per_episode"]
        2.0
    """
    n = max(len(trajectories), 1)
    out = {
        "reward": sum(t.reward for t in trajectories) / n,
        "em": sum(t.em for t in trajectories) / n,
        "f1": sum(t.f1 for t in trajectories) / n,
        "searches_per_episode": sum(t.searches for t in trajectories) / n,
        "invalid_rate": sum(t.invalid for t in trajectories) / max(sum(t.steps for t in trajectories), 1),
        "answered": sum(t.answer is not None for t in trajectories) / n,
        "model_tokens": sum(sum(t.mask) for t in trajectories) / n,
        "completion_tokens": sum(len(t.completion_ids) for t in trajectories) / n,
    }
    routed = [t for t in trajectories if t.right_source_searches is not None]
    if routed:
        right = sum(t.right_source_searches or 0 for t in routed)
        out["right_source_rate"] = right / max(sum(t.searches for t in routed), 1)
    if any(t.token_mismatch is not None for t in trajectories):
        out["token_mismatch_rate"] = sum(t.token_mismatch is not None for t in trajectories) / n
    names = sorted({k for t in trajectories for k in t.reward_terms})
    for name in names:
        out[f"reward_terms/{name}"] = sum(t.reward_terms.get(name, 0.0) for t in trajectories) / n
    return out


#: A turn's prefill splits its rows into at most this many passes (:func:`_prefill_buckets`).
PREFILL_BUCKETS = 4
#: ... when that saves at least this share of the padded tokens a single pass would feed.
PREFILL_MIN_SAVING = 0.1
#: What one more pass costs, in tokens fed (its fixed work: the weights read again, the layers'
#: calls), so that rows of nearly the same length stay in one pass.
PREFILL_PASS_TOKENS = 32


def _prefill_buckets(lengths: Sequence[int]) -> list[list[int]]:
    """Rows (indices into ``lengths``, each row's count of new tokens) grouped into at most
    :data:`PREFILL_BUCKETS` passes of rows of similar length, so that fewer padding tokens go
    through the model than in one pass padded to the longest (the observations of a turn differ
    by hundreds of tokens); one group when splitting saves less than
    :data:`PREFILL_MIN_SAVING` of the tokens.

    Example:
        >>> _prefill_buckets([250, 10, 240, 12])
        [[0, 2], [3, 1]]
        >>> _prefill_buckets([250, 240, 245, 235])
        [[0, 1, 2, 3]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    ls = [lengths[i] for i in order]
    m = len(ls)
    # best[k][j]: fewest tokens fed for the j longest rows in k passes (a pass's rows are
    # contiguous in length order, each padded to its first and longest).
    inf = float("inf")
    best = [[inf] * (m + 1) for _ in range(PREFILL_BUCKETS + 1)]
    cut = [[0] * (m + 1) for _ in range(PREFILL_BUCKETS + 1)]
    best[0][0] = 0
    for k in range(1, PREFILL_BUCKETS + 1):
        for j in range(1, m + 1):
            for i in range(j):
                cost = best[k - 1][i] + (j - i) * ls[i]
                if cost < best[k][j]:
                    best[k][j], cut[k][j] = cost, i
    k = min(range(1, PREFILL_BUCKETS + 1), key=lambda k: (best[k][m] + k * PREFILL_PASS_TOKENS, k))
    if k == 1 or best[k][m] > (1 - PREFILL_MIN_SAVING) * m * ls[0]:
        return [list(range(m))]
    groups, j = [], m
    while k:
        i = cut[k][j]
        groups.append(order[i:j])
        j, k = i, k - 1
    return groups[::-1]


def _cut_at_stops(
    ids: list[list[int]], logps: list[list[float]], stop_ids: set[int]
) -> tuple[list[list[int]], list[list[float]]]:
    """Cut each turn after its first stop token (an engine may run past one it was not told of)."""
    out_ids, out_lp = [], []
    for turn, lp in zip(ids, logps, strict=True):
        if len(turn) != len(lp):
            raise InvalidOptionError(f"the engine returned {len(turn)} token ids but {len(lp)} log-probs")
        end = next((j + 1 for j, t in enumerate(turn) if t in stop_ids), len(turn))
        out_ids.append(turn[:end])
        out_lp.append(lp[:end])
    return out_ids, out_lp


#: Most positions (rows x longest row) projected onto the vocabulary in one pass of
#: :func:`sequence_logprobs`. Its logits take positions x vocabulary x 4 bytes: 0.8 GB at 4,096
#: positions for SmolLM2's 49,152 tokens. For 16 SmolLM2 episodes of about 1,000 tokens, packing
#: halved the rise of peak memory against one pass (benchmarks/logprob_memory.py).
LOGPROB_PASS_POSITIONS = 4096


#: Logits of one tile of :func:`sequence_logprobs`'s LM-head pass, in bytes (positions x vocabulary x
#: 4): 16 MB, under glibc's largest mmap threshold (32 MB), so the tiles' buffers come back from
#: the heap instead of fresh pages (SmolLM2's 49,152 tokens: 85 positions a tile).
LOGPROB_TILE_BYTES = 16 * 2**20


def sequence_logprobs(
    model: Any,
    trajectories: Sequence[Trajectory],
    temperature: float = 1.0,
    max_positions: int = LOGPROB_PASS_POSITIONS,
    model_tokens_only: bool = False,
) -> list[list[float]]:
    """Log-probs of every completion token of each trajectory under ``model`` (a forward pass).

    Computed as TRL recomputes them, ``log_softmax(logits / temperature)``; env tokens get values
    too (callers mask them), or with ``model_tokens_only`` 0.0 without being scored. ``temperature``
    0 means 1 (greedy rollouts have no sampling scale). Trajectories of similar length share a
    pass, as many as keep the positions from the shortest prompt on under ``max_positions``; a
    longer one runs alone. A causal LM with a plain output layer (``base_model`` and
    ``get_output_embeddings``, no logit scaling) runs its backbone once and projects only the
    scored positions onto the vocabulary, in tiles of :data:`LOGPROB_TILE_BYTES`; another model
    projects every position of the pass.
    """
    torch = _torch()
    scale = temperature if temperature > 0 else 1.0
    device = next(model.parameters()).device
    head = _plain_head(model)
    keep = "logits_to_keep" in _logits_kwargs(model)
    out: list[list[float]] = [[] for _ in trajectories]
    prompt = [len(t.prompt_ids) for t in trajectories]
    total = [len(t.prompt_ids) + len(t.completion_ids) for t in trajectories]
    chunks: list[list[int]] = []
    for i in sorted(range(len(trajectories)), key=total.__getitem__):  # rows grow longer
        rows = [*chunks[-1], i] if chunks else []
        # i is the longest row yet: the pass scores positions from the shortest prompt to its end
        if rows and len(rows) * (total[i] - min(prompt[j] for j in rows) + 1) <= max_positions:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for rows in chunks:
                seqs = [trajectories[j].prompt_ids + trajectories[j].completion_ids for j in rows]
                width = max(total[j] for j in rows)
                first = min(prompt[j] for j in rows) - 1  # the first scored position
                ids = torch.zeros((len(seqs), width), dtype=torch.long)
                attn = torch.zeros((len(seqs), width), dtype=torch.long)
                for r, x in enumerate(seqs):
                    ids[r, : len(x)] = torch.tensor(x, dtype=torch.long)
                    attn[r, : len(x)] = 1
                ids, attn = ids.to(device), attn.to(device)
                if head is not None:
                    # Row r's completion token i sits at position prompt + i, predicted by the one before.
                    at = [
                        (r, prompt[j] - 1 + i)
                        for r, j in enumerate(rows)
                        for i, m in enumerate(trajectories[j].mask)
                        if m or not model_tokens_only
                    ]
                    hidden = model.base_model(input_ids=ids, attention_mask=attn, use_cache=False)
                    hidden = hidden.last_hidden_state
                    r_at = torch.tensor([r for r, _ in at], dtype=torch.long, device=device)
                    p_at = torch.tensor([p for _, p in at], dtype=torch.long, device=device)
                    scored = _tiled_logprobs(hidden[r_at, p_at], ids[r_at, p_at + 1], head, scale).tolist()
                    values = iter(scored)
                    for j in rows:
                        mask = trajectories[j].mask
                        out[j] = [next(values) if m or not model_tokens_only else 0.0 for m in mask]
                    continue
                kw = {"logits_to_keep": width - first} if keep else {}
                logits = model(input_ids=ids, attention_mask=attn, **kw).logits
                logits = logits[:, -(width - first) :][:, :-1].float() / scale  # positions first..width-2
                targets = ids[:, first + 1 :, None]
                logp = logits.gather(-1, targets)[..., 0] - torch.logsumexp(logits, -1)
                for r, j in enumerate(rows):
                    p = prompt[j] - 1 - first
                    lps = logp[r, p : p + len(trajectories[j].completion_ids)].tolist()
                    mask = trajectories[j].mask
                    out[j] = [
                        v if m or not model_tokens_only else 0.0 for v, m in zip(lps, mask, strict=True)
                    ]
    finally:
        model.train(was_training)
    return out


#: Config fields that scale or cap a model's logits: such a model's log-probs come from its own
#: forward (its ``logits``), not from its backbone and output layer.
SCALED_LOGITS = (
    "final_logit_softcapping",
    "logit_scale",
    "output_multiplier",
    "lm_head_multiplier",
    "logits_scaling",
)


def _plain_head(model: Any) -> Any:
    """``model``'s output layer when its logits are ``head(base_model(...).last_hidden_state)``."""
    base = getattr(model, "base_model", None)
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    config: Any = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    if (
        base is None
        or base is model
        or head is None
        or not hasattr(head, "weight")
        or any(getattr(text, k, None) is not None for k in SCALED_LOGITS)
    ):
        return None
    return head


def _tiled_logprobs(hidden: Any, targets: Any, head: Any, scale: float) -> Any:
    """Log-probs of ``targets`` [N] after ``hidden`` [N, H] under ``head``, in tiles of
    :data:`LOGPROB_TILE_BYTES` of fp32 logits."""
    torch = _torch()
    rows = max(1, LOGPROB_TILE_BYTES // (4 * head.weight.size(0)))
    out = []
    for start in range(0, hidden.size(0), rows):
        logits = head(hidden[start : start + rows]).float() / scale
        tgt = targets[start : start + rows, None]
        out.append(logits.gather(-1, tgt)[:, 0] - torch.logsumexp(logits, -1))
    return torch.cat(out) if out else hidden.new_zeros(0)


def frozen_copy(model: Any) -> Any:
    """A frozen, independent copy of ``model`` (the reference for :func:`policy_stats`).

    A model that went through a Hugging Face ``Trainer`` carries an instance-level ``forward``
    wrapper (accelerate's) whose closure calls the *original* model; ``copy.deepcopy`` keeps that
    closure, so the copy would silently run the live weights. The wrappers are dropped here.
    """
    import copy

    ref = copy.deepcopy(model)
    for module in ref.modules():
        module.__dict__.pop("forward", None)
    ref.eval()
    ref.requires_grad_(False)
    return ref


def policy_stats(
    trajectories: Sequence[Trajectory], ref_model: Any | None = None, temperature: float = 1.0
) -> dict[str, float]:
    """Entropy and KL-to-reference estimates on the model tokens of sampled trajectories.

    - ``entropy``: the mean negative sampling log-prob of the sampled model tokens, an unbiased
      estimate of the per-token entropy of the sampling distribution (after temperature).
    - ``kl_ref`` (with ``ref_model``): the mean over model tokens of the "k3" estimator
      ``exp(r) - r - 1`` with ``r = log p_ref - log p_policy`` (Schulman's, the one TRL's
      GRPO uses for its ``kl``), an estimate of KL(policy || reference) per token.

    Example:
        >>> t = Trajectory("q", [1], completion_ids=[5, 6], logprobs=[-0.5, 0.0], mask=[1, 0])
        >>> policy_stats([t])
        {'entropy': 0.5}
    """
    n_tok = sum(sum(t.mask) for t in trajectories)
    nll = -sum(lp for t in trajectories for lp, m in zip(t.logprobs, t.mask, strict=True) if m)
    out = {"entropy": nll / max(n_tok, 1)}
    if ref_model is not None and n_tok:
        ref = sequence_logprobs(ref_model, trajectories, temperature, model_tokens_only=True)
        total = 0.0
        for t, r in zip(trajectories, ref, strict=True):
            for lp, rp, m in zip(t.logprobs, r, t.mask, strict=True):
                if m:
                    d = rp - lp
                    total += math.exp(min(d, 50.0)) - d - 1.0
        out["kl_ref"] = total / n_tok
    return out


_ROOMY_CACHE: Any = None


def _roomy_cache(model_config: Any, room: int) -> Any:
    """A ``DynamicCache`` for ``model_config`` whose layers write new states into ``room``
    positions reserved after the held ones, instead of concatenating (``DynamicLayer.update``
    copies the whole cache at every decoded token: at 8 rows of 700 positions, 30% of a SmolLM2
    decoding step on a CPU). For models whose layers are all plain ``DynamicLayer`` s
    (``_full_attention_only``).

    A layer whose ``keys`` were replaced from outside (an index_select, a gather) moves into a
    new buffer, with ``cache.room`` free positions, at its next update: set ``cache.room`` before
    a prefill to reserve room for the turn it starts.
    """
    global _ROOMY_CACHE
    if _ROOMY_CACHE is None:
        from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

        class RoomyLayer(DynamicLayer):
            def __init__(self, cache: Any) -> None:
                super().__init__()
                self.cache = cache
                self.buffers: Any = None

            def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
                if not self.is_initialized:
                    self.lazy_initialization(key_states, value_states)
                keys: Any = self.keys
                values: Any = self.values
                held = keys.shape[-2] if keys.dim() == 4 else 0
                end = held + key_states.shape[-2]
                buf = self.buffers
                if (
                    buf is None
                    or held == 0
                    or keys.data_ptr() != buf[0].data_ptr()
                    or values.data_ptr() != buf[1].data_ptr()
                    or buf[0].shape[0] != key_states.shape[0]
                    or end > buf[0].shape[-2]
                ):
                    shape = (*key_states.shape[:2], end + max(0, int(self.cache.room)), key_states.shape[-1])
                    buf = (key_states.new_empty(shape), value_states.new_empty(shape))
                    if held:
                        buf[0][..., :held, :] = keys
                        buf[1][..., :held, :] = values
                    self.buffers = buf
                buf[0][..., held:end, :] = key_states
                buf[1][..., held:end, :] = value_states
                self.keys, self.values = buf[0][..., :end, :], buf[1][..., :end, :]
                return self.keys, self.values

        class RoomyCache(DynamicCache):
            def __init__(self, model_config: Any, room: int) -> None:
                layers = len(DynamicCache(config=model_config).layers)
                Cache.__init__(self, layers=[RoomyLayer(self) for _ in range(layers)])
                self.room = room

        _ROOMY_CACHE = RoomyCache
    return _ROOMY_CACHE(model_config, room)


def _output_cache(res: Any) -> Any:
    """The KV cache a forward pass returned: ``cache`` (transformers >= 5.2x), else
    ``past_key_values`` (reading that one on a newer output logs a deprecation)."""
    cache = getattr(res, "cache", None)
    return cache if cache is not None else getattr(res, "past_key_values", None)


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("torch", "train") from exc
    return torch
