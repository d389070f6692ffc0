"""One place calls the engine: a queue of requests, answered in batched engine calls.

Classes: :class:`Batcher` (the uvicorn server's), :class:`Job`. Function: :func:`answer_jobs`
(the engine call itself, shared with the Ray Serve deployment's ``@serve.batch`` method).

Request handlers on the event loop only parse and queue; one worker task takes whatever is
waiting (up to ``max_batch`` queries) and hands it to a single engine thread as one
``search_batch_scored`` call. The engine is only ever called from that thread, so bm25s and FAISS
need no locks, the event loop never blocks on them, and concurrent clients share the encoder's
and FAISS's batch speed-up. A request with more than ``max_batch`` queries is cut into chunks, so
``max_batch`` bounds every engine call.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from hopgym.retrieval.base import Retriever, SearchHit
from hopgym.retrieval.hybrid import scored_search_batch
from hopgym.retrieval.serving.protocol import RequestError

__all__ = ["Batcher", "Job", "answer_jobs", "cache_stats", "chunks"]


@dataclass
class Job:
    """Queries of one request (or one chunk of it) with their ``topk``."""

    queries: list[str]
    topk: int
    future: Any = None
    queued_at: float = field(default_factory=time.perf_counter)


def chunks(queries: Sequence[str], size: int) -> list[list[str]]:
    """``queries`` cut into lists of at most ``size``.

    Example:
        >>> chunks(["a", "b", "c"], 2)
        [['a', 'b'], ['c']]
    """
    return [list(queries[i : i + size]) for i in range(0, len(queries), size)]


def cache_stats(retriever: Retriever) -> dict[str, int] | None:
    """The retriever's query-cache counters for ``GET /health`` (``None``: it has no cache)."""
    info = getattr(retriever, "cache_info", None)
    return info()._asdict() if info is not None else None


def answer_jobs(
    retriever: Retriever, jobs: Sequence[tuple[Sequence[str], int]]
) -> list[list[list[SearchHit]]]:
    """Answer several ``(queries, topk)`` jobs with one engine call.

    The engine is asked for the largest ``topk`` of the batch; each job gets its own cut. The
    retriever's query cache answers queries it has ranked before (a GRPO group's repeated
    queries from many clients), and a batch searches each distinct query once.
    """
    queries = [q for qs, _ in jobs for q in qs]
    if not queries:
        return [[] for _ in jobs]
    k = max(topk for _, topk in jobs)
    hits = scored_search_batch(retriever, queries, k, cached=True)
    out, off = [], 0
    for qs, topk in jobs:
        out.append([h[:topk] for h in hits[off : off + len(qs)]])
        off += len(qs)
    return out


class Batcher:
    """The uvicorn server's engine: a queue, one worker task, one engine thread.

    Args:
        retriever: the engine.
        cfg: a :class:`~hopgym.retrieval.serving.config.ServeConfig` (``max_batch``,
            ``max_wait_ms``, ``max_pending``, ``request_timeout``).
        metrics: a :class:`~hopgym.retrieval.serving.metrics.ServerMetrics`.

    Attributes:
        receiving: requests whose body is being read (the app counts them); a batch that is not
            full waits up to ``max_wait_ms`` for them, and only for them, so a lone client never
            waits.
    """

    def __init__(self, retriever: Retriever, cfg: Any, metrics: Any) -> None:
        self.retriever, self.cfg, self.metrics = retriever, cfg, metrics
        self.receiving = 0
        self.closing = False
        self._jobs: collections.deque[Job] = collections.deque()
        self._pending = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None

    @property
    def pending(self) -> int:
        """Queries waiting for the engine."""
        return self._pending

    async def start(self) -> None:
        """Start the worker on the running loop (the app's lifespan calls it)."""
        self.closing = False
        self._wake = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="hopgym-engine")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="hopgym-batcher")

    async def stop(self) -> None:
        """Refuse new work, fail what is still queued, stop the worker and the engine thread."""
        self.closing = True
        while self._jobs:
            job = self._jobs.popleft()
            if not job.future.done():
                job.future.set_exception(
                    RequestError("shutting_down", "the retrieval server is shutting down")
                )
        self._pending = 0
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    async def search(self, queries: list[str], topk: int) -> list[list[SearchHit]]:
        """Queue one request's queries and wait for their hits.

        Raises:
            RequestError: ``shutting_down``, ``overloaded`` (more than ``max_pending`` queries
                waiting), ``request_timeout`` or ``engine_error``.
        """
        if not queries:
            return []
        if self.closing or self._wake is None:
            raise RequestError("shutting_down", "the retrieval server is shutting down")
        cfg = self.cfg
        if self._pending + len(queries) > cfg.max_pending:
            raise RequestError(
                "overloaded",
                f"{self._pending} queries are waiting for the engine "
                f"(--max-pending {cfg.max_pending}): retry later",
                "max_pending",
            )
        loop = asyncio.get_running_loop()
        jobs = [Job(c, topk, loop.create_future()) for c in chunks(queries, cfg.max_batch)]
        self._jobs.extend(jobs)
        self._pending += len(queries)
        self.metrics.pending.set(self._pending)
        self._wake.set()
        # One timer for the request instead of wait_for and gather (a task and a future more
        # per request): it fails the jobs still waiting, which the worker then skips.
        timer = loop.call_later(cfg.request_timeout, self._expire, jobs)
        try:
            if len(jobs) == 1:
                return await jobs[0].future
            done = [await j.future for j in jobs]
        finally:
            timer.cancel()
        return [hits for part in done for hits in part]

    def _expire(self, jobs: list[Job]) -> None:
        err = RequestError(
            "request_timeout",
            f"no answer from the engine within {self.cfg.request_timeout} s (--request-timeout)",
            "request_timeout",
        )
        for j in jobs:
            if not j.future.done():
                j.future.set_exception(err)

    def _take(self, room: int) -> list[Job]:
        """Jobs from the queue while they fit in ``room`` queries (the first always fits)."""
        out: list[Job] = []
        n = 0
        while self._jobs:
            job = self._jobs[0]
            if job.future.done():  # its request timed out or went away
                self._jobs.popleft()
                self._pending -= len(job.queries)
                continue
            if out and n + len(job.queries) > room:
                break
            self._jobs.popleft()
            self._pending -= len(job.queries)
            out.append(job)
            n += len(job.queries)
        return out

    async def _run(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        cfg = self.cfg
        while True:
            while not self._jobs:
                self._wake.clear()
                await self._wake.wait()
            batch = self._take(cfg.max_batch)
            n = sum(len(j.queries) for j in batch)
            if cfg.max_wait_ms > 0 and n < cfg.max_batch and self.receiving > 0:
                deadline = loop.time() + cfg.max_wait_ms / 1000.0
                while n < cfg.max_batch and self.receiving > 0:
                    left = deadline - loop.time()
                    if left <= 0:
                        break
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), left)
                    except asyncio.TimeoutError:
                        break
                    if self._jobs and n + len(self._jobs[0].queries) > cfg.max_batch:
                        break  # the next request does not fit: it starts the next batch
                    more = self._take(cfg.max_batch - n)
                    batch += more
                    n += sum(len(j.queries) for j in more)
            self.metrics.pending.set(self._pending)
            if not batch:
                continue
            started = time.perf_counter()
            try:
                hits = await loop.run_in_executor(
                    self._executor, answer_jobs, self.retriever, [(j.queries, j.topk) for j in batch]
                )
            except asyncio.CancelledError:  # stopped mid-call: its requests are told
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(
                            RequestError("shutting_down", "the retrieval server is shutting down")
                        )
                raise
            except Exception as exc:  # noqa: BLE001 - every waiting request is told
                err = RequestError("engine_error", f"the engine failed: {type(exc).__name__}: {exc}")
                for j in batch:
                    if not j.future.done():
                        j.future.set_exception(err)
                continue
            engine_s = time.perf_counter() - started
            for j, h in zip(batch, hits, strict=True):
                if not j.future.done():
                    j.future.set_result(h)
            self.metrics.batch(n, len(batch), [started - j.queued_at for j in batch], engine_s)
