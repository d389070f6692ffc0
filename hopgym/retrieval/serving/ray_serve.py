"""The same retrieval app on Ray Serve: ``hopgym serve --ray --replicas N [--ray-address ADDR]``.

Functions: :func:`deploy` (start the deployment, return its URL), :func:`undeploy` (drain it,
then delete it), :func:`serve_ray` (``hopgym serve --ray``: deploy, wait for SIGINT/SIGTERM,
undeploy), :func:`replica_class`.

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

Shutdown (:func:`undeploy`) drains before it deletes, because Ray Serve's proxy keeps accepting
requests while an application is deleted and answers them ``404 Path '/retrieve' not found``:

1. a drain signal (a small Ray actor that :func:`deploy` starts, owned by the deploying process)
   tells every replica to refuse new requests with ``503`` (``Retry-After: 1``, ``Connection:
   close``, error kind ``shutting_down``), which a client with another URL retries there at once;
2. each replica answers the requests it had already taken, then says so (at most
   ``shutdown_timeout`` seconds);
3. with a Ray started here (``hopgym serve --ray`` without ``--ray-address``), the proxies are
   stopped, so new connections are refused, and only then is Serve shut down: no client ever
   sees the 404. On a cluster the proxy is shared with other applications and stays up: the
   application is deleted after the drain, and requests that still reach it get the proxy's
   404, which :class:`~hopgym.retrieval.http.HTTPRetriever` also fails over.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
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
#: The name and namespace of the drain signal actor (see the module docstring).
DRAIN_ACTOR = (APP_NAME + "-drain", "hopgym")
_CLASS: Any = None
_SIGNAL_CLASS: Any = None
_SIGNAL: Any = None  # the deploying process's handle: a non-detached actor lives while it does


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


def _signal_class() -> Any:
    """The drain signal's actor class (built once, as :func:`replica_class` is)."""
    global _SIGNAL_CLASS
    if _SIGNAL_CLASS is not None:
        return _SIGNAL_CLASS
    ray, _ = _ray()

    class DrainSignal:
        """Tells the replicas to stop taking requests, and hears when each has answered its own."""

        def __init__(self) -> None:
            self._drain = asyncio.Event()
            self._finished: set[str] = set()

        async def wait(self) -> bool:
            """Return once :meth:`drain` is called (each replica waits on it)."""
            await self._drain.wait()
            return True

        async def drain(self) -> None:
            self._drain.set()

        async def finished(self, replica: str | None = None) -> int:
            """Record that ``replica`` has no request left; the number of replicas that have."""
            if replica is not None:
                self._finished.add(replica)
            return len(self._finished)

    _SIGNAL_CLASS = ray.remote(num_cpus=0)(DrainSignal)
    return _SIGNAL_CLASS


class _RefuseWhileDraining:
    """ASGI middleware of a replica: once the replica drains, every new request gets a ``503``
    (``Retry-After: 1``, ``Connection: close``); requests taken before are counted in
    ``replica.in_flight`` until they are answered."""

    def __init__(self, app: Any, replica: Any) -> None:
        self.app, self.replica = app, replica

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        replica = self.replica
        if replica.draining:
            from hopgym.retrieval.serving.app import _send_json
            from hopgym.retrieval.serving.protocol import error_json

            replica.metrics.error("shutting_down")
            await _send_json(
                send,
                503,
                error_json("the retrieval server is shutting down: send the request elsewhere"),
                {"Retry-After": "1", "Connection": "close"},
            )
            return
        replica.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            replica.in_flight -= 1


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
            self.in_flight = 0  # requests taken and not yet answered (see _RefuseWhileDraining)
            self.draining = False
            self.metrics = ServerMetrics(manifest.num_passages)
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="hopgym-engine")
            self._batched.set_max_batch_size(cfg.max_batch)
            self._batched.set_batch_wait_timeout_s(cfg.max_wait_ms / 1000.0)
            try:
                self.replica = serve.get_replica_context().replica_id.unique_id
            except Exception:  # noqa: BLE001 - only for /health
                self.replica = str(os.getpid())
            self._app = build_app(self, cfg, self.metrics, self._info)
            self._app.add_middleware(_RefuseWhileDraining, replica=self)
            self._watch_drain_signal()

        def __serve_build_asgi_app__(self) -> Any:
            return self._app

        def _watch_drain_signal(self) -> None:
            ray, _ = _ray()
            try:
                drain = ray.get_actor(DRAIN_ACTOR[0], namespace=DRAIN_ACTOR[1])
            except ValueError:  # deployed by other means than deploy(): nothing to wait for
                return

            def on_drain(future: Any) -> None:
                # Runs in a Ray thread. A signal whose owner died raises here: keep serving.
                if future.cancelled() or future.exception() is not None:
                    return
                self.draining = True
                threading.Thread(target=self._finish, args=(drain,), daemon=True).start()

            drain.wait.remote().future().add_done_callback(on_drain)

        def _finish(self, drain: Any) -> None:
            deadline = time.monotonic() + self.cfg.shutdown_timeout
            while self.in_flight > 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            drain.finished.remote(self.replica)

        def _info(self) -> dict[str, Any]:
            return {
                "passages": len(getattr(self.retriever, "passages", ())),  # as app.py's /health
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
    assert cfg.index is not None  # deploy() refused a config without one
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
    global _SIGNAL
    _SIGNAL = (
        _signal_class().options(name=DRAIN_ACTOR[0], namespace=DRAIN_ACTOR[1], get_if_exists=True).remote()
    )
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


def undeploy(shutdown: bool = False, timeout: float = 5.0, url: str | None = None) -> None:
    """Drain the deployment, then delete it; with ``shutdown``, stop Serve and disconnect from Ray
    too (the order is the module docstring's).

    Args:
        shutdown: stop the proxies (new connections are refused), Serve and this process's Ray
            after the drain; only for a Ray this process started, whose proxies nobody else uses.
        timeout: seconds to wait for the replicas to answer the requests they had taken (each
            also gives up after its ``shutdown_timeout``).
        url: what :func:`deploy` returned; with ``shutdown``, Serve is shut down once it refuses
            connections.
    """
    ray, serve = _ray()
    if not ray.is_initialized():
        return
    drain = _drain(ray, timeout)
    if shutdown:
        _stop_proxies(ray, url)
        serve.shutdown()
        ray.shutdown()
        return
    try:
        serve.delete(APP_NAME)
    except Exception:  # noqa: BLE001 - already gone
        pass
    if drain is not None:  # a later deploy() starts a fresh signal
        ray.kill(drain)
    global _SIGNAL
    _SIGNAL = None


def _drain(ray: Any, timeout: float) -> Any:
    """Signal the replicas to refuse new requests, and wait until each has answered those it
    took; return the signal actor (``None`` without one)."""
    try:
        drain = ray.get_actor(DRAIN_ACTOR[0], namespace=DRAIN_ACTOR[1])
    except ValueError:
        return None
    replicas = _replica_count()
    deadline = time.monotonic() + timeout
    try:
        ray.get(drain.drain.remote(), timeout=timeout)
        while time.monotonic() < deadline:
            if ray.get(drain.finished.remote(), timeout=timeout) >= replicas:
                break
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - the signal is gone: nothing left to wait for
        return None
    # A replica's last replies still cross the proxy on their way to the clients.
    time.sleep(0.25)
    return drain


def _replica_count() -> int:
    """The running replicas of the deployment (0 when Serve cannot say)."""
    _, serve = _ray()
    try:
        app = serve.status().applications[APP_NAME]
        return sum(
            n
            for d in app.deployments.values()
            for state, n in d.replica_states.items()
            if getattr(state, "value", state) == "RUNNING"
        )
    except Exception:  # noqa: BLE001 - no application, or a Serve without these fields
        return 0


def _stop_proxies(ray: Any, url: str | None) -> None:
    """Kill Ray Serve's HTTP proxies and wait until ``url`` refuses connections: Serve's own
    shutdown deletes the applications while the proxies still accept requests (and answer 404)."""
    from urllib.parse import urlsplit

    from ray.util import list_named_actors

    for actor in list_named_actors(all_namespaces=True):
        if actor["namespace"] == "serve" and actor["name"].startswith("SERVE_PROXY_ACTOR"):
            try:
                ray.kill(ray.get_actor(actor["name"], namespace="serve"), no_restart=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
    if url is None:
        return
    where = urlsplit(url)
    if where.port is None:  # deploy()'s URLs name one; port 0 (as before) would refuse at once
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((where.hostname, where.port), timeout=0.5).close()
        except OSError:
            return
        time.sleep(0.05)


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
        undeploy(shutdown=started_here, timeout=cfg.shutdown_timeout + 2, url=url)
