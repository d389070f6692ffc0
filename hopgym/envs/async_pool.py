"""The async face of hopgym envs: :class:`AsyncEnv` (one env) and :class:`AsyncEnvPool` (many).

Async trainers (SkyRL, verifiers, rLLM, TRL's async GRPO) drive environments from one event loop.
A plain ``env.step`` there blocks the loop for the whole search, and every other episode waits.
``await AsyncEnv.step(action)`` runs the very same ``env.step``, the whole wrapper stack
included (``TimeLimit``, the reward wrappers), in a worker thread and leaves the loop free.

Why threads and not a second copy of the logic (an ``astep`` on ``MultiHopQAEnv``): the step is
defined once, by the env and its wrappers, so the rewards and the transcript of an async episode
are those of a sequential one by construction; an ``astep`` on the unwrapped env would skip the
reward wrappers. The workers are a thread pool shared by the envs of a pool (its size bounds how
many steps run at once); the envs of one task share one index, and the retrievers and their query
caches are thread-safe. Calls on one env are serialised by a lock, so an episode's steps keep
their order even when a caller forgets to await one before sending the next.

Example:
    >>> import asyncio
    >>> import gymnasium as gym
    >>> import hopgym
    >>> from hopgym.envs.async_pool import AsyncEnv
    >>> async def episode():
    ...     async with AsyncEnv(gym.make("hopgym/Tiny-v1")) as env:
    ...         obs, info = await env.reset(seed=0)
    ...         return await env.step("<answer>no idea</answer>")
    >>> obs, reward, terminated, truncated, info = asyncio.run(episode())
    >>> terminated, reward
    (True, 0.0)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import gymnasium as gym

from hopgym.envs.vector import StepResult
from hopgym.errors import InvalidOptionError, InvalidOptionTypeError

__all__ = ["AsyncEnv", "AsyncEnvPool", "StepBatcher", "StepResult"]

_T = TypeVar("_T")


class StepBatcher:
    """Runs the steps that many envs ask for in the same event-loop iteration in one worker-thread
    hop (up to ``max_batch`` steps a hop, one after another), instead of one hop each.

    A hop costs a thread switch and a fight for the GIL with the loop; when a step is a fraction of
    a millisecond (hopgym's BM25 search), that overhead is most of the time, and 64 sessions'
    steps in 64 threads fight each other too. Batched, a served step costs about what an
    in-process one does. A slow step (an HTTP retriever) delays the others of its batch: use a
    small ``max_batch`` (1: one hop per step) for such envs.

    Args:
        executor: the worker threads the batches run in.
        max_batch: most steps in one hop.
    """

    def __init__(self, executor: ThreadPoolExecutor, max_batch: int = 16) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise InvalidOptionError(f"max_batch must be a positive int, got {max_batch!r}")
        self.executor = executor
        self.max_batch = max_batch
        self._pending: list[tuple[gym.Env[Any, Any], Any, asyncio.Future[StepResult]]] = []
        self._scheduled = False

    async def step(self, env: gym.Env[Any, Any], action: Any) -> StepResult:
        """``env.step(action)`` in the next batch's worker thread."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[StepResult] = loop.create_future()
        self._pending.append((env, action, future))
        if not self._scheduled:
            # Flush once the loop has read every message of this iteration: they share the hops.
            self._scheduled = True
            loop.call_soon(self._flush)
        return await future

    def _flush(self) -> None:
        batch, self._pending, self._scheduled = self._pending, [], False
        for start in range(0, len(batch), self.max_batch):
            chunk = batch[start : start + self.max_batch]
            done = asyncio.wrap_future(self.executor.submit(_run_steps, [(e, a) for e, a, _ in chunk]))
            done.add_done_callback(functools.partial(_deliver, chunk))


def _run_steps(steps: list[tuple[gym.Env[Any, Any], Any]]) -> list[tuple[bool, Any]]:
    out: list[tuple[bool, Any]] = []
    for env, action in steps:
        try:
            out.append((True, env.step(action)))
        except BaseException as exc:  # noqa: BLE001 - handed to the step's caller, raised there
            out.append((False, exc))
    return out


def _deliver(chunk: list[tuple[Any, Any, asyncio.Future[StepResult]]], done: asyncio.Future[Any]) -> None:
    if done.cancelled() or done.exception() is not None:
        for *_, future in chunk:
            if not future.done():
                future.set_exception(done.exception() or asyncio.CancelledError())
        return
    for (*_, future), (ok, value) in zip(chunk, done.result(), strict=True):
        if future.done():  # its caller went away
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


class AsyncEnv:
    """One Gymnasium env behind ``await``: :meth:`reset`, :meth:`step` and :meth:`close` run the
    env's own methods in a worker thread.

    Args:
        env: any ``gym.Env`` (usually from ``gym.make``, wrappers included).
        executor: the worker threads; ``None``: a private pool of one thread, shut down by
            :meth:`close`.
        batcher: a :class:`StepBatcher` that :meth:`step` goes through (its steps share worker
            hops with other envs' steps); ``None``: one hop per step.

    Attributes:
        env: the wrapped env (call its other methods directly, on the loop: they are cheap).
    """

    def __init__(
        self,
        env: gym.Env[Any, Any],
        executor: ThreadPoolExecutor | None = None,
        batcher: StepBatcher | None = None,
    ) -> None:
        if not isinstance(env, gym.Env):
            raise InvalidOptionTypeError(f"AsyncEnv wraps a gymnasium.Env, got {type(env).__name__}")
        self.env = env
        self.batcher = batcher
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix="hopgym-env")
        self._lock = asyncio.Lock()
        self.closed = False

    async def _run(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        loop = asyncio.get_running_loop()
        async with self._lock:
            return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    async def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """``env.reset(seed=seed, options=options)`` in a worker thread."""
        return await self._run(self.env.reset, seed=seed, options=options)

    async def step(self, action: Any) -> StepResult:
        """``env.step(action)`` in a worker thread (a malformed action gets the env's corrective
        observation, as in a plain step)."""
        if self.batcher is None:
            return await self._run(self.env.step, action)
        async with self._lock:
            return await self.batcher.step(self.env, action)

    async def close(self) -> None:
        """Close the env (in its worker thread) and, if it owns one, its thread pool; idempotent."""
        if self.closed:
            return
        self.closed = True
        try:
            await self._run(self.env.close)
        finally:
            if self._own_executor:
                self._executor.shutdown(wait=False)

    @property
    def unwrapped(self) -> gym.Env[Any, Any]:
        """The innermost env (``env.unwrapped``)."""
        return self.env.unwrapped

    async def __aenter__(self) -> AsyncEnv:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncEnvPool:
    """``num_envs`` :class:`AsyncEnv` s over one thread pool: many concurrent episodes on one
    event loop, at most ``max_workers`` steps running at once.

    Args:
        env_fn: makes one env (``lambda: gym.make("hopgym/Synthetic-v1")``), or an env id for
            ``gym.make`` with ``**kwargs``.
        num_envs: how many envs.
        max_workers: the worker threads (default: ``min(num_envs, 32)``).
        **kwargs: ``gym.make`` keyword arguments when ``env_fn`` is an id.

    Example:
        >>> import asyncio
        >>> import hopgym
        >>> async def run():
        ...     async with AsyncEnvPool("hopgym/Tiny-v1", 4) as pool:
        ...         firsts = await asyncio.gather(*(env.reset(seed=i) for i, env in enumerate(pool)))
        ...         return len(firsts)
        >>> asyncio.run(run())
        4
    """

    def __init__(
        self,
        env_fn: Callable[[], gym.Env[Any, Any]] | str,
        num_envs: int,
        *,
        max_workers: int | None = None,
        **kwargs: Any,
    ) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise InvalidOptionError(f"num_envs must be a positive int, got {num_envs!r}")
        if max_workers is not None and (isinstance(max_workers, bool) or max_workers < 1):
            raise InvalidOptionError(f"max_workers must be a positive int, got {max_workers!r}")
        if isinstance(env_fn, str):
            env_id = env_fn

            def make() -> gym.Env[Any, Any]:
                return gym.make(env_id, **kwargs)

            env_fn = make
        elif kwargs:
            raise InvalidOptionError(f"keyword arguments {sorted(kwargs)} go with an env id, not an env_fn")
        self.executor = ThreadPoolExecutor(
            max_workers or min(num_envs, 32), thread_name_prefix="hopgym-env-pool"
        )
        self.envs = [AsyncEnv(env_fn(), self.executor) for _ in range(num_envs)]

    def __len__(self) -> int:
        return len(self.envs)

    def __iter__(self) -> Iterator[AsyncEnv]:
        return iter(self.envs)

    def __getitem__(self, i: int) -> AsyncEnv:
        return self.envs[i]

    async def close(self) -> None:
        """Close every env, then the thread pool."""
        try:
            await asyncio.gather(*(env.close() for env in self.envs))
        finally:
            self.executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncEnvPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
