"""Vector envs that answer their sub-envs' searches in batches: :class:`BatchedSearchVectorEnv`.

Classes: :class:`BatchedSearchVectorEnv` (a ``gymnasium.vector.VectorEnv``), :class:`EnvBatch`
(a list of envs stepped together: the engine of the vector envs and of each Ray worker),
:class:`SearchStats`. Functions: :func:`step_batched`, :func:`prefetch_searches`.
``gym.make_vec("hopgym/...", num_envs=n)`` builds a :class:`BatchedSearchVectorEnv` through
:func:`hopgym.envs.vector_entry.vector_entry_point`.

**How a step is batched.** Gymnasium's ``SyncVectorEnv`` steps its sub-envs one after the other,
so each search of each sub-env is a call of its own. Here a step has three phases:

1. *prepare*: each sub-env's base env (:class:`~hopgym.envs.multihop_qa.MultiHopQAEnv`) reads its
   action ahead (:meth:`~hopgym.envs.multihop_qa.MultiHopQAEnv.prepare_step`) and says which
   search its step will run: the retriever of its current source, the query and ``k``;
2. *search*: the requests are grouped by retriever (sub-envs of one task share their retrievers)
   and each group is answered with one ``search_batch`` call — at the largest ``k`` of the group
   when the retriever's top ``k`` is a prefix of any longer top list (``prefix_exact``: BM25), one
   call per distinct ``k`` otherwise (dense, hybrid, HTTP); each distinct query is sent once;
3. *step*: every sub-env is stepped as usual, through all its wrappers; the base env takes the
   supplied results (:meth:`~hopgym.envs.multihop_qa.MultiHopQAEnv.supply_search`) instead of
   searching, and only for the exact request it makes.

The wrappers see exactly the steps they see under ``SyncVectorEnv``, and a step whose action a
wrapper changed, or whose search the batch could not answer (the batch call raised), simply
searches on its own. Sub-envs without ``prepare_step`` (other envs) are stepped as they are.

**What "identical" means.** With BM25 (and any retriever whose results do not depend on how
many queries share a call) every observation, reward, flag and info is the same as
``SyncVectorEnv``'s under the same seeds; the tests check it over many seeded episodes. A dense
retriever encodes a batch of queries with padding and FAISS switches to BLAS from a few queries
on, so a batched score can differ from the single query's in the last float bits; ranks are
taken on scores rounded to 1e-5 (ties by corpus position), so a result can differ only where two
passages' scores lie within float noise of such a rounding boundary. A query repeated within a
step is searched once and counted as a query-cache hit (as ``search_batch`` counts repeats); the
cache's counters can still differ from ``SyncVectorEnv``'s (one search at the largest ``k`` where
``SyncVectorEnv`` searched again for a longer list).

**Order.** A step runs the autoresets of the sub-envs (``NEXT_STEP``) first, in index order, then
the steps, then (``SAME_STEP``) the resets of the sub-envs that finished, in index order;
``SyncVectorEnv`` interleaves them per sub-env. The steps keep their order among themselves and
so do the resets, and hopgym's sub-envs share nothing but their retrievers (whose results do not
depend on the order), so the results are the same.

Example:
    >>> import gymnasium as gym, hopgym
    >>> envs = gym.make_vec("hopgym/Tiny-v1", num_envs=3)
    >>> envs
    BatchedSearchVectorEnv(hopgym/Tiny-v1, num_envs=3)
    >>> obs, infos = envs.reset(seed=0)
    >>> obs, rewards, terminated, truncated, infos = envs.step(
    ...     ["<search>Kaldor river</search>"] * 3)
    >>> envs.search_stats()
    SearchStats(requests=3, calls=1, queries=1)
    >>> envs.close()
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from copy import deepcopy
from typing import Any, NamedTuple, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate

from hopgym.envs.multihop_qa import SearchRequest
from hopgym.errors import InvalidOptionError, InvalidOptionTypeError
from hopgym.retrieval.base import Retriever

__all__ = [
    "BatchedSearchVectorEnv",
    "EnvBatch",
    "SearchStats",
    "step_batched",
    "prefetch_searches",
    "StepResult",
]

#: One sub-env's step: ``(observation, reward, terminated, truncated, info)``, typed as
#: Gymnasium's ``Env.step`` returns it.
StepResult = tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]
#: One sub-env's reset: ``(observation, info)``.
ResetResult = tuple[Any, dict[str, Any]]


class SearchStats(NamedTuple):
    """What the batching did, summed over steps.

    Attributes:
        requests: searches the sub-envs' steps asked for (prepared requests).
        calls: ``search_batch`` calls that answered them.
        queries: queries those calls carried (each distinct query of a call once).
    """

    requests: int = 0
    calls: int = 0
    queries: int = 0

    def __add__(self, other: object) -> SearchStats:  # type: ignore[override]
        if not isinstance(other, SearchStats):
            return NotImplemented
        return SearchStats(*(a + b for a, b in zip(self, other, strict=True)))


class _Counter:
    __slots__ = ("requests", "calls", "queries")

    def __init__(self) -> None:
        self.requests = self.calls = self.queries = 0

    def stats(self) -> SearchStats:
        return SearchStats(self.requests, self.calls, self.queries)


def _search_batch(retriever: Retriever, queries: list[str], k: int) -> list[list[Any]]:
    batch = getattr(retriever, "search_batch", None)
    if callable(batch):
        return list(batch(queries, k))
    return [retriever.search(q, k) for q in queries]


def _count_duplicates(retriever: Retriever, duplicates: int) -> None:
    # Each query is sent once; a retriever's query cache counts the repeats as hits, as it does
    # for a repeat within one search_batch call, so the hit rate in the env's stats keeps its
    # meaning (searches answered without running).
    cache = getattr(retriever, "query_cache", None)
    if duplicates and cache is not None and getattr(cache, "enabled", False):
        cache.record(hits=duplicates)


def prefetch_searches(envs: Sequence[gym.Env], actions: Sequence[Any], stats: _Counter | None = None) -> None:
    """Phases 1 and 2 of a batched step (see the module docstring): prepare every env's step for
    its action and supply each one the results of its search, searched in batches.

    Envs whose base env has no ``prepare_step`` are left alone. A batch call that raises supplies
    nothing: those envs search on their own when stepped (and report the failure as usual).

    Args:
        envs: the envs (wrapped or not) that are about to be stepped.
        actions: the action each will be stepped with (the very objects: a prepared parse is
            reused for the same object only).
        stats: counters to add to.
    """
    groups: dict[int, tuple[Retriever, list[tuple[Any, SearchRequest]]]] = {}
    for env, action in zip(envs, actions, strict=True):
        base = env.unwrapped
        prepare = getattr(base, "prepare_step", None)
        if prepare is None:
            continue
        request = prepare(action)
        if request is None:
            continue
        groups.setdefault(id(request.retriever), (request.retriever, []))[1].append((base, request))
    for retriever, members in groups.values():
        if stats is not None:
            stats.requests += len(members)
        calls: dict[int, list[tuple[Any, SearchRequest]]] = {}
        if getattr(retriever, "prefix_exact", False):
            calls[max(r.k for _, r in members)] = members
        else:
            for member in members:
                calls.setdefault(member[1].k, []).append(member)
        for k, group in calls.items():
            if len(group) == 1:  # nothing to share: the env searches as it would alone
                if stats is not None:
                    stats.calls += 1
                    stats.queries += 1
                continue
            queries = list(dict.fromkeys(r.query for _, r in group))
            try:
                found = _search_batch(retriever, queries, k)
            except Exception:  # noqa: BLE001 - each env then searches, and reports, on its own
                continue
            if len(found) != len(queries):
                continue  # a retriever that breaks its contract: let each env search alone
            _count_duplicates(retriever, len(group) - len(queries))
            if stats is not None:
                stats.calls += 1
                stats.queries += len(queries)
            by_query = dict(zip(queries, found, strict=True))
            for base, request in group:
                hits = by_query[request.query]
                base.supply_search(request, hits[: request.k] if request.k < k else hits)


def step_batched(
    envs: Sequence[gym.Env], actions: Sequence[Any], stats: _Counter | None = None
) -> list[StepResult]:
    """Step each env with its action, their searches answered in batches.

    Returns what ``[env.step(a) for env, a in zip(envs, actions)]`` returns (the same results:
    see the module docstring), with one ``search_batch`` call per retriever (and ``k``) instead of
    one search per env.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> envs = [gym.make("hopgym/Tiny-v1") for _ in range(2)]
        >>> for i, env in enumerate(envs):
        ...     _ = env.reset(seed=i)
        >>> [r[4]["action_type"] for r in step_batched(envs, ["<search>Orsk</search>",
        ...                                                    "<think>hm</think>"])]
        ['search', 'think']
    """
    prefetch_searches(envs, actions, stats)
    return [env.step(action) for env, action in zip(envs, actions, strict=True)]


class EnvBatch:
    """Envs stepped together, their searches batched: the engine of
    :class:`BatchedSearchVectorEnv` and of each worker of
    :class:`~hopgym.envs.ray_vector.RayVectorEnv`.

    Indices are positions in :attr:`envs`. Nothing here knows about autoreset modes: the vector
    env says which envs to reset before stepping and whether to reset the ones that finish.

    Args:
        env_fns: callables that build the envs.
    """

    def __init__(self, env_fns: Iterable[Callable[[], gym.Env]]) -> None:
        self.envs: list[gym.Env] = [fn() for fn in env_fns]
        if not self.envs:
            raise InvalidOptionError("an EnvBatch needs at least one env")
        self._counter = _Counter()
        # Seeds for the next reset of envs that have none (an env rebuilt to replace a lost one).
        self._next_seed: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.envs)

    def spaces(self) -> dict[str, Any]:
        """The first env's spaces, metadata and render mode; a ``ValueError`` when another env's
        spaces differ."""
        first = self.envs[0]
        for i, env in enumerate(self.envs):
            if env.observation_space != first.observation_space or env.action_space != first.action_space:
                raise InvalidOptionError(
                    f"sub-env {i} has other spaces than sub-env 0 "
                    f"({env.observation_space}, {env.action_space} vs "
                    f"{first.observation_space}, {first.action_space})"
                )
        return {
            "observation_space": first.observation_space,
            "action_space": first.action_space,
            "metadata": dict(first.metadata),
            "render_mode": first.render_mode,
            "spec": _spec_of(first),
        }

    def seed_next_reset(self, seeds: dict[int, int | None]) -> None:
        """Seeds that the next reset without a seed of these envs uses."""
        for i, seed in seeds.items():
            if seed is None:
                self._next_seed.pop(i, None)
            else:
                self._next_seed[i] = int(seed)

    def _reset_one(
        self, i: int, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> ResetResult:
        pending = self._next_seed.pop(i, None)
        return self.envs[i].reset(seed=pending if seed is None else seed, options=options)

    def reset(
        self, indices: Sequence[int], seeds: Sequence[int | None], options: Sequence[dict[str, Any] | None]
    ) -> list[ResetResult]:
        """Reset the envs at ``indices`` with their seeds and options, in order."""
        return [self._reset_one(i, s, o) for i, s, o in zip(indices, seeds, options, strict=True)]

    def step(
        self,
        indices: Sequence[int],
        actions: Sequence[Any],
        *,
        reset_first: Sequence[int] = (),
        reset_done: bool = False,
    ) -> tuple[list[StepResult], dict[int, ResetResult]]:
        """Reset the envs in ``reset_first``, then step the envs at ``indices`` with ``actions``
        (searches batched) and, with ``reset_done``, reset those that finished.

        Returns:
            The step results (in the order of ``indices``) and the resets by index.
        """
        resets = {i: self._reset_one(i) for i in reset_first}
        results = step_batched([self.envs[i] for i in indices], actions, self._counter)
        if reset_done:
            for i, result in zip(indices, results, strict=True):
                if result[2] or result[3]:
                    resets[i] = self._reset_one(i)
        return results, resets

    def call(self, indices: Sequence[int] | None, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        """``env.get_wrapper_attr(name)`` of each env, called with the arguments if callable."""
        out = []
        for i in range(len(self.envs)) if indices is None else indices:
            attr = self.envs[i].get_wrapper_attr(name)
            out.append(attr(*args, **kwargs) if callable(attr) else attr)
        return out

    def set_attr(self, name: str, values: Sequence[Any]) -> None:
        """Set ``name`` on every env (``env.set_wrapper_attr``), one value each."""
        for env, value in zip(self.envs, values, strict=True):
            env.set_wrapper_attr(name, value)

    def search_stats(self) -> SearchStats:
        """What the batching did so far (:class:`SearchStats`)."""
        return self._counter.stats()

    def close(self) -> None:
        """Close every env."""
        for env in self.envs:
            env.close()


def _spec_of(env: gym.Env) -> Any:
    try:
        return env.spec
    except AttributeError:
        return None


class BatchVectorEnvBase(VectorEnv):
    """Gymnasium's autoreset modes and info layout over a backend that steps sub-envs in batches
    (shared by :class:`BatchedSearchVectorEnv` and
    :class:`~hopgym.envs.ray_vector.RayVectorEnv`).

    A subclass sets up its backend, then calls :meth:`_setup` with the first sub-env's spaces,
    and implements :meth:`_backend_reset`, :meth:`_backend_step`, :meth:`_backend_call`,
    :meth:`_backend_set_attr` and :meth:`_backend_close`.

    Extensions of the Gymnasium API (``SyncVectorEnv`` has neither):

    - ``reset(options=[...])``: a sequence with one entry per sub-env, that sub-env's options
      (a dict) or ``None`` to leave it as it is: per-env question ids, for example;
    - :meth:`step_subset`: step only some sub-envs (``autoreset_mode=DISABLED``).
    """

    num_envs: int
    autoreset_mode: AutoresetMode
    copy: bool

    def _setup(
        self, num_envs: int, spaces: dict[str, Any], autoreset_mode: str | AutoresetMode, copy: bool
    ) -> None:
        self.num_envs = num_envs
        self.copy = copy
        self.autoreset_mode = (
            autoreset_mode if isinstance(autoreset_mode, AutoresetMode) else AutoresetMode(autoreset_mode)
        )
        self.metadata = dict(spaces["metadata"])
        self.metadata["autoreset_mode"] = self.autoreset_mode
        self.render_mode = spaces["render_mode"]
        self.single_observation_space = spaces["observation_space"]
        self.single_action_space = spaces["action_space"]
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self._sub_spec = spaces.get("spec")
        self._env_obs: list[Any] = [None] * num_envs
        self._observations = create_empty_array(self.single_observation_space, n=num_envs, fn=np.zeros)
        self._rewards = np.zeros((num_envs,), dtype=np.float64)
        self._terminations = np.zeros((num_envs,), dtype=np.bool_)
        self._truncations = np.zeros((num_envs,), dtype=np.bool_)
        self._autoreset_envs = np.zeros((num_envs,), dtype=np.bool_)

    # ------------------------------------------------------------------ info layout
    def _merge_infos(self, entries: Sequence[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
        """The vector info of ``entries`` (sub-env index, info), as ``_add_info`` called on each
        in turn builds it, key by key: the same keys, arrays, types (a key's array takes the
        type of the first value it gets) and masks, at a fraction of the cost."""
        if len(entries) <= 8:  # few infos: key by key costs more than it saves
            out: dict[str, Any] = {}
            for i, info in entries:
                out = self._add_info(out, info, i)
            return out
        columns: dict[str, list[tuple[int, Any]]] = {}
        for i, info in entries:
            for key, value in info.items():
                column = columns.get(key)
                if column is None:
                    columns[key] = [(i, value)]
                else:
                    column.append((i, value))
        dicts = {key: [isinstance(v, dict) for _, v in column] for key, column in columns.items()}
        if any(key[:1] == "_" for key in columns) or any(
            key != "final_obs" and any(flags) and not all(flags) for key, flags in dicts.items()
        ):
            # A key that looks like a mask, or dicts mixed with other values under one key:
            # build it the step-by-step way.
            out = {}
            for i, info in entries:
                out = self._add_info(out, info, i)
            return out
        n = self.num_envs
        out = {}
        for key, column in columns.items():
            first = column[0][1]
            mask = np.zeros(n, dtype=np.bool_)
            if key != "final_obs" and isinstance(first, dict):
                array: Any = self._merge_infos(column)
                for i, _ in column:
                    mask[i] = True
            else:
                if key == "final_obs" or not (_numeric(first) or isinstance(first, np.ndarray)):
                    array = np.empty(n, dtype=object)  # None-filled
                elif isinstance(first, np.ndarray):
                    array = np.zeros((n, *first.shape), dtype=first.dtype)
                else:
                    array = np.zeros(n, dtype=type(first))
                for i, value in column:
                    array[i] = value
                    mask[i] = True
            out[key] = array
            out["_" + key] = mask
        return out

    def _add_info(
        self, vector_infos: dict[str, Any], env_info: dict[str, Any], env_num: int
    ) -> dict[str, Any]:
        """``VectorEnv._add_info``, with its exact layout and types (a key's array takes the type
        of the first value it gets), but allocating a key's arrays once per step instead of a
        mask for every sub-env and key: it is most of a vector step's own cost."""
        n = self.num_envs
        for key, value in env_info.items():
            mask = vector_infos.get("_" + key)
            if key == "final_obs":
                array = vector_infos.get(key)
                if array is None:
                    array = np.empty(n, dtype=object)  # None-filled
                array[env_num] = value
            elif isinstance(value, dict):
                array = self._add_info(vector_infos.get(key, {}), value, env_num)
            else:
                array = vector_infos.get(key) if mask is not None else None
                if array is None:
                    kind = type(value)
                    if kind is int or kind is float or kind is bool or issubclass(kind, np.number):
                        array = np.zeros(n, dtype=kind)
                    elif isinstance(value, np.ndarray):
                        array = np.zeros((n, *value.shape), dtype=value.dtype)
                    else:
                        array = np.empty(n, dtype=object)  # None-filled
                array[env_num] = value
            if mask is None:
                mask = np.zeros(n, dtype=np.bool_)
            mask[env_num] = True
            vector_infos[key] = array
            vector_infos["_" + key] = mask
        return vector_infos

    # ------------------------------------------------------------------ backend (override)
    def _backend_reset(
        self, indices: list[int], seeds: list[int | None], options: list[dict[str, Any] | None]
    ) -> list[ResetResult]:
        raise NotImplementedError

    def _backend_step(
        self, indices: list[int], actions: list[Any], reset_first: list[int], reset_done: bool
    ) -> tuple[list[StepResult], dict[int, ResetResult]]:
        raise NotImplementedError

    def _backend_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        raise NotImplementedError

    def _backend_set_attr(self, name: str, values: list[Any]) -> None:
        raise NotImplementedError

    def _backend_close(self) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self,
        *,
        seed: int | Sequence[int | None] | None = None,
        options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    ) -> tuple[Any, dict[str, Any]]:
        """Reset the sub-envs, as ``SyncVectorEnv.reset`` does.

        Args:
            seed: ``None`` (no seeds), an int (sub-env ``i`` gets ``seed + i``) or one seed per
                sub-env.
            options: a dict given to every sub-env (with Gymnasium's ``reset_mask``: a bool array
                of the sub-envs to reset), or a sequence of one entry per sub-env: its options,
                or ``None`` to leave that sub-env as it is.
        """
        n = self.num_envs
        if seed is None:
            seeds: list[int | None] = [None] * n
        elif isinstance(seed, (int, np.integer)):
            seeds = [int(seed) + i for i in range(n)]
        else:
            seeds = list(seed)
        if len(seeds) != n:
            raise InvalidOptionError(
                f"If seeds are passed as a list the length must match "
                f"num_envs={n} but got length={len(seeds)}."
            )
        if options is None or isinstance(options, dict):
            # As SyncVectorEnv: every chosen sub-env gets the same options, less the mask.
            opts = None if options is None else dict(options)
            mask = None if opts is None else opts.pop("reset_mask", None)
            if mask is not None:
                mask = _check_mask(mask, n)
            chosen = [i for i in range(n) if mask is None or mask[i]]
            given: list[dict[str, Any] | None] = [opts] * len(chosen)
        else:
            per = list(options)
            if len(per) != n:
                raise InvalidOptionError(
                    f"options as a sequence needs one entry per sub-env ({n}), got {len(per)}"
                )
            for i, o in enumerate(per):
                if o is not None and not isinstance(o, dict):
                    raise InvalidOptionTypeError(
                        f"options[{i}] must be a dict or None, got {type(o).__name__}"
                    )
            chosen = [i for i in range(n) if per[i] is not None]
            given = [per[i] for i in chosen]
            if not chosen:
                raise InvalidOptionError("options selects no sub-env to reset (every entry is None)")
        results = self._backend_reset(chosen, [seeds[i] for i in chosen], given)
        for i, (obs, _) in zip(chosen, results, strict=True):
            self._env_obs[i] = obs
            self._terminations[i] = self._truncations[i] = self._autoreset_envs[i] = False
        infos = self._merge_infos([(i, info) for i, (_, info) in zip(chosen, results, strict=True)])
        self._gather_observations()
        return self._observations_out(), infos

    def step(self, actions: Any) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every sub-env (searches batched), with Gymnasium's autoreset modes."""
        n = self.num_envs
        acts = list(iterate(self.action_space, _action_sequence(actions, n)))
        mode = self.autoreset_mode
        if mode == AutoresetMode.NEXT_STEP:
            reset_first = [i for i in range(n) if self._autoreset_envs[i]]
            stepped = [i for i in range(n) if not self._autoreset_envs[i]]
        elif mode == AutoresetMode.DISABLED:
            ended = [i for i in range(n) if self._autoreset_envs[i]]
            if ended:
                raise gym.error.ResetNeeded(
                    f"sub-env(s) {ended} finished and autoreset_mode is DISABLED: reset them "
                    f"(options={{'reset_mask': mask}}) before the next step"
                )
            reset_first, stepped = [], list(range(n))
        elif mode == AutoresetMode.SAME_STEP:
            reset_first, stepped = [], list(range(n))
        else:  # pragma: no cover - AutoresetMode has three members
            raise InvalidOptionError(f"Unexpected autoreset mode, {mode}")
        results, resets = self._backend_step(
            stepped, [acts[i] for i in stepped], reset_first, mode == AutoresetMode.SAME_STEP
        )
        by_index = dict(zip(stepped, results, strict=True))
        entries: list[tuple[int, dict[str, Any]]] = []
        for i in range(n):
            if i in by_index:
                obs, reward, terminated, truncated, info = by_index[i]
                self._rewards[i] = reward
                self._terminations[i], self._truncations[i] = terminated, truncated
                if mode == AutoresetMode.SAME_STEP and (terminated or truncated):
                    entries.append((i, {"final_obs": obs, "final_info": info}))
                    obs, info = resets[i]
            else:
                obs, info = resets[i]
                self._rewards[i] = 0.0
                self._terminations[i] = self._truncations[i] = False
            self._env_obs[i] = obs
            entries.append((i, info))
        infos = self._merge_infos(entries)
        self._gather_observations()
        self._autoreset_envs = np.logical_or(self._terminations, self._truncations)
        return (
            self._observations_out(),
            np.copy(self._rewards),
            np.copy(self._terminations),
            np.copy(self._truncations),
            infos,
        )

    def _gather_observations(self) -> None:
        """Batch the sub-envs' observations into :attr:`_observations`, as SyncVectorEnv does."""
        self._observations = concatenate(
            self.single_observation_space,
            self._env_obs,
            # None for a custom space (FreeText): Gymnasium's concatenate takes it at run time (it
            # makes a tuple) but declares only the buffers of its own spaces.
            self._observations,  # type: ignore[arg-type]
        )

    def _observations_out(self) -> Any:
        obs = self._observations
        if not self.copy or (type(obs) is tuple and all(type(o) is str for o in obs)):
            return obs  # a tuple of strings cannot change: a copy would be the same object
        return deepcopy(obs)

    def step_subset(self, indices: Sequence[int], actions: Sequence[Any]) -> list[StepResult]:
        """Step only the sub-envs at ``indices`` (searches batched), and return each one's own
        ``(observation, reward, terminated, truncated, info)``.

        For loops that drive episodes of their own, such as a rollout collector that steps only
        the episodes still running. Only with ``autoreset_mode=DISABLED``: a finished sub-env
        must be reset (``reset(options=[...])``) before it is stepped again.

        Raises:
            hopgym.errors.InvalidOptionError: another autoreset mode, an index out of range or given
                twice, or not as many actions as indices (:class:`~hopgym.errors.InvalidOptionTypeError`
                for a single string or another non-sequence).
            gymnasium.error.ResetNeeded: a sub-env that finished and was not reset.
        """
        if self.autoreset_mode != AutoresetMode.DISABLED:
            raise InvalidOptionError(
                "step_subset steps some sub-envs and resets none: it needs autoreset_mode=DISABLED"
            )
        idx = [int(i) for i in indices]
        acts = _action_sequence(actions, len(idx))
        if len(set(idx)) != len(idx) or any(not 0 <= i < self.num_envs for i in idx):
            raise InvalidOptionError(f"indices must be distinct, in [0, {self.num_envs}), got {idx}")
        ended = [i for i in idx if self._autoreset_envs[i]]
        if ended:
            raise gym.error.ResetNeeded(f"sub-env(s) {ended} finished: reset them first")
        if not idx:
            return []
        results, _ = self._backend_step(idx, acts, [], False)
        for i, (obs, reward, terminated, truncated, _) in zip(idx, results, strict=True):
            self._env_obs[i] = obs
            self._rewards[i] = reward
            self._terminations[i], self._truncations[i] = terminated, truncated
            self._autoreset_envs[i] = terminated or truncated
        return results

    def render(self) -> tuple[Any, ...]:
        """Each sub-env's ``render()``."""
        return tuple(self.call("render"))

    def call(self, name: str, *args: Any, **kwargs: Any) -> tuple[Any, ...]:
        """Call ``name`` on every sub-env (``get_wrapper_attr``); an attribute that is not
        callable is returned as it is."""
        return tuple(self._backend_call(name, args, kwargs))

    def get_attr(self, name: str) -> tuple[Any, ...]:
        """The attribute ``name`` of every sub-env."""
        return self.call(name)

    def set_attr(self, name: str, values: list[Any] | tuple[Any, ...] | Any) -> None:
        """Set ``name`` on every sub-env: one value each (a list or tuple), or the same value."""
        if not isinstance(values, (list, tuple)):
            values = [values] * self.num_envs
        if len(values) != self.num_envs:
            raise InvalidOptionError(f"values has {len(values)} entries for {self.num_envs} sub-envs")
        self._backend_set_attr(name, list(values))

    # Per-sub-env tuples, as Gymnasium's SyncVectorEnv has them, where VectorEnv declares one seed and
    # one settable generator: the same override Gymnasium makes.
    @property
    def np_random_seed(self) -> tuple[int, ...]:  # type: ignore[override]  # see above
        """Each sub-env's ``np_random_seed``."""
        return self.get_attr("np_random_seed")

    @property  # type: ignore[misc]  # read-only here, as in SyncVectorEnv
    def np_random(self) -> tuple[np.random.Generator, ...]:  # type: ignore[override]  # see above
        """Each sub-env's ``np_random``."""
        return self.get_attr("np_random")

    def close_extras(self, **kwargs: Any) -> None:
        """Close the sub-envs."""
        self._backend_close()


def _action_sequence(actions: Any, n: int) -> list[Any]:
    """``actions`` as a list of ``n`` actions, one per sub-env.

    Raises:
        hopgym.errors.InvalidOptionTypeError: a single string (which would otherwise be read as one
            action per character) or anything else that is not a sequence.
        hopgym.errors.InvalidOptionError: a sequence of another length.
    """
    expected = f"expected a sequence of {n} strings (one action per sub-env)"
    if (
        isinstance(actions, str | bytes)
        or not isinstance(actions, Sequence | np.ndarray)
        or (isinstance(actions, np.ndarray) and actions.ndim != 1)  # a 0-d array has no length
    ):
        raise InvalidOptionTypeError(f"{expected}, got a {type(actions).__name__}: {actions!r:.60}")
    if len(actions) != n:
        raise InvalidOptionError(f"{expected}, got {len(actions)} actions for {n} sub-envs")
    return list(actions)


def _numeric(value: Any) -> bool:
    kind = type(value)
    return kind is int or kind is float or kind is bool or issubclass(kind, np.number)


def _check_mask(mask: Any, n: int) -> np.ndarray:
    if not isinstance(mask, np.ndarray):
        raise InvalidOptionTypeError(f"`options['reset_mask']` must be a numpy array, got {type(mask)}")
    if mask.shape != (n,):
        raise InvalidOptionError(f"`options['reset_mask']` must have shape `({n},)`, got {mask.shape}")
    if mask.dtype != np.bool_:
        raise InvalidOptionTypeError(f"`options['reset_mask']` must have `dtype=np.bool_`, got {mask.dtype}")
    if not np.any(mask):
        raise InvalidOptionError(
            f"`options['reset_mask']` must contain a boolean array with at least "
            f"one True value, got reset_mask={mask}"
        )
    return mask


class BatchedSearchVectorEnv(BatchVectorEnvBase):
    """A ``gymnasium.vector.VectorEnv`` whose sub-envs' searches are answered in batches: one
    ``search_batch`` call per retriever per step (see the module docstring).

    Built from env fns as ``SyncVectorEnv`` is, with the same API, autoreset modes
    (``metadata["autoreset_mode"]``), seeds and info layout (Gymnasium's ``_key`` masks;
    ``final_obs``/``final_info`` under ``SAME_STEP``), and the same results (see "What identical
    means" above). Extensions: per-env reset options and :meth:`step_subset`
    (:class:`BatchVectorEnvBase`), :meth:`search_stats`.

    Args:
        env_fns: callables that build the sub-envs.
        copy: return a copy of the observations (as ``SyncVectorEnv``).
        autoreset_mode: ``NEXT_STEP`` (the default), ``SAME_STEP`` or ``DISABLED``
            (``gymnasium.vector.AutoresetMode`` or its value).

    Raises:
        hopgym.errors.InvalidOptionError: no env fns, or sub-envs whose spaces differ.

    Change logs:
        v0.2.0: added.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        copy: bool = True,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
    ) -> None:
        super().__init__()
        self.env_fns = list(env_fns)
        if not self.env_fns:
            raise InvalidOptionError("BatchedSearchVectorEnv needs at least one env fn")
        self.batch = EnvBatch(self.env_fns)
        self._setup(len(self.batch), self.batch.spaces(), autoreset_mode, copy)

    @property
    def envs(self) -> list[gym.Env]:
        """The sub-envs."""
        return self.batch.envs

    def __repr__(self) -> str:
        spec = self.spec or self._sub_spec
        name = f"{spec.id}, " if spec is not None else ""
        return f"{type(self).__name__}({name}num_envs={self.num_envs})"

    def search_stats(self) -> SearchStats:
        """Searches requested, ``search_batch`` calls and queries sent so far."""
        return self.batch.search_stats()

    def _backend_reset(
        self, indices: list[int], seeds: list[int | None], options: list[dict[str, Any] | None]
    ) -> list[ResetResult]:
        return self.batch.reset(indices, seeds, options)

    def _backend_step(
        self, indices: list[int], actions: list[Any], reset_first: list[int], reset_done: bool
    ) -> tuple[list[StepResult], dict[int, ResetResult]]:
        return self.batch.step(indices, actions, reset_first=reset_first, reset_done=reset_done)

    def _backend_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        return self.batch.call(None, name, *args, **kwargs)

    def _backend_set_attr(self, name: str, values: list[Any]) -> None:
        self.batch.set_attr(name, values)

    def _backend_close(self) -> None:
        self.batch.close()
