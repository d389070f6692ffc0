"""hopgym envs as an OpenEnv-compatible service (``hopgym serve-env``) and a typed OpenEnv client.

`OpenEnv <https://github.com/meta-pytorch/OpenEnv>`_ (``openenv-core``) serves environments over
HTTP and WebSocket to TRL and other trainers. This module serves any hopgym env id the way
OpenEnv's own server does, so that OpenEnv's clients (``GenericEnvClient``, a typed
``EnvClient``) drive it unchanged, and adds what a shared service needs: many sessions, limits
that answer with a 4xx naming the limit, idle sessions reaped, graceful shutdown, ``/health``
and ``/metrics``. hopgym owns the env, its rewards and its options; this module only translates.

Classes: :class:`EnvServerConfig` (every option, once), :class:`EnvServer` (uvicorn, in a thread
for tests and scripts, or until SIGTERM), :class:`EnvServerError`. Functions:
:func:`build_app` (the Starlette app), :func:`serve_env` (``hopgym serve-env``),
:func:`openenv_client` (OpenEnv's client, typed for hopgym). The sessions, metrics and wire format
are in :mod:`hopgym.integrations._env_sessions`.

The wire format (OpenEnv's, with hopgym's fields):

- **action** ``{"message": "<think>…</think><search>…</search>"}``: one model turn as text, as
  OpenEnv's text envs take it. Anything else (no ``message``, a number, a list) is handed to the
  env as it is, and the env answers with its corrective observation: nothing raises.
- **result** ``{"observation": {"text", "terminated", "truncated", "info"}, "reward", "done"}``:
  OpenEnv's ``StepResult`` fields; ``reward`` is the hopgym reward of the env's preset,
  ``info`` the env's ``info`` made JSON (the shown documents as ``doc_id``/``title``; the
  text is in ``text``), with ``info["reward_terms"]``.
- **state** ``{"episode_id", "step_count", "session_id", "env_id", "question_id", "turn",
  "done", "reward_total"}``.

Routes:

- ``WS /ws``: OpenEnv's session protocol, one session per connection: messages
  ``{"type": "reset", "data": {...}}``, ``{"type": "step", "data": action}``,
  ``{"type": "state"}``, ``{"type": "close"}``; replies ``{"type": "observation"|"state"|
  "error", "data": {...}}``. An error's ``data`` has OpenEnv's ``message`` and ``code`` plus
  ``status`` (the HTTP status it would have) and ``limit`` (the option that refused it).
  hopgym adds ``{"type": "batch", "data": [{"session": k, "type": "reset"|"step"|"state"|
  "close", "data": ...}, ...]}``: several sessions of the connection (slots ``k``, opened by
  their first reset) in one message, answered by ``{"type": "batch", "data": [reply, ...]}`` in
  the same order, each reply with its ``session``; their steps share worker-thread hops.
- ``POST /reset``, ``POST /step``, ``GET /state``: OpenEnv's HTTP routes, with sessions (OpenEnv's
  own HTTP routes make a throw-away env per request, which cannot hold a multi-turn episode):
  ``/reset`` without ``session_id`` opens a session and returns its ``session_id`` and
  ``session_token``; ``/step``, ``/state``, a later ``/reset`` and ``DELETE /sessions/{id}``
  (which closes it) name the session (in the body, the query or the ``X-Session-Id`` header)
  and show its token (in the body or the ``X-Session-Token`` header): a session answers only its
  creator (403 ``SESSION_FORBIDDEN`` otherwise), and a WebSocket session only its connection.
- ``GET /health`` (sessions, limits, counts), ``GET /metrics`` (Prometheus), ``GET /schema``,
  ``GET /metadata``.

``reset`` takes OpenEnv's ``seed`` and ``episode_id`` and hopgym's ``options``
(``{"question_id": ...}`` or ``{"index": i}``) and, unless the server forbids it, ``env_options``:
:class:`~hopgym.envs.options.EnvOptions` fields (``top_k``, ``max_turns``, ``reward``, ...) for
the session's own env, over the server's.

Limits (each an :class:`EnvServerConfig` field; HTTP status, or the WebSocket error's
``status``): more than ``max_sessions`` sessions ``429`` (``code`` ``CAPACITY_REACHED``);
an unknown or reaped session ``404``; a request or message over ``max_action_bytes`` ``413``
(the session stays open); a bad body ``400`` naming the field (``seed``, ``options.index``,
``env_options``, ``session_id``, JSON nested deeper than 32 levels...), and a reset refused
opens no session; a step slower than ``step_timeout`` ``504`` (its session is closed; the step,
the turn's parsing included, runs in a worker thread, so the loop answers the other sessions
meanwhile); a WebSocket that the server ends gets an error message and then a close code that
says why (``1013`` full, ``1003`` a binary frame that is not UTF-8, ``1008`` ``step_timeout``,
``1001`` idle, ``1011`` a server failure); a session idle for ``session_timeout`` seconds is closed (its
WebSocket gets an error naming ``session_timeout`` and a close). A client that vanishes
mid-episode loses its session at once over WebSocket, after ``session_timeout`` over HTTP.
SIGTERM/SIGINT: new connections are refused, open WebSockets are closed (code 1012), steps in
flight finish, every session's env is closed, and the process exits 0.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from functools import lru_cache
from typing import Any

from hopgym._uvicorn import UvicornServer, raise_open_files_limit
from hopgym.errors import DependencyNotInstalled
from hopgym.integrations._env_sessions import (
    EnvServerConfig,
    EnvServerError,
    ResetRequest,
    Session,
    Sessions,
    _too_large,
    parse_json,
)

__all__ = [
    "EnvServer",
    "EnvServerConfig",
    "EnvServerError",
    "build_app",
    "openenv_client",
    "serve_env",
]


def _require() -> None:
    from hopgym.retrieval.serving.app import require_serve_extra

    require_serve_extra()
    try:
        import websockets  # noqa: F401 - uvicorn's WebSocket protocol
    except ImportError:
        raise DependencyNotInstalled(
            "websockets is not installed: `hopgym serve-env` serves OpenEnv's WebSocket route; run "
            "`pip install 'hopgym[openenv]'`"
        ) from None


def build_app(sessions: Sessions) -> Any:
    """The Starlette app of the env server over ``sessions`` (which it starts and stops)."""
    _require()
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route, WebSocketRoute

    from hopgym.integrations._env_sessions import CONTENT_TYPE, dumps, schemas, serve_websocket

    cfg = sessions.config

    def reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Response:
        return Response(dumps(payload), status_code=status, headers=headers, media_type="application/json")

    def refuse(err: EnvServerError) -> Response:
        sessions.metrics.error(err.code)
        headers = {"Retry-After": "1"} if err.status == 429 else None
        if err.status == 413:
            headers = {"Connection": "close"}
        return reply(err.status, err.json(), headers)

    async def body_of(request: Request) -> dict[str, Any]:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > cfg.max_action_bytes:
            raise _too_large(int(length), cfg.max_action_bytes)
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > cfg.max_action_bytes:
                raise _too_large(len(raw), cfg.max_action_bytes)
        if not raw.strip():
            return {}
        data = parse_json(raw)  # 400 for bad JSON, bad UTF-8 or JSON nested too deep
        if not isinstance(data, dict):
            raise EnvServerError(400, "VALIDATION_ERROR", "the body must be a JSON object", "body")
        return data

    def session_of(request: Request, data: dict[str, Any]) -> Session:
        """The session a request names, if the request may drive it (its creator's token)."""
        sid = data.get("session_id")
        if sid is None:
            sid = request.query_params.get("session_id") or request.headers.get("x-session-id")
        if sid is None or sid == "":
            raise EnvServerError(
                400,
                "SESSION_ERROR",
                "this needs a session_id (from POST /reset) in the body, the query or X-Session-Id",
                "session_id",
            )
        token = data.get("session_token")
        if token is None:
            token = request.headers.get("x-session-token")
        return sessions.get(sid, token, "http")

    def with_session(session: Session) -> dict[str, str]:
        return {"X-Session-Id": session.id}

    async def reset(request: Request) -> Response:
        session: Session | None = None
        opened = False
        try:
            data = await body_of(request)
            given = (data.get("session_id"), request.query_params.get("session_id"))
            if any(v not in (None, "") for v in given) or request.headers.get("x-session-id"):
                session = session_of(request, data)  # a new episode in the caller's own session
            data.pop("session_id", None)
            data.pop("session_token", None)
            req = ResetRequest.parse(data)  # before a session is opened: a bad one leaves none
            if session is None:
                session = await sessions.open("http")
                opened = True
            result = await sessions.reset(session, req)
        except EnvServerError as err:
            if opened and session is not None:  # a session opened for a reset that failed is of no use
                await sessions.close(session.id, "error")
            return refuse(err)
        except BaseException:
            if opened and session is not None:
                await sessions.close(session.id, "error")
            raise
        body = {**result, "session_id": session.id, "session_token": session.token}
        return reply(200, body, {**with_session(session), "X-Session-Token": session.token})

    async def step(request: Request) -> Response:
        try:
            data = await body_of(request)
            session = session_of(request, data)
            result = await sessions.step(session, data.get("action", data.get("message")))
        except EnvServerError as err:
            return refuse(err)
        return reply(200, result, with_session(session))

    async def state(request: Request) -> Response:
        try:
            return reply(200, sessions.state(session_of(request, {})))
        except EnvServerError as err:
            return refuse(err)

    async def close(request: Request) -> Response:
        try:
            session = session_of(request, {"session_id": request.path_params["session_id"]})
        except EnvServerError as err:
            return refuse(err)
        await sessions.close(session.id, "client")
        return reply(200, {"session_id": session.id, "closed": True})

    async def health(request: Request) -> Response:
        return reply(200, sessions.health())

    async def metrics(request: Request) -> Response:
        return Response(sessions.metrics.render(), media_type=CONTENT_TYPE)

    async def schema(request: Request) -> Response:
        return reply(200, schemas())

    async def metadata(request: Request) -> Response:
        from hopgym import __version__

        return reply(
            200,
            {
                "name": cfg.env,
                "description": f"hopgym {cfg.env}: multi-hop question answering, one model turn per step",
                "version": __version__,
                "author": "hopgym",
                "documentation_url": None,
                "readme_content": None,
            },
        )

    async def ws(websocket: Any) -> None:
        await serve_websocket(sessions, websocket)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        routes = (
            "WS /ws, POST /reset, POST /step, GET /state, DELETE /sessions/{id}, GET /health, "
            "GET /metrics, GET /schema, GET /metadata"
        )
        what = "unknown path" if status == 404 else f"{request.method} is not allowed on"
        sessions.metrics.error("NOT_FOUND" if status == 404 else "METHOD_NOT_ALLOWED")
        return reply(status, {"error": f"{what} {request.url.path!r}: {routes}", "limit": None})

    async def crash(request: Request, exc: Exception) -> Response:
        sessions.metrics.error("INTERNAL_ERROR")
        return reply(500, {"error": f"{type(exc).__name__}: {exc}", "limit": None})

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        sessions.start()
        try:
            yield
        finally:
            await sessions.shutdown()

    routes = [
        WebSocketRoute("/ws", ws),
        Route("/reset", reset, methods=["POST"]),
        Route("/step", step, methods=["POST"]),
        Route("/state", state, methods=["GET"]),
        Route("/sessions/{session_id}", close, methods=["DELETE"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/schema", schema, methods=["GET"]),
        Route("/metadata", metadata, methods=["GET"]),
    ]
    return Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error, Exception: crash}
    )


class EnvServer(UvicornServer):
    """Serve a hopgym env id to OpenEnv clients (uvicorn): in a background thread (:meth:`start`,
    for tests, notebooks and scripts) or in this one until SIGTERM (:meth:`serve_forever`).

    Args:
        config: the options (defaults: :class:`EnvServerConfig`'s).
        **options: :class:`EnvServerConfig` fields that replace ``config``'s (``port=0``: any
            free port, see :attr:`url`).

    The env id and its options are checked, and one env is made, on construction, so a bad id
    or option fails here with hopgym's error naming it. The socket is bound on construction too.

    Example:
        >>> from hopgym.httpclient import HTTPClient
        >>> with EnvServer(env="hopgym/Tiny-v1", port=0).start() as srv:
        ...     http = HTTPClient(srv.url)
        ...     first = http.post_json("/reset", {"seed": 0})
        ...     turn = {"session_id": first["session_id"], "session_token": first["session_token"],
        ...             "action": {"message": "<answer>x</answer>"}}
        ...     http.post_json("/step", turn)["done"]
        True
    """

    def __init__(self, config: EnvServerConfig | None = None, **options: Any) -> None:
        _require()
        cfg = config or EnvServerConfig()
        self.config = cfg.updated(**options) if options else cfg
        self.sessions = Sessions(self.config)
        self.app = build_app(self.sessions)
        super().__init__(self.config.host, self.config.port, 2048, self.config.shutdown_timeout)

    what = "env server"

    def uvicorn_config(self) -> Any:
        """The ``uvicorn.Config`` of one run: WebSocket settings and the graceful-shutdown bound."""
        import uvicorn

        cfg = self.config
        return uvicorn.Config(
            self.app,
            host=cfg.host,
            port=cfg.port,
            ws="websockets-sansio",
            ws_per_message_deflate=cfg.ws_compression,
            # Messages up to 4x the limit (a batch: up to its own limit) reach the app, which
            # answers 413 and keeps the session; larger ones are cut by the protocol (close 1009).
            ws_max_size=max(4 * cfg.max_action_bytes, cfg.max_batch_bytes) + 65536,
            lifespan="on",
            log_config=None,
            access_log=cfg.verbose,
            # uvicorn's stub says int; it hands the value to asyncio.wait_for, which takes a float.
            timeout_graceful_shutdown=cfg.shutdown_timeout,  # type: ignore[arg-type]
            server_header=False,
        )


def serve_env(config: EnvServerConfig | None = None, **options: Any) -> None:
    """Serve ``config.env`` until SIGINT or SIGTERM (``hopgym serve-env``)."""
    srv = EnvServer(config, **options)
    raise_open_files_limit()
    if srv.config.verbose:
        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    print(
        f"hopgym: serving {srv.config.env} to OpenEnv clients at {srv.url} (WebSocket "
        f"{srv.url.replace('http', 'ws', 1)}/ws; Ctrl-C or SIGTERM to stop)",
        flush=True,
    )
    srv.serve_forever()
    print("hopgym: stopped", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------- the client
@lru_cache(maxsize=1)
def _client_class() -> type:
    try:
        from openenv.core.client_types import StepResult
        from openenv.core.env_client import EnvClient
    except ImportError:
        raise DependencyNotInstalled(
            "openenv-core is not installed: run `pip install 'hopgym[openenv]'`"
        ) from None

    class HopgymEnvClient(EnvClient):  # type: ignore[misc, type-arg]
        """OpenEnv's ``EnvClient`` for a hopgym env server: ``step`` takes a turn as text or a
        structured action (``Search("q")``), observations are the server's dicts."""

        def _step_payload(self, action: Any) -> dict[str, Any]:
            if isinstance(action, dict):
                return action
            if isinstance(action, str):
                return {"message": action}
            from hopgym.turns.registry import get_protocol

            protocol = get_protocol(getattr(self, "protocol", "tags"))
            return {"message": protocol.render(action)}

        def _parse_result(self, payload: dict[str, Any]) -> Any:
            return StepResult(
                observation=payload.get("observation", {}),
                reward=payload.get("reward"),
                done=payload.get("done", False),
            )

        def _parse_state(self, payload: dict[str, Any]) -> dict[str, Any]:
            return payload

    return HopgymEnvClient


def openenv_client(base_url: str, *, protocol: str = "tags", **kwargs: Any) -> Any:
    """OpenEnv's async ``EnvClient`` for a hopgym env server (``.sync()`` for the blocking one).

    Args:
        base_url: the server's URL (``http://host:port`` or ``ws://host:port``).
        protocol: how structured actions (``Search("q")``) are rendered to text: the server
            env's protocol.
        **kwargs: ``EnvClient`` arguments (``message_timeout_s``, ...).
    """
    client = _client_class()(base_url, **kwargs)
    client.protocol = protocol
    return client
