"""The env server's sessions, metrics, wire format and WebSocket loop (see
:mod:`hopgym.integrations.openenv`, which documents the service).

Everything here runs on the server's event loop; each session's env runs in the shared worker
threads through :class:`~hopgym.envs.async_pool.AsyncEnv`, so a step never blocks the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from typing import Any

import gymnasium as gym

try:  # orjson (the openenv extra) writes and reads the wire's JSON several times faster than json
    import orjson

    _ORJSON_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS

    def _default(value: Any) -> Any:
        # What orjson cannot write itself, written as :func:`jsonable` writes it.
        if isinstance(value, (set, frozenset)):
            return sorted(jsonable(v) for v in value)
        if hasattr(value, "item") and not isinstance(value, type):  # numpy scalars
            return jsonable(value.item())
        return jsonable(value)

    def dumps(payload: Any) -> str:
        """``payload`` as JSON text: ``json.dumps(jsonable(payload), ensure_ascii=False)``."""
        return orjson.dumps(payload, default=_default, option=_ORJSON_OPTS).decode()

    def loads(text: str | bytes) -> Any:
        """JSON text as Python values (raises ``ValueError`` on bad JSON)."""
        return orjson.loads(text)

except ImportError:  # pragma: no cover - the openenv extra installs orjson

    def dumps(payload: Any) -> str:
        """``payload`` as JSON text: ``json.dumps(jsonable(payload), ensure_ascii=False)``."""
        return json.dumps(jsonable(payload), ensure_ascii=False)

    def loads(text: str | bytes) -> Any:
        """JSON text as Python values (raises ``ValueError`` on bad JSON)."""
        return json.loads(text)


from hopgym.corpora.types import Passage
from hopgym.envs.async_pool import AsyncEnv, StepBatcher
from hopgym.envs.options import EnvOptions
from hopgym.errors import HopgymError, InvalidOptionError, InvalidOptionTypeError
from hopgym.integrations._common import make_env

__all__ = [
    "CONTENT_TYPE",
    "EnvServerConfig",
    "EnvServerError",
    "Metrics",
    "Session",
    "Sessions",
    "jsonable",
    "dumps",
    "loads",
    "schemas",
    "serve_websocket",
]

#: The ``Content-Type`` of ``GET /metrics`` (Prometheus text format 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_SECONDS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_OPTION_NAMES = frozenset(f.name for f in dataclasses.fields(EnvOptions)) - {"render_mode"}
_RESET_KEYS = ("seed", "episode_id", "options", "env_options")


def _opt(default: Any, help: str, **meta: Any) -> Any:  # noqa: A002 - the metadata key is "help"
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class EnvServerConfig:
    """Options of the env server (``hopgym serve-env``), with one default each.

    Raises:
        hopgym.errors.InvalidOptionError: a bad value; the message names the field.

    Example:
        >>> EnvServerConfig(max_sessions=8).max_sessions
        8
        >>> EnvServerConfig(max_sessions=0)
        Traceback (most recent call last):
            ...
        hopgym.errors.InvalidOptionError: max_sessions must be >= 1, got 0
    """

    env: str = _opt("hopgym/Synthetic-v1", "Env id every session runs.", metavar="ID")
    kw: dict[str, Any] = field(
        default_factory=dict,
        metadata={
            "help": "Env keyword arguments (a world's, a dataset's, or any env option), read as "
            "Python literals where they parse; repeat or list several: --kw hops=3 --kw "
            "kinds=bridge. An env option given here cannot also be given as its own option."
        },
    )
    host: str = _opt("127.0.0.1", "Interface to listen on (0.0.0.0: every interface).")
    port: int = _opt(8000, "Port to listen on (0: any free port).", min=0)
    max_sessions: int = _opt(64, "Sessions open at once; one more gets 429.", min=1)
    session_timeout: float = _opt(300.0, "Seconds a session may stay idle before it is closed.", min=0)
    max_action_bytes: int = _opt(
        65536, "Largest request body or WebSocket message in bytes; larger gets 413.", min=1
    )
    session_options: bool = _opt(
        True, "Let reset choose env options for its session (reset data env_options)."
    )
    workers: int = _opt(8, "Threads that run the envs' steps (at most this many steps at once).", min=1)
    step_batch: int = _opt(
        16,
        "Most steps of different sessions run one after another in one worker-thread hop (the "
        "steps that arrive together share hops); 1: a hop per step (for slow, I/O-bound envs).",
        min=1,
    )
    ws_compression: bool = _opt(
        False, "Accept WebSocket permessage-deflate (costs CPU on both ends for small messages)."
    )
    shutdown_timeout: float = _opt(
        10.0, "Seconds a graceful shutdown waits for steps in flight before cutting them.", min=0
    )
    verbose: bool = _opt(False, "Log each request.")

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            low = f.metadata.get("min")
            if f.name in ("env", "host"):
                if not isinstance(value, str) or not value:
                    raise InvalidOptionTypeError(f"{f.name} must be a non-empty string, got {value!r}")
            elif f.name == "kw":
                if not isinstance(value, dict):
                    raise InvalidOptionTypeError(f"kw must be a dict, got {type(value).__name__}")
            elif isinstance(f.default, bool):
                if not isinstance(value, bool):
                    raise InvalidOptionTypeError(f"{f.name} must be a bool, got {value!r}")
            elif isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidOptionTypeError(f"{f.name} must be a number, got {value!r}")
            elif isinstance(f.default, int) and not isinstance(value, int):
                raise InvalidOptionTypeError(f"{f.name} must be an int, got {value!r}")
            elif not math.isfinite(value) or (low is not None and value < low):
                raise InvalidOptionError(f"{f.name} must be >= {low}, got {value!r}")

    def updated(self, **changes: Any) -> EnvServerConfig:
        """A copy with some fields replaced (checked again)."""
        unknown = sorted(set(changes) - {f.name for f in fields(self)})
        if unknown:
            raise InvalidOptionError(f"unknown EnvServerConfig fields {unknown}")
        return replace(self, **changes)

    @property
    def limits(self) -> dict[str, Any]:
        """The limits ``GET /health`` reports."""
        names = (
            "max_sessions",
            "session_timeout",
            "max_action_bytes",
            "workers",
            "step_batch",
            "session_options",
        )
        return {name: getattr(self, name) for name in names}


class EnvServerError(InvalidOptionError):
    """A request the env server refuses: ``status`` (HTTP), ``code`` (OpenEnv's WebSocket error
    code) and ``limit`` (the :class:`EnvServerConfig` field or request field that refused it)."""

    def __init__(self, status: int, code: str, message: str, limit: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.limit = status, code, message, limit

    def json(self) -> dict[str, Any]:
        """The error as the body of an HTTP reply (``error`` and ``limit``, as ``hopgym serve``)
        and as the ``data`` of a WebSocket error (``message`` and ``code``, as OpenEnv)."""
        return {
            "error": self.message,
            "message": self.message,
            "code": self.code,
            "status": self.status,
            "limit": self.limit,
        }


def _too_large(size: int, limit: int) -> EnvServerError:
    return EnvServerError(
        413,
        "ACTION_TOO_LARGE",
        f"the request has {size:,} bytes or more; the limit is {limit:,} (--max-action-bytes)",
        "max_action_bytes",
    )


class Metrics:
    """The server's Prometheus metrics (its own registry, so that servers in one process do
    not mix their counts).

    ``hopgym_env_sessions`` (gauge), ``hopgym_env_sessions_opened_total``,
    ``hopgym_env_sessions_closed_total{reason}`` (client, idle, shutdown, error),
    ``hopgym_env_resets_total``, ``hopgym_env_steps_total``, ``hopgym_env_episodes_total``
    (episodes that ended), ``hopgym_env_errors_total{code}``, ``hopgym_env_step_seconds``
    (histogram: a step in its worker thread, queueing included).
    """

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        reg: dict[str, Any] = {"registry": self.registry}
        self.sessions = Gauge("hopgym_env_sessions", "Sessions open", **reg)
        self.opened = Counter("hopgym_env_sessions_opened", "Sessions opened", **reg)
        self.closed = Counter("hopgym_env_sessions_closed", "Sessions closed, by reason", ["reason"], **reg)
        for reason in ("client", "idle", "shutdown", "error"):
            self.closed.labels(reason=reason)
        self.resets = Counter("hopgym_env_resets", "Resets", **reg)
        self.steps = Counter("hopgym_env_steps", "Steps", **reg)
        self.episodes = Counter("hopgym_env_episodes", "Episodes that ended", **reg)
        self.errors = Counter("hopgym_env_errors", "Requests refused, by code", ["code"], **reg)
        self.step_seconds = Histogram(
            "hopgym_env_step_seconds", "Time of one step (queueing included)", buckets=_SECONDS, **reg
        )
        self.counts = {"opened": 0, "closed": 0, "resets": 0, "steps": 0, "episodes": 0, "errors": 0}

    def error(self, code: str) -> None:
        self.errors.labels(code=code).inc()
        self.counts["errors"] += 1

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


def jsonable(value: Any) -> Any:
    """``value`` as JSON: a :class:`Passage` as its ``doc_id`` and ``title`` (its text is in
    the observation), dataclasses as dicts, tuples and sets as lists, anything else as text.

    Example:
        >>> jsonable({"ids": ("a", "b"), "documents": [Passage("a", "Oslo", "Oslo is ...")]})
        {'ids': ['a', 'b'], 'documents': [{'doc_id': 'a', 'title': 'Oslo'}]}
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, Passage):
        return {"doc_id": value.doc_id, "title": value.title}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return str(value)


def schemas() -> dict[str, Any]:
    """``GET /schema``: JSON schemas of the action, the observation and the state."""
    obj = {"type": "object"}
    return {
        "action": {
            **obj,
            "title": "HopgymAction",
            "properties": {
                "message": {"type": "string", "description": "one model turn, in the env's protocol"},
                "metadata": {"type": "object"},
            },
            "required": ["message"],
        },
        "observation": {
            **obj,
            "title": "HopgymObservation",
            "properties": {
                "text": {"type": "string", "description": "the text the env appends to the context"},
                "terminated": {"type": "boolean"},
                "truncated": {"type": "boolean"},
                "info": {"type": "object", "description": "the env's info, with reward_terms"},
            },
        },
        "state": {
            **obj,
            "title": "HopgymState",
            "properties": {
                "episode_id": {"type": ["string", "null"]},
                "step_count": {"type": "integer", "minimum": 0},
                "session_id": {"type": "string"},
                "env_id": {"type": "string"},
                "question_id": {"type": ["string", "null"]},
                "turn": {"type": "integer"},
                "done": {"type": "boolean"},
                "reward_total": {"type": "number"},
            },
        },
    }


@dataclasses.dataclass(eq=False)
class Session:
    """One client's env and its bookkeeping."""

    id: str
    transport: str
    env: AsyncEnv | None = None
    env_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    created: float = dataclasses.field(default_factory=time.monotonic)
    last_active: float = dataclasses.field(default_factory=time.monotonic)
    busy: int = 0
    step_count: int = 0
    episode_id: str | None = None
    reset_done: bool = False
    done: bool = False
    reward_total: float = 0.0
    websocket: Any = None
    closed: bool = False


class Sessions:
    """The sessions of one server: open, reset, step, state, close, and the idle reaper.

    Args:
        config: the server's options. The env id and options are checked here, by making one
            env (which also loads the env's task, shared by every later session).
    """

    def __init__(self, config: EnvServerConfig) -> None:
        self.config = config
        self.metrics = Metrics()
        self.sessions: dict[str, Session] = {}
        self.executor = ThreadPoolExecutor(config.workers, thread_name_prefix="hopgym-env-server")
        self.batcher = StepBatcher(self.executor, config.step_batch)
        self._reaper: asyncio.Task[None] | None = None
        self.started = time.time()
        self._make({}).close()  # fail now, naming the bad id or option, not at the first client

    # ------------------------------------------------------------------ envs
    def _make(self, env_options: dict[str, Any]) -> gym.Env[Any, Any]:
        try:  # make_env refuses an id that is not a hopgym text env (CartPole-v1), naming it
            return make_env(self.config.env, **{**self.config.kw, **env_options})
        except HopgymError:
            raise
        except (gym.error.Error, TypeError, ValueError) as exc:
            raise EnvServerError(400, "VALIDATION_ERROR", f"cannot make {self.config.env!r}: {exc}") from None

    def _env_options(self, raw: Any) -> dict[str, Any]:
        if raw is None:
            return {}
        if not self.config.session_options:
            raise EnvServerError(
                400,
                "VALIDATION_ERROR",
                "this server fixes the env options (--no-session-options): reset without env_options",
                "session_options",
            )
        if not isinstance(raw, dict):
            raise EnvServerError(400, "VALIDATION_ERROR", "env_options must be an object", "env_options")
        unknown = sorted(set(raw) - _OPTION_NAMES)
        if unknown:
            raise EnvServerError(
                400,
                "VALIDATION_ERROR",
                f"unknown env option(s) {unknown}: env_options takes {sorted(_OPTION_NAMES)}",
                "env_options",
            )
        return dict(raw)

    # ------------------------------------------------------------------ lifecycle
    def get(self, session_id: str) -> Session:
        """The open session ``session_id``.

        Raises:
            EnvServerError: 404, no such session (never opened, closed, or reaped).
        """
        session = self.sessions.get(session_id)
        if session is None or session.closed:
            raise EnvServerError(
                404,
                "SESSION_ERROR",
                f"unknown session {session_id!r:.80}: never opened, closed, or idle for over "
                f"{self.config.session_timeout:g} s (--session-timeout)",
                "session_id",
            )
        return session

    async def open(self, transport: str) -> Session:
        """A new session (its env is made at its first reset).

        Raises:
            EnvServerError: 429, ``max_sessions`` are open.
        """
        if len(self.sessions) >= self.config.max_sessions:
            raise EnvServerError(
                429,
                "CAPACITY_REACHED",
                f"{len(self.sessions)} sessions are open; the limit is {self.config.max_sessions} "
                "(--max-sessions): close one or retry later",
                "max_sessions",
            )
        session = Session(uuid.uuid4().hex, transport)
        self.sessions[session.id] = session
        self.metrics.opened.inc()
        self.metrics.counts["opened"] += 1
        self.metrics.sessions.set(len(self.sessions))
        return session

    async def close(self, session_id: str, reason: str) -> None:
        """Close a session and its env (idempotent)."""
        session = self.sessions.pop(session_id, None)
        if session is None or session.closed:
            return
        session.closed = True
        self.metrics.closed.labels(reason=reason).inc()
        self.metrics.counts["closed"] += 1
        self.metrics.sessions.set(len(self.sessions))
        if session.env is not None:
            try:
                await session.env.close()
            except Exception:  # noqa: BLE001, S110 - closing is best effort
                pass

    def start(self) -> None:
        """Start the idle reaper (on the running loop)."""
        if self._reaper is None:
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def shutdown(self) -> None:
        """Stop the reaper, close every session, shut the workers down."""
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None
        for sid in list(self.sessions):
            await self.close(sid, "shutdown")
        self.executor.shutdown(wait=False)

    async def _reap(self) -> None:
        timeout = self.config.session_timeout
        interval = min(max(timeout / 4, 0.02), 5.0)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for session in list(self.sessions.values()):
                if session.busy or now - session.last_active <= timeout:
                    continue
                await self.close(session.id, "idle")
                if session.websocket is not None:
                    err = EnvServerError(
                        404,
                        "SESSION_ERROR",
                        f"session closed: idle for over {timeout:g} s (--session-timeout)",
                        "session_timeout",
                    )
                    await _send_quietly(session.websocket, {"type": "error", "data": err.json()})
                    with _quiet():
                        await session.websocket.close(code=1001, reason="idle session closed")

    # ------------------------------------------------------------------ episodes
    async def reset(self, session: Session, data: dict[str, Any]) -> dict[str, Any]:
        """OpenEnv's reset: ``seed``, ``episode_id``, hopgym's ``options`` and ``env_options``."""
        extra = sorted(set(data) - set(_RESET_KEYS))
        if extra:
            raise EnvServerError(
                400, "VALIDATION_ERROR", f"reset takes {list(_RESET_KEYS)}, not {extra}", extra[0]
            )
        seed, options = data.get("seed"), data.get("options")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise EnvServerError(400, "VALIDATION_ERROR", f"seed must be an int >= 0, got {seed!r}", "seed")
        if options is not None and not isinstance(options, dict):
            raise EnvServerError(400, "VALIDATION_ERROR", "options must be an object", "options")
        env_options = self._env_options(data.get("env_options"))
        session.busy += 1
        try:
            if session.env is None or (env_options and env_options != session.env_kwargs):
                loop = asyncio.get_running_loop()
                env = await loop.run_in_executor(self.executor, self._make, env_options)
                if session.env is not None:
                    await session.env.close()
                session.env, session.env_kwargs = AsyncEnv(env, self.executor, self.batcher), env_options
            try:
                obs, info = await session.env.reset(seed=seed, options=options)
            except (HopgymError, KeyError, IndexError, ValueError) as exc:
                raise EnvServerError(400, "VALIDATION_ERROR", f"reset refused: {exc}", "options") from None
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
        session.episode_id = data.get("episode_id") or uuid.uuid4().hex
        session.step_count, session.done, session.reset_done, session.reward_total = 0, False, True, 0.0
        self.metrics.resets.inc()
        self.metrics.counts["resets"] += 1
        # info goes out as it is: :func:`dumps` writes it as jsonable() would, in one pass.
        observation = {"text": obs, "terminated": False, "truncated": False, "info": info}
        return {"observation": observation, "reward": None, "done": False}

    async def step(self, session: Session, action: Any) -> dict[str, Any]:
        """One turn. ``action`` is OpenEnv's action object: ``{"message": text}``; anything else
        reaches the env as it is and gets the env's corrective observation."""
        if not session.reset_done:
            raise EnvServerError(409, "EXECUTION_ERROR", "call reset before step", "reset")
        turn = action.get("message", action) if isinstance(action, dict) else action
        assert session.env is not None
        session.busy += 1
        started = time.perf_counter()
        try:
            obs, reward, terminated, truncated, info = await session.env.step(turn)
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
        self.metrics.step_seconds.observe(time.perf_counter() - started)
        self.metrics.steps.inc()
        self.metrics.counts["steps"] += 1
        done = bool(terminated or truncated)
        if done and not session.done:
            self.metrics.episodes.inc()
            self.metrics.counts["episodes"] += 1
        session.step_count += 1
        session.done = done
        session.reward_total += float(reward)
        observation = {
            "text": obs,
            "terminated": bool(terminated),
            "truncated": bool(truncated),
            "info": info,
        }
        return {"observation": observation, "reward": float(reward), "done": done}

    def state(self, session: Session) -> dict[str, Any]:
        """OpenEnv's ``State`` (``episode_id``, ``step_count``) and hopgym's fields."""
        unwrapped = session.env.unwrapped if session.env is not None else None
        sample = getattr(unwrapped, "sample", None)
        return {
            "episode_id": session.episode_id,
            "step_count": session.step_count,
            "session_id": session.id,
            "env_id": self.config.env,
            "question_id": getattr(sample, "id", None),
            "turn": getattr(unwrapped, "turn", 0),
            "done": session.done,
            "reward_total": session.reward_total,
        }

    def health(self) -> dict[str, Any]:
        """``GET /health``: OpenEnv's ``status``, and the sessions, limits and counts."""
        return {
            "status": "healthy",
            "env": self.config.env,
            "sessions": len(self.sessions),
            "sessions_by_transport": {
                t: sum(s.transport == t for s in self.sessions.values()) for t in ("ws", "http")
            },
            "limits": self.config.limits,
            "stats": dict(self.metrics.counts),
            "uptime_s": round(time.time() - self.started, 3),
        }


class _quiet:
    """Ignore the errors of writing to a connection that is already gone."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type | None, exc: BaseException | None, tb: Any) -> bool:
        return kind is not None and issubclass(kind, Exception)


async def _send_quietly(websocket: Any, payload: dict[str, Any]) -> bool:
    try:
        await websocket.send_text(dumps(payload))
        return True
    except Exception:  # noqa: BLE001 - the client went away
        return False


def _error(err: EnvServerError) -> dict[str, Any]:
    return {"type": "error", "data": err.json()}


async def serve_websocket(sessions: Sessions, websocket: Any) -> None:
    """OpenEnv's ``/ws`` protocol: one session per connection, closed when the connection ends."""
    from starlette.websockets import WebSocketDisconnect

    await websocket.accept()
    limit = sessions.config.max_action_bytes
    try:
        session = await sessions.open("ws")
    except EnvServerError as err:
        sessions.metrics.error(err.code)
        # Answer the client's first message (its reset): OpenEnv's client reads the error as the
        # reply and raises it, where a close before that would look like a network failure.
        with _quiet():
            await asyncio.wait_for(websocket.receive_text(), timeout=5.0)
        await _send_quietly(websocket, _error(err))
        with _quiet():
            await websocket.close(code=1013, reason="max_sessions")
        return
    session.websocket = websocket
    try:
        while True:
            raw = await websocket.receive_text()
            session.last_active = time.monotonic()
            try:
                if len(raw) > limit and len(raw.encode("utf-8")) > limit:
                    raise _too_large(len(raw.encode("utf-8")), limit)
                try:
                    message = loads(raw)
                except ValueError as exc:  # json's and orjson's decode errors are ValueErrors
                    raise EnvServerError(400, "INVALID_JSON", f"Invalid JSON: {exc}") from None
                kind = message.get("type") if isinstance(message, dict) else None
                data = message.get("data") if isinstance(message, dict) else None
                if kind == "reset":
                    reply = {"type": "observation", "data": await sessions.reset(session, data or {})}
                elif kind == "step":
                    reply = {"type": "observation", "data": await sessions.step(session, data)}
                elif kind == "state":
                    reply = {"type": "state", "data": sessions.state(session)}
                elif kind == "close":
                    break
                else:
                    raise EnvServerError(
                        400,
                        "UNKNOWN_TYPE",
                        f"Unknown message type: {kind!r:.40} (reset, step, state or close)",
                        "type",
                    )
            except EnvServerError as err:
                sessions.metrics.error(err.code)
                reply = _error(err)
            if session.closed or not await _send_quietly(websocket, reply):
                break
    except WebSocketDisconnect:
        pass
    except Exception:  # noqa: BLE001 - a broken connection: the session is closed below
        pass
    finally:
        reason = "idle" if session.closed else "client"
        await sessions.close(session.id, reason)
        with _quiet():
            await websocket.close()
