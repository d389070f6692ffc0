"""The same retrieval app on Ray Serve: ``hopgym serve --ray --replicas N [--ray-address ADDR]``.

Functions: :func:`deploy` (start the deployment, return its URL), :func:`undeploy`,
:func:`serve_ray` (``hopgym serve --ray``: deploy, wait for SIGINT/SIGTERM, undeploy),
:func:`replica_class`.

Each replica is a Ray Serve deployment replica that loads the index itself (memory-mapped:
replicas on one node share the bm25s arrays and the FAISS file through the page cache, though
each holds its own copy of the passages' text) and serves the Starlette app of
:func:`~hopgym.retrieval.serving.app.build_app` (same routes, limits, errors and metrics as the
uvicorn server). Batching is Ray Serve's ``@serve.batch`` on the replica, sized in queries
(``max_batch``, ``batch_size_fn``) with ``max_wait_ms`` as its wait; the engine call itself runs
in one engine thread per replica, as in the uvicorn server. Ray Serve's HTTP proxy (one per node)
receives the requests and spreads them over the replicas; when a replica dies, Serve starts
another, and requests it held fail with a 5xx, which :class:`~hopgym.retrieval.http.HTTPRetriever`
retries.

Differences from the uvicorn server: connections are Ray's proxy's (its own keep-alive and
timeouts; hopgym's ``read_timeout``, ``max_header_bytes`` and ``backlog`` guards live in
hopgym's protocol class and do not apply there); a request waits in Ray's queue, bounded by
``max_pending`` requests (not queries); ``GET /metrics`` and ``GET /health`` describe the
replica that answers (Ray exports cluster-wide ``ray_serve_*`` metrics itself).
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from typing import Any

from hopgym.errors import DependencyNotInstalled, InvalidOptionError
from hopgym.retrieval.serving.batching import answer_jobs, cache_stats, chunks
from hopgym.retrieval.serving.config import ServeConfig

__all__ = ["APP_NAME", "deploy", "undeploy", "serve_ray", "replica_class"]

#: The Ray Serve application name of the retrieval deployment.
APP_NAME = "hopgym-retrieval"
_CLASS: Any = None


def _ray() -> tuple[Any, Any]:
    try:
        import ray
        from ray import serve
    except ImportError:
        raise DependencyNotInstalled(
            "ray[serve] is not installed: `hopgym serve --ray` runs on "
            "Ray Serve; run `pip install 'hopgym[ray]'`"
        ) from None
    return ray, serve


def _queries_in(jobs: list[tuple[list[str], int]]) -> int:
    return sum(len(q) for q, _ in jobs)


def replica_class() -> Any:
    """The Ray Serve deployment class (built once, on first use, so that importing this module
    needs no Ray)."""
    global _CLASS
    if _CLASS is not None:
        return _CLASS
    _, serve = _ray()

    class RetrievalReplica:
        """One replica: the index, an engine thread, ``@serve.batch`` and the shared app."""

        def __init__(self, options: dict[str, Any]) -> None:
            from hopgym.retrieval.serving.app import build_app, load_served_index
            from hopgym.retrieval.serving.metrics import ServerMetrics

            cfg = ServeConfig(**options)
            self.cfg = cfg
            self.retriever, manifest = load_served_index(cfg)
            self.kind = manifest.retriever
            self.receiving = 0
            self.metrics = ServerMetrics(manifest.num_passages)
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="hopgym-engine")
            self._batched.set_max_batch_size(cfg.max_batch)
            self._batched.set_batch_wait_timeout_s(cfg.max_wait_ms / 1000.0)
            try:
                self.replica = serve.get_replica_context().replica_id.unique_id
            except Exception:  # noqa: BLE001 - only for /health
                self.replica = str(os.getpid())
            self._app = build_app(self, cfg, self.metrics, self._info)

        def __serve_build_asgi_app__(self) -> Any:
            return self._app

        def _info(self) -> dict[str, Any]:
            return {
                "passages": len(self.retriever.passages),
                "retriever": self.kind,
                "default_topk": self.cfg.topk,
                "server": "ray-serve",
                "replica": self.replica,
                "pid": os.getpid(),
                "query_cache": cache_stats(self.retriever),
            }

        async def search(self, queries: list[str], topk: int) -> list[Any]:
            from hopgym.retrieval.serving.protocol import RequestError

            if not queries:
                return []
            try:
                parts = await asyncio.wait_for(
                    asyncio.gather(*(self._batched((c, topk)) for c in chunks(queries, self.cfg.max_batch))),
                    self.cfg.request_timeout,
                )
            except asyncio.TimeoutError:
                raise RequestError(
                    "request_timeout",
                    f"no answer from the engine within {self.cfg.request_timeout} s (--request-timeout)",
                    "request_timeout",
                ) from None
            except RequestError:
                raise
            except Exception as exc:  # noqa: BLE001 - the engine failed: a 500 naming it
                raise RequestError(
                    "engine_error", f"the engine failed: {type(exc).__name__}: {exc}"
                ) from None
            return [hits for part in parts for hits in part]

        @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.002, batch_size_fn=_queries_in)
        async def _batched(self, jobs: list[tuple[list[str], int]]) -> list[Any]:
            started = time.perf_counter()
            out = await asyncio.get_running_loop().run_in_executor(
                self._executor, answer_jobs, self.retriever, jobs
            )
            self.metrics.batch(_queries_in(jobs), len(jobs), [], time.perf_counter() - started)
            return out

    _CLASS = serve.deployment(serve.ingress()(RetrievalReplica))
    return _CLASS


def _absolute(cfg: ServeConfig) -> ServeConfig:
    """Paths as every replica (on any node, in any working directory) reads them."""
    return replace(
        cfg,
        index=os.path.abspath(cfg.index) if cfg.index else None,
        corpus=os.path.abspath(cfg.corpus) if cfg.corpus else None,
    )


def _check_index(cfg: ServeConfig) -> Any:
    """Verify (or rebuild) the index once, on the driver, before replicas load it."""
    from hopgym.retrieval.index_store import read_manifest, verify_index

    if cfg.rebuild:
        from hopgym.retrieval.serving.app import load_served_index

        return load_served_index(cfg)[1]
    manifest = read_manifest(cfg.index)
    if manifest.files:
        verify_index(cfg.index, cfg.verify, manifest)
    return manifest


def deploy(config: ServeConfig | None = None, **options: Any) -> str:
    """Deploy the index of ``config`` on Ray Serve and return the HTTP URL that serves it.

    Joins the Ray cluster at ``ray_address``, or the one this process already joined; without
    either it starts a new local Ray (``address="local"``: never a cluster some other process
    started on this machine). Replicas load the index with ``verify`` (after the driver has
    checked it, or rebuilt it with ``rebuild``).
    """
    cfg = config or ServeConfig(ray=True)
    cfg = cfg.updated(**options) if options else cfg
    if cfg.index is None:
        raise InvalidOptionError("serve needs an index directory (--index DIR)")
    cfg = _absolute(replace(cfg, ray=True))
    ray, serve = _ray()
    _check_index(cfg)
    if not ray.is_initialized():
        ray.init(address=cfg.ray_address or "local", log_to_driver=cfg.verbose)
    serve.start(http_options={"host": cfg.host, "port": cfg.port})
    deployment = replica_class().options(
        name="RetrievalReplica",
        num_replicas=cfg.replicas,
        ray_actor_options={
            "num_cpus": cfg.threads or 1,
            "num_gpus": 1 if cfg.device.startswith("cuda") else 0,
        },
        max_ongoing_requests=max(2 * cfg.max_batch, 8),
        max_queued_requests=cfg.max_pending,
        graceful_shutdown_timeout_s=cfg.shutdown_timeout,
    )
    replica_cfg = asdict(replace(cfg, rebuild=False))
    serve.run(deployment.bind(replica_cfg), name=APP_NAME, route_prefix="/", blocking=False)
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::") else cfg.host
    return f"http://{host}:{cfg.port}"


def undeploy(shutdown: bool = False) -> None:
    """Delete the deployment; with ``shutdown``, stop Serve and disconnect from Ray too."""
    ray, serve = _ray()
    if not ray.is_initialized():
        return
    try:
        serve.delete(APP_NAME)
    except Exception:  # noqa: BLE001 - already gone
        pass
    if shutdown:
        serve.shutdown()
        ray.shutdown()


def serve_ray(cfg: ServeConfig) -> None:
    """``hopgym serve --ray``: deploy, print the URL, wait for SIGINT/SIGTERM, undeploy.

    A local Ray started here is shut down on exit; on a cluster (``ray_address``) only the
    application is deleted.
    """
    ray, _ = _ray()
    started_here = cfg.ray_address is None and not ray.is_initialized()
    url = deploy(cfg)
    stop = threading.Event()
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        where = ray.get_runtime_context().gcs_address
        print(
            f"hopgym: serving {cfg.index} on Ray Serve with {cfg.replicas} replica(s) at "
            f"{url}/retrieve, Ray at {where} (Ctrl-C or SIGTERM to stop)",
            flush=True,
        )
        while not stop.wait(0.5):
            pass
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        undeploy(shutdown=started_here)
