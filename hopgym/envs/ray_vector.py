"""Env workers on Ray: :class:`RayVectorEnv`, :class:`WorkerError`.

A :class:`RayVectorEnv` is a ``gymnasium.vector.VectorEnv`` whose sub-envs live in Ray actors
(*workers*), each holding a contiguous slice of them in an :class:`~hopgym.envs.vector.EnvBatch`,
so that each worker answers its envs' searches in batches as
:class:`~hopgym.envs.vector.BatchedSearchVectorEnv` does. A step sends one call to each worker
and waits for all of them; the rollouts scale past one machine (a Ray cluster) while the model
stays with the learner. It has the API, seeds and results of ``SyncVectorEnv`` (and of
:class:`~hopgym.envs.vector.BatchedSearchVectorEnv`, whose extensions it shares).

**A worker that dies** (its process killed, its node lost) or does not answer within ``timeout``
seconds is never waited for again: every episode it was running ends in that step, truncated
(``terminated=False, truncated=True``, reward 0), with ``info["worker_error"]`` saying what
happened (under ``SAME_STEP`` that info is ``final_info`` and the sub-env's next episode starts
at once); the worker is killed and a new one built from the same env fns. The new envs' next
reset without a seed draws its seed from the sub-env's last seed and the number of replacements
(``numpy.random.SeedSequence([seed, n])``), so a run stays reproducible. A failure while the
replacement starts, or during ``reset``, ``call`` or ``set_attr`` (which have no episode to end),
raises :class:`WorkerError`. An exception that an env raises inside a worker is raised here as it
is, as ``SyncVectorEnv`` would.

Ray is imported when a :class:`RayVectorEnv` is built (``pip install 'hopgym[ray]'``); when no
Ray is running, ``ray.init(**ray_init)`` starts a local one (left running at ``close()``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from hopgym.envs.vector import BatchVectorEnvBase, EnvBatch, ResetResult, SearchStats, StepResult
from hopgym.errors import DependencyNotInstalled, HopgymError, InvalidOptionError

__all__ = ["RayVectorEnv", "WorkerError", "DEFAULT_TIMEOUT", "DEFAULT_START_TIMEOUT", "ENVS_PER_WORKER"]

#: Seconds a worker may take to answer one call (a step of all its envs) before it is given up.
DEFAULT_TIMEOUT = 120.0
#: Seconds a worker may take to start (build its envs: a world, an index) before it is given up.
DEFAULT_START_TIMEOUT = 600.0
#: Sub-envs per worker when ``workers`` is not given.
ENVS_PER_WORKER = 8


class WorkerError(HopgymError, RuntimeError):
    """A Ray env worker failed where no episode could absorb it: it could not be started or
    replaced, or it died during ``reset``, ``call`` or ``set_attr``."""


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise DependencyNotInstalled.for_extra("ray", "ray") from None
    return ray


class _Worker:
    """The actor: an :class:`EnvBatch` over one slice of the sub-envs."""

    def __init__(
        self, env_fns: Sequence[Callable[[], gym.Env]], next_seeds: dict[int, int | None] | None = None
    ) -> None:
        self.batch = EnvBatch(env_fns)
        if next_seeds:
            self.batch.seed_next_reset(next_seeds)

    def spaces(self) -> dict[str, Any]:
        return self.batch.spaces()

    def pid(self) -> int:
        return os.getpid()

    def reset(
        self, indices: list[int], seeds: list[int | None], options: list[dict[str, Any] | None]
    ) -> list[ResetResult]:
        return self.batch.reset(indices, seeds, options)

    def step(
        self, indices: list[int], actions: list[Any], reset_first: list[int], reset_done: bool
    ) -> tuple[list[StepResult], dict[int, ResetResult]]:
        return self.batch.step(indices, actions, reset_first=reset_first, reset_done=reset_done)

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        return self.batch.call(None, name, *args, **kwargs)

    def set_attr(self, name: str, values: list[Any]) -> None:
        self.batch.set_attr(name, values)

    def search_stats(self) -> SearchStats:
        return self.batch.search_stats()

    def close(self) -> None:
        self.batch.close()


def _summary(exc: BaseException, limit: int = 300) -> str:
    """A Ray error in a line: its first line, and the cause's last line when there is one (an
    actor that died in its constructor says why only at the end)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    text = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return text if len(text) <= limit else text[:limit] + "…"


def _resources_hint(ray: Any, dead: _Dead) -> str:
    # An actor waits, unscheduled, for the CPUs it asks for: say so when a start times out.
    if "did not answer" not in dead.reason:
        return ""
    try:
        free = ray.available_resources().get("CPU", 0)
    except Exception:  # noqa: BLE001 - only a hint
        return ""
    return (
        f" (the Ray cluster has {free:g} CPU(s) free: each worker asks for "
        f"worker_options['num_cpus'], 1 by default)"
    )


class _Dead:
    """A worker's failure in one call."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class RayVectorEnv(BatchVectorEnvBase):
    """A ``gymnasium.vector.VectorEnv`` whose sub-envs live in Ray actors (see the module
    docstring); each worker batches its envs' searches.

    Args:
        env_fns: callables that build the sub-envs (sent to the workers: they must pickle with
            cloudpickle; a :class:`~hopgym.tasks.base.QATask` with a ``recipe`` is rebuilt
            in each worker rather than copied).
        workers: how many workers (default: one per :data:`ENVS_PER_WORKER` sub-envs); the
            sub-envs are split into contiguous slices of nearly equal size.
        copy: return a copy of the observations (as ``SyncVectorEnv``).
        autoreset_mode: ``NEXT_STEP`` (default), ``SAME_STEP`` or ``DISABLED``.
        timeout: seconds a worker may take for one call before it is given up
            (:data:`DEFAULT_TIMEOUT`).
        start_timeout: seconds a worker may take to start, building its envs
            (:data:`DEFAULT_START_TIMEOUT`).
        worker_options: Ray actor options of each worker (``ray.remote``'s, e.g.
            ``{"num_cpus": 1}``, the default).
        ray_init: keyword arguments of ``ray.init`` when no Ray is running yet.

    Raises:
        DependencyNotInstalled: Ray is not installed.
        WorkerError: a worker could not be started (its env fns raised, or it timed out).
        hopgym.errors.InvalidOptionError: bad ``workers`` or ``timeout``, no env fns, or sub-envs whose spaces
            differ.

    Example (not run here: it starts Ray):
        >>> import gymnasium as gym, hopgym  # doctest: +SKIP
        >>> envs = gym.make_vec("hopgym/Synthetic-v1", 16, ray_workers=2)  # doctest: +SKIP

    Change logs:
        v0.2.0: added.
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env]],
        *,
        workers: int | None = None,
        copy: bool = True,
        autoreset_mode: str | AutoresetMode = AutoresetMode.NEXT_STEP,
        timeout: float = DEFAULT_TIMEOUT,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        worker_options: dict[str, Any] | None = None,
        ray_init: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.env_fns = list(env_fns)
        n = len(self.env_fns)
        if n == 0:
            raise InvalidOptionError("RayVectorEnv needs at least one env fn")
        if workers is None:
            workers = min(n, max(1, -(-n // ENVS_PER_WORKER)))
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= n:
            raise InvalidOptionError(
                f"workers must be an int in [1, {n}] (the number of sub-envs), got {workers!r}"
            )
        for name, value in (("timeout", timeout), ("start_timeout", start_timeout)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise InvalidOptionError(f"{name} must be a number of seconds > 0, got {value!r}")
        self.timeout, self.start_timeout = float(timeout), float(start_timeout)
        ray = self._ray = _ray()
        if not ray.is_initialized():
            ray.init(**(ray_init or {}))
        self._actor_cls = ray.remote(**{"num_cpus": 1, **(worker_options or {})})(_Worker)
        bounds = np.cumsum([0] + [len(part) for part in np.array_split(np.arange(n), workers)])
        #: ``slices[w]`` is the range of sub-envs worker ``w`` holds.
        self.slices = [range(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        self._owner = np.repeat(np.arange(workers), [len(s) for s in self.slices])
        self.workers: list[Any] = [self._start(w) for w in range(workers)]
        spaces = self._get({w: a.spaces.remote() for w, a in enumerate(self.workers)}, self.start_timeout)
        for w, got in spaces.items():
            if isinstance(got, _Dead):
                self._kill_all()
                raise WorkerError(
                    f"Ray env worker {w} could not start: {got.reason}{_resources_hint(ray, got)}"
                )
        first = spaces[0]
        for w, got in spaces.items():
            if (got["observation_space"], got["action_space"]) != (
                first["observation_space"],
                first["action_space"],
            ):
                self._kill_all()
                raise InvalidOptionError(f"worker {w}'s sub-envs have other spaces than worker 0's")
        self._setup(n, first, autoreset_mode, copy)
        #: Replacements so far, per worker.
        self.replacements = [0] * workers
        self._running = np.zeros(n, dtype=bool)
        self._last_seed: list[int | None] = [None] * n
        self._lost: dict[int, str] = {}  # running episodes of a replaced worker, not yet ended

    def __repr__(self) -> str:
        spec = self.spec or self._sub_spec
        name = f"{spec.id}, " if spec is not None else ""
        return f"{type(self).__name__}({name}num_envs={self.num_envs}, workers={len(self.workers)})"

    # ------------------------------------------------------------------ workers
    def _start(self, w: int, next_seeds: dict[int, int | None] | None = None) -> Any:
        return self._actor_cls.remote([self.env_fns[i] for i in self.slices[w]], next_seeds)

    def _get(self, refs: dict[int, Any], timeout: float | None = None) -> dict[int, Any]:
        """Each worker's answer, or :class:`_Dead` for a worker that died or ran out of time
        (one deadline for all, ``timeout`` or :attr:`timeout` seconds away). An exception an env
        raised in a worker is raised here."""
        ray = self._ray
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        out: dict[int, Any] = {}
        for w, ref in refs.items():
            try:
                out[w] = ray.get(ref, timeout=max(deadline - time.monotonic(), 0.001))
            except ray.exceptions.RayTaskError as exc:
                raise exc.as_instanceof_cause() from None
            except ray.exceptions.GetTimeoutError:
                out[w] = _Dead(f"Ray env worker {w} did not answer within {timeout:g} s")
            except ray.exceptions.RayError as exc:
                out[w] = _Dead(f"Ray env worker {w} died ({type(exc).__name__}: {_summary(exc)})")
        return out

    def _replace(self, w: int) -> None:
        """Kill worker ``w`` and start another from the same env fns; its envs' next resets
        without a seed get seeds derived from their last ones."""
        try:
            self._ray.kill(self.workers[w], no_restart=True)
        except Exception:  # noqa: BLE001, S110 - it may be gone already
            pass
        self.replacements[w] += 1
        gen = self.replacements[w]
        seeds = {}
        for local, i in enumerate(self.slices[w]):
            base = self._last_seed[i]
            seeds[local] = (
                None if base is None else int(np.random.SeedSequence([base, gen]).generate_state(1)[0])
            )
        self.workers[w] = self._start(w, seeds)
        got = self._get({w: self.workers[w].pid.remote()}, self.start_timeout)[w]
        if isinstance(got, _Dead):
            raise WorkerError(
                f"could not replace Ray env worker {w}: {got.reason}{_resources_hint(self._ray, got)}"
            )

    def _lose(self, w: int, reason: str, ended_here: Sequence[int] = ()) -> None:
        """Replace worker ``w``; its running episodes other than ``ended_here`` end at their
        next step with ``reason``."""
        for i in self.slices[w]:
            if self._running[i] and i not in ended_here:
                self._lost[i] = reason
            self._running[i] = False
        self._replace(w)

    def _kill_all(self) -> None:
        for actor in self.workers:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001, S110 - closing: nothing left to do
                pass

    def _split(self, indices: Sequence[int]) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for i in indices:
            out.setdefault(int(self._owner[i]), []).append(i)
        return out

    def _local(self, w: int, i: int) -> int:
        return i - self.slices[w].start

    def pids(self) -> list[int]:
        """The process id of each worker (for tests and monitoring)."""
        got = self._get({w: a.pid.remote() for w, a in enumerate(self.workers)})
        return [got[w] if not isinstance(got[w], _Dead) else -1 for w in range(len(self.workers))]

    def search_stats(self) -> SearchStats:
        """The workers' :class:`~hopgym.envs.vector.SearchStats`, summed (a replaced worker's
        counts are lost with it)."""
        got = self._get({w: a.search_stats.remote() for w, a in enumerate(self.workers)})
        total = SearchStats()
        for stats in got.values():
            if not isinstance(stats, _Dead):
                total = total + SearchStats(*stats)
        return total

    # ------------------------------------------------------------------ backend
    def _ended_by_error(self, reason: str, i: int) -> StepResult:
        last = "" if self.single_observation_space.contains("") else self._env_obs[i]
        return last, 0.0, False, True, {"worker_error": reason}

    def _backend_reset(
        self, indices: list[int], seeds: list[int | None], options: list[dict[str, Any] | None]
    ) -> list[ResetResult]:
        out: dict[int, ResetResult] = {}
        parts = self._split(indices)
        pos = {i: k for k, i in enumerate(indices)}
        for attempt in range(2):
            refs = {
                w: self.workers[w].reset.remote(
                    [self._local(w, i) for i in part],
                    [seeds[pos[i]] for i in part],
                    [options[pos[i]] for i in part],
                )
                for w, part in parts.items()
            }
            failed: dict[int, list[int]] = {}
            for w, got in self._get(refs).items():
                if isinstance(got, _Dead):
                    if attempt == 1:
                        raise WorkerError(f"reset failed twice: {got.reason}")
                    self._lose(w, got.reason)
                    failed[w] = parts[w]
                    continue
                out.update(zip(parts[w], got, strict=True))
            if not failed:
                break
            parts = failed
        for i, seed in zip(indices, seeds, strict=True):
            self._running[i] = True
            self._lost.pop(i, None)
            if seed is not None:
                self._last_seed[i] = int(seed)
        return [out[i] for i in indices]

    def _backend_step(
        self, indices: list[int], actions: list[Any], reset_first: list[int], reset_done: bool
    ) -> tuple[list[StepResult], dict[int, ResetResult]]:
        results: dict[int, StepResult] = {}
        resets: dict[int, ResetResult] = {}
        # Episodes of a replaced worker end now, without a call.
        lost = [i for i in indices if i in self._lost]
        for i in lost:
            results[i] = self._ended_by_error(self._lost.pop(i), i)
        action_of = dict(zip(indices, actions, strict=True))
        todo = [i for i in indices if i not in results]
        steps, firsts = self._split(todo), self._split(reset_first)
        refs = {}
        for w in sorted(set(steps) | set(firsts)):
            part, first = steps.get(w, []), firsts.get(w, [])
            refs[w] = self.workers[w].step.remote(
                [self._local(w, i) for i in part],
                [action_of[i] for i in part],
                [self._local(w, i) for i in first],
                reset_done,
            )
        need_reset: dict[int, list[int]] = {}  # worker -> sub-envs to reset on its replacement
        for w, got in self._get(refs).items():
            part, first = steps.get(w, []), firsts.get(w, [])
            if isinstance(got, _Dead):
                for i in part:
                    results[i] = self._ended_by_error(got.reason, i)
                self._lose(w, got.reason, ended_here=part)
                need_reset[w] = first + (part if reset_done else [])
                continue
            stepped, reset = got
            results.update(zip(part, stepped, strict=True))
            start = self.slices[w].start
            resets.update((start + local, value) for local, value in reset.items())
        if reset_done:  # episodes that ended here without a call (lost) restart too
            for i in lost:
                need_reset.setdefault(int(self._owner[i]), []).append(i)
        if need_reset:
            for i, value in zip(
                [i for part in need_reset.values() for i in part],
                self._reset_after_loss(need_reset),
                strict=True,
            ):
                resets[i] = value
        for i in indices:
            _, _, terminated, truncated, _ = results[i]
            self._running[i] = not (terminated or truncated) or i in resets
        for i in reset_first:
            self._running[i] = True
        return [results[i] for i in indices], resets

    def _reset_after_loss(self, parts: dict[int, list[int]]) -> list[ResetResult]:
        """Reset sub-envs of replaced workers (their seeds derived, see :meth:`_replace`)."""
        out = []
        for w, part in parts.items():
            if not part:
                continue
            got = self._get(
                {
                    w: self.workers[w].reset.remote(
                        [self._local(w, i) for i in part], [None] * len(part), [None] * len(part)
                    )
                }
            )[w]
            if isinstance(got, _Dead):
                raise WorkerError(f"the replacement of Ray env worker {w} failed: {got.reason}")
            out.extend(got)
        return out

    def _backend_call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        got = self._get({w: a.call.remote(name, args, kwargs) for w, a in enumerate(self.workers)})
        self._raise_dead(got, f"call({name!r})")
        return [x for w in range(len(self.workers)) for x in got[w]]

    def _backend_set_attr(self, name: str, values: list[Any]) -> None:
        got = self._get(
            {
                w: a.set_attr.remote(name, [values[i] for i in self.slices[w]])
                for w, a in enumerate(self.workers)
            }
        )
        self._raise_dead(got, f"set_attr({name!r})")

    def _raise_dead(self, got: dict[int, Any], what: str) -> None:
        dead = {w: x for w, x in got.items() if isinstance(x, _Dead)}
        for w, x in dead.items():
            self._lose(w, x.reason)
        if dead:
            reasons = "; ".join(x.reason for x in dead.values())
            raise WorkerError(f"{what} failed: {reasons} (replaced)")

    def _backend_close(self) -> None:
        refs = {w: a.close.remote() for w, a in enumerate(self.workers)}
        try:
            self._get(refs, min(self.timeout, 10.0))  # a hung worker is killed, not waited for
        finally:
            self._kill_all()
