"""Env factories behind the registered ids: :func:`make_task_env`, :func:`make_tiny`.

``gym.make("hopgym/<Name>-v0", reward=..., max_turns=..., ...)`` calls one of these. Each builds the
bare :class:`~hopgym.envs.multihop_qa.MultiHopQAEnv`, puts the step budget on it with ``TimeLimit``
and the reward preset on top, so that reward wrappers see the truncation at the budget (R3-RAG
scales process rewards by whether an answer came before the step cap).
"""

from __future__ import annotations

import gymnasium as gym

from hopgym.corpora.sources import QATask
from hopgym.envs.multihop_qa import MultiHopQAEnv
from hopgym.envs.protocols import Protocol
from hopgym.envs.wrappers import StepBudget

__all__ = ["make_task_env", "make_tiny", "make_synthetic"]


def make_task_env(
    task: QATask,
    *,
    reward: str | None = "default",
    max_turns: int = 8,
    protocol: str | Protocol = "tags",
    top_k: int = 3,
    dedup: bool = True,
    max_docs: int | None = None,
    doc_chars: int | None = None,
    background_k: int = 0,
    max_action_chars: int = 8192,
    render_mode: str | None = None,
) -> gym.Env:
    """``preset(StepBudget(MultiHopQAEnv(task, ...), max_turns), reward)``.

    Args:
        task: questions and sources.
        reward: a preset name from :mod:`hopgym.rewards.presets`, or ``None`` for the bare env
            (reward 0).
        max_turns: the step budget.
        protocol, top_k, dedup, max_docs, doc_chars, background_k, max_action_chars, render_mode:
            passed to :class:`MultiHopQAEnv`.
    """
    env: gym.Env = MultiHopQAEnv(
        task, protocol=protocol, top_k=top_k, dedup=dedup, max_docs=max_docs,
        doc_chars=doc_chars, background_k=background_k, max_turns=max_turns,
        max_action_chars=max_action_chars, render_mode=render_mode)
    env = StepBudget(env, max_episode_steps=max_turns)
    if reward is not None:
        from hopgym.rewards.presets import preset

        env = preset(env, reward)
    return env


def make_tiny(
    *,
    sources: tuple[str, ...] = ("local",),
    engine: str = "bm25s",
    reward: str | None = "default",
    max_turns: int = 8,
    protocol: str | Protocol = "tags",
    top_k: int = 3,
    dedup: bool = True,
    max_docs: int | None = None,
    doc_chars: int | None = None,
    background_k: int = 0,
    render_mode: str | None = None,
) -> gym.Env:
    """The hand-written tiny corpus (:mod:`hopgym.corpora.tiny`) as an env: ``hopgym/Tiny-v0``."""
    from hopgym.corpora.tiny import tiny_task

    return make_task_env(
        tiny_task(tuple(sources), engine), reward=reward, max_turns=max_turns, protocol=protocol,
        top_k=top_k, dedup=dedup, max_docs=max_docs, doc_chars=doc_chars,
        background_k=background_k, render_mode=render_mode)


def make_synthetic(
    *,
    seed: int = 0,
    n_entities: int = 3000,
    hops: int | tuple[int, ...] = (2, 3),
    kinds: str | tuple[str, ...] | None = None,
    n_questions: int = 1000,
    distractors: float = 0.5,
    passages_per_doc: int = 1,
    phrasing_variety: int = 3,
    sources: tuple[str, ...] = ("local",),
    local_coverage: float = 0.5,
    web_noise: float = 0.3,
    test_fraction: float = 0.2,
    split: str | None = None,
    engine: str = "bm25s",
    reward: str | None = "default",
    max_turns: int = 8,
    protocol: str | Protocol = "tags",
    top_k: int = 3,
    dedup: bool = True,
    max_docs: int | None = None,
    doc_chars: int | None = None,
    background_k: int = 0,
    max_action_chars: int = 8192,
    render_mode: str | None = None,
) -> gym.Env:
    """The synthetic world as an env: ``hopgym/Synthetic-v0`` and ``hopgym/SyntheticRouting-v0``.

    World arguments (``seed`` … ``test_fraction``) are those of
    :class:`~hopgym.corpora.synthetic.WorldConfig`; ``seed`` is the *world's* seed (the question
    order comes from ``reset(seed=...)``). ``split`` picks ``"train"`` or ``"test"`` questions
    (``None``: all). The world and its BM25 indexes are built once per process and shared.
    """
    from hopgym.corpora.synthetic import KINDS, WorldConfig, build_task

    config = WorldConfig(
        seed=seed, n_entities=n_entities, hops=hops, kinds=KINDS if kinds is None else kinds,
        n_questions=n_questions, distractors=distractors, passages_per_doc=passages_per_doc,
        phrasing_variety=phrasing_variety, sources=tuple(sources), local_coverage=local_coverage,
        web_noise=web_noise, test_fraction=test_fraction)
    return make_task_env(
        build_task(config, engine, split), reward=reward, max_turns=max_turns, protocol=protocol,
        top_k=top_k, dedup=dedup, max_docs=max_docs, doc_chars=doc_chars,
        background_k=background_k, max_action_chars=max_action_chars, render_mode=render_mode)
