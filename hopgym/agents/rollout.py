"""Token-in/token-out multi-turn rollouts with loss masks: :class:`RolloutCollector`.

Classes: :class:`RolloutConfig`, :class:`Trajectory`, :class:`RolloutCollector`. Functions:
:func:`encode_prompt`, :func:`stop_token_ids`, :func:`summarize`.

A trajectory is one episode in the env (with its reward wrappers), laid out as one token stream
in Search-R1's way: the chat-templated first observation is the *prompt*; the *completion* is the
model's turns with the environment's observations (retrieved documents, notices, corrective
messages) spliced in between them. The collector samples with its own batched loop over a Hugging
Face causal LM, so that it knows the log-probability of every sampled token, and it appends the
sampled ids exactly as they came out of the model: what the model produced is never decoded and
re-tokenised (the decoded text is only what the env reads). Only the env's text is tokenised.

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

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from hopgym.corpora.retrieval import DependencyNotInstalled
from hopgym.rewards.scoring import exact_match, token_f1

__all__ = ["RolloutConfig", "Trajectory", "RolloutCollector", "encode_prompt", "stop_token_ids",
           "summarize"]


@dataclass
class RolloutConfig:
    """How the collector samples.

    Attributes are per model turn unless said otherwise.
    """

    temperature: float = field(default=1.0, metadata={
        "help": "Sampling temperature; 0 means greedy decoding."})
    top_k: int = field(default=0, metadata={"help": "Keep the k most likely tokens (0: all)."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1.0: all)."})
    max_new_tokens: int = field(default=64, metadata={"help": "Longest model turn in tokens."})
    max_completion_tokens: int = field(default=1024, metadata={
        "help": "Longest completion (model turns + observations); the episode is cut there."})
    batch_size: int = field(default=64, metadata={
        "help": "Trajectories sampled in one batch (more are run in successive batches)."})
    chat_template: bool = field(default=True, metadata={
        "help": "Wrap the first observation in the tokenizer's chat template (if it has one)."})
    env_workers: int = field(default=0, metadata={
        "help": "0: the envs run in this process; W >= 1: in W Ray workers (hopgym[ray]). "
                "Either way the searches of a turn are answered in batches."})

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("max_new_tokens and batch_size must be >= 1")
        if isinstance(self.env_workers, bool) or not isinstance(self.env_workers, int) or \
                self.env_workers < 0:
            raise ValueError(f"env_workers must be an int >= 0 (0: envs in this process), got "
                             f"{self.env_workers!r}")
        if self.max_completion_tokens < self.max_new_tokens:
            raise ValueError(f"max_completion_tokens ({self.max_completion_tokens}) must be >= "
                             f"max_new_tokens ({self.max_new_tokens}): raise it or lower the other")

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
        out = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True)
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


class _Episode:
    """Bookkeeping for one trajectory in flight, in sub-env ``index`` of the collector's vector
    env."""

    def __init__(self, index: int, golds: Sequence[str], traj: Trajectory) -> None:
        self.index = index
        self.golds = list(golds)
        self.traj = traj
        self.done = False
        self.terms: dict[str, float] = defaultdict(float)


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

    The model's own text is never re-tokenised: each model turn's sampled ids go into the
    trajectory as they are; only observations are tokenised.
    """

    def __init__(self, model: Any, tokenizer: Any, env_fn: Callable[[], gym.Env],
                 config: RolloutConfig | None = None) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token: set tokenizer.pad_token first")
        self.model = model
        self.tokenizer = tokenizer
        self.env_fn = env_fn
        self.config = config or RolloutConfig()
        self._vector: Any = None
        self._stop_cache: dict[tuple[str, ...], tuple[set[int], tuple[str, ...]]] = {}

    # ------------------------------------------------------------------ public
    def collect(self, question_ids: Sequence[str], group_size: int = 1,
                seed: int | None = None) -> list[Trajectory]:
        """``group_size`` trajectories for each question id, grouped consecutively.

        Args:
            question_ids: ids of the env's task (``env.reset(options={"question_id": id})``).
            group_size: G, trajectories per question.
            seed: seeds the sampling generator (and the envs' ``reset``) for reproducible runs.
        """
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        torch = _torch()
        rows = [q for q in question_ids for _ in range(group_size)]
        # The generator lives where the logits do (a CPU generator cannot sample CUDA tensors).
        gen = torch.Generator(device=next(self.model.parameters()).device)
        gen.manual_seed(int(seed) if seed is not None else int(torch.randint(0, 2**31 - 1, ())))
        out: list[Trajectory] = []
        bs = self.config.batch_size
        for start in range(0, len(rows), bs):
            out.extend(self._collect_batch(rows[start:start + bs], gen, seed, start))
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

                self._vector = RayVectorEnv(fns, workers=min(self.config.env_workers, n),
                                            autoreset_mode=mode)
            else:
                self._vector = BatchedSearchVectorEnv(fns, autoreset_mode=mode)
        return self._vector

    def _stops(self) -> tuple[set[int], tuple[str, ...]]:
        stop = tuple(getattr(self._vector.get_attr("protocol")[0], "stop", ()))
        if stop not in self._stop_cache:
            self._stop_cache[stop] = stop_token_ids(self.tokenizer, stop)
        return self._stop_cache[stop]

    def _collect_batch(self, rows: Sequence[str], gen: Any, seed: int | None,
                       offset: int) -> list[Trajectory]:
        venv = self._envs(len(rows))
        n = venv.num_envs
        seeds = [None if seed is None or i >= len(rows) else seed + offset + i for i in range(n)]
        obs, _ = venv.reset(seed=seeds, options=[{"question_id": q} for q in rows] +
                            [None] * (n - len(rows)))
        samples = venv.get_attr("sample")
        episodes: list[_Episode] = []
        for i, qid in enumerate(rows):
            prompt = encode_prompt(self.tokenizer, obs[i], self.config.chat_template)
            episodes.append(_Episode(i, samples[i].answers,
                                     Trajectory(question_id=str(qid), prompt_ids=prompt)))
        while True:
            active = [e for e in episodes if not e.done]
            if not active:
                break
            self._model_turn(active, gen)
        return [e.traj for e in episodes]

    def _model_turn(self, active: list[_Episode], gen: Any) -> None:
        cfg = self.config
        # One token of the completion budget stays free for the closing eos.
        budgets = [max(1, min(cfg.max_new_tokens,
                              cfg.max_completion_tokens - len(e.traj.completion_ids) - 1))
                   for e in active]
        stop_ids, stop_strings = self._stops()
        contexts = [e.traj.prompt_ids + e.traj.completion_ids for e in active]
        ids, logps = self._sample(contexts, budgets, stop_ids, stop_strings, gen)
        texts = []
        for ep, turn_ids, turn_logps in zip(active, ids, logps, strict=True):
            ep.traj._append("model", turn_ids, turn_logps)
            text = self.tokenizer.decode(turn_ids, skip_special_tokens=True)
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
        traj.searches += kind == "search"
        traj.invalid += kind == "invalid"
        if info.get("answer") is not None:
            traj.answer = info["answer"]
        out_of_tokens = False
        if obs and not (terminated or truncated):
            obs_ids = self.tokenizer.encode(obs, add_special_tokens=False)
            room = self.config.max_completion_tokens - len(traj.completion_ids)
            if len(obs_ids) > room - 1:
                obs_ids, out_of_tokens = obs_ids[: max(room - 1, 0)], True
            traj._append("env", obs_ids, None)
        elif not (terminated or truncated) and (
                self.config.max_completion_tokens - len(traj.completion_ids) < 2):
            out_of_tokens = True
        if terminated or truncated or out_of_tokens:
            ep.done = True
            traj.terminated, traj.truncated = bool(terminated), bool(truncated or out_of_tokens)
            eos = self.tokenizer.eos_token_id
            if eos is not None and (not traj.completion_ids or traj.completion_ids[-1] != eos) \
                    and len(traj.completion_ids) < self.config.max_completion_tokens:
                traj._append("env", [eos], None)
            traj.reward_terms = dict(ep.terms)
            if traj.answer is not None:
                traj.em = exact_match(traj.answer, ep.golds)
                traj.f1 = token_f1(traj.answer, ep.golds)

    def _sample(self, contexts: list[list[int]], budgets: list[int], stop_ids: set[int],
                stop_strings: tuple[str, ...],
                gen: Any) -> tuple[list[list[int]], list[list[float]]]:
        """Batched sampling of one turn per context, with a KV cache; returns ids and log-probs."""
        torch = _torch()
        model = self.model
        device = next(model.parameters()).device
        pad = self.tokenizer.pad_token_id
        n = len(contexts)
        width = max(len(c) for c in contexts)
        input_ids = torch.full((n, width), pad, dtype=torch.long)
        attn = torch.zeros((n, width), dtype=torch.long)
        for i, c in enumerate(contexts):
            input_ids[i, width - len(c):] = torch.tensor(c, dtype=torch.long)
            attn[i, width - len(c):] = 1
        input_ids, attn = input_ids.to(device), attn.to(device)
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lp: list[list[float]] = [[] for _ in range(n)]
        finished = [b <= 0 for b in budgets]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                from transformers import DynamicCache

                cache_kw = _cache_kwarg(model)
                res = model(input_ids=input_ids, attention_mask=attn, position_ids=pos,
                            use_cache=True, **{cache_kw: DynamicCache()})
                logits = res.logits[:, -1, :].float()
                cache = res.past_key_values
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
                    feed = torch.tensor([t if not f else pad for t, f in
                                         zip(tok_l, finished, strict=True)], device=device)
                    attn = torch.cat([attn, torch.ones((n, 1), dtype=attn.dtype,
                                                       device=device)], dim=1)
                    last_pos = last_pos + 1
                    res = model(input_ids=feed[:, None], attention_mask=attn,
                                position_ids=last_pos[:, None], use_cache=True,
                                **{cache_kw: cache})
                    logits = res.logits[:, -1, :].float()
                    cache = res.past_key_values
        finally:
            model.train(was_training)
        return out_ids, out_lp

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
    """Means over trajectories: reward, each reward term, EM, F1, searches, invalid rate, length.

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
        "invalid_rate": sum(t.invalid for t in trajectories)
        / max(sum(t.steps for t in trajectories), 1),
        "answered": sum(t.answer is not None for t in trajectories) / n,
        "model_tokens": sum(sum(t.mask) for t in trajectories) / n,
        "completion_tokens": sum(len(t.completion_ids) for t in trajectories) / n,
    }
    names = sorted({k for t in trajectories for k in t.reward_terms})
    for name in names:
        out[f"reward_terms/{name}"] = sum(t.reward_terms.get(name, 0.0) for t in trajectories) / n
    return out


def _cache_kwarg(model: Any) -> str:
    """``cache`` (transformers >= 5.2x) or ``past_key_values`` (older): the KV-cache argument."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise DependencyNotInstalled.for_extra("torch", "train") from exc
    return torch
