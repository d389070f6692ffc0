"""Env factories behind the registered ids: :func:`make_task_env`, :func:`make_tiny`,
:func:`make_synthetic`.

``gym.make("hopgym/<Name>-v0", reward=..., max_turns=..., ...)`` calls one of these. Each takes
the env options through one type, :class:`~hopgym.envs.options.EnvOptions` (as keyword arguments
typed by :class:`~hopgym.envs.options.EnvKwargs`), checks and resolves them once, *before*
building a world or an index, builds the bare :class:`~hopgym.envs.multihop_qa.MultiHopQAEnv`
(which applies the one step budget, ``max_turns``, itself) and puts the reward preset on top.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from hopgym.envs.multihop_qa import MultiHopQAEnv
from hopgym.envs.options import EnvKwargs, EnvOptions, Unpack
from hopgym.tasks.base import QATask

__all__ = ["make_task_env", "make_tiny", "make_synthetic"]


def make_task_env(
    task: QATask,
    options: EnvOptions | Mapping[str, Any] | None = None,
    **kwargs: Unpack[EnvKwargs],
) -> gym.Env:
    """``preset(MultiHopQAEnv(task, options), options.reward)``.

    Args:
        task: questions and sources.
        options: the env options (an :class:`EnvOptions` or a mapping of its fields; ``None``:
            the defaults); keyword arguments override single fields.
        **kwargs: single :class:`EnvOptions` fields, overriding ``options``.
    """
    opts = EnvOptions.from_kwargs(kwargs, base=options).resolved()
    env: gym.Env = MultiHopQAEnv(task, opts)
    if opts.reward is not None:
        from hopgym.rewards.presets import preset

        env = preset(env, opts.reward)
    return env


@functools.cache
def _own_args(factory: Any) -> tuple[str, ...]:
    """A factory's own keyword names (suggested, with the options, for a misspelt keyword)."""
    return tuple(
        n
        for n, p in inspect.signature(factory).parameters.items()
        if p.kind is not inspect.Parameter.VAR_KEYWORD
    )


def make_tiny(
    *,
    sources: tuple[str, ...] = ("local",),
    retriever: Any = None,
    engine: str | None = None,
    **options: Unpack[EnvKwargs],
) -> gym.Env:
    """The hand-written tiny corpus (:mod:`hopgym.tasks.tiny`) as an env: ``hopgym/Tiny-v1``.

    Args:
        sources: ``("local",)`` or ``("local", "web")``.
        retriever: how each source is indexed: a kind (``"bm25"``, the default, ``"dense"``,
            ``"hybrid"``), a dict of settings or a
            :class:`~hopgym.retrieval.specs.RetrieverSpec`.
        engine: shorthand for the BM25 engine, ``bm25s`` or ``rank_bm25``.
        **options: the env options (:class:`~hopgym.envs.options.EnvOptions`).
    """
    opts = EnvOptions.from_kwargs(options, also=_own_args(make_tiny)).resolved()
    from hopgym.tasks.tiny import tiny_task

    return make_task_env(tiny_task(tuple(sources), engine, retriever=retriever), opts)


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
    retriever: Any = None,
    engine: str | None = None,
    **options: Unpack[EnvKwargs],
) -> gym.Env:
    """The synthetic world as an env: ``hopgym/Synthetic-v1`` and ``hopgym/SyntheticRouting-v1``.

    World arguments (``seed`` … ``test_fraction``) are those of
    :class:`~hopgym.corpora.synthetic.WorldConfig`; ``seed`` is the *world's* seed (the question
    order comes from ``reset(seed=...)``). ``split`` picks ``"train"`` or ``"test"`` questions
    (``None``: all). ``retriever`` says how each source is indexed (a kind — ``"bm25"``, the
    default, ``"dense"``, ``"hybrid"`` —, a dict of settings or a
    :class:`~hopgym.retrieval.specs.RetrieverSpec`); ``engine`` is a shorthand for its BM25
    engine. The world and its indexes are built once per process and shared. ``**options`` are the env options
    (:class:`~hopgym.envs.options.EnvOptions`), checked before the world is built.
    """
    opts = EnvOptions.from_kwargs(options, also=_own_args(make_synthetic)).resolved()
    from hopgym.corpora.synthetic import KINDS, WorldConfig
    from hopgym.tasks.synthetic import build_task

    config = WorldConfig(
        seed=seed,
        n_entities=n_entities,
        hops=hops,
        kinds=KINDS if kinds is None else kinds,
        n_questions=n_questions,
        distractors=distractors,
        passages_per_doc=passages_per_doc,
        phrasing_variety=phrasing_variety,
        sources=tuple(sources),
        local_coverage=local_coverage,
        web_noise=web_noise,
        test_fraction=test_fraction,
    )
    # build_task checks the retriever before it builds the world.
    return make_task_env(build_task(config, split=split, retriever=retriever, engine=engine), opts)
