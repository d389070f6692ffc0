"""The env server's sessions, metrics, wire format and WebSocket loop (see
:mod:`hopgym.integrations.openenv`, which documents the service).

Everything here runs on the server's event loop; each session's env runs in the shared worker
threads (through :class:`~hopgym.envs.async_pool.AsyncEnv`, or, for a ``batch`` message,
:meth:`Sessions.run_many`), so a step never blocks the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hmac
import json
import math
import secrets
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from typing import Any

import gymnasium as gym

try:  # orjson (the openenv extra) writes and reads the wire's JSON several times faster than json
    import orjson

    _ORJSON_OPTS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS

    def _default(value: Any) -> Any:
        # What orjson cannot write itself, written as :func:`jsonable` writes it.
        if type(value) is Passage:  # the shown documents: the most common by far
            return {"doc_id": value.doc_id, "title": value.title}
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
    "ResetRequest",
    "Session",
    "Sessions",
    "check_depth",
    "parse_json",
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
_timeout = getattr(asyncio, "timeout", None)
#: How deep a request's JSON may nest (objects and lists); deeper is refused with 400.
MAX_DEPTH = 32
#: Longest ``session_id``, ``session_token`` or ``episode_id`` a request may give.
MAX_ID_CHARS = 256
#: WebSocket close codes: why the server closed a connection (RFC 6455, 7.4.1).
WS_UNSUPPORTED_DATA = 1003  # a binary frame that is not UTF-8 JSON
WS_POLICY = 1008  # the session was closed by a limit (step_timeout)
WS_INTERNAL = 1011  # the server failed
WS_TRY_LATER = 1013  # max_sessions


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
    max_batch_bytes: int = _opt(
        1048576,
        "Largest WebSocket batch message (several sessions' turns in one message) in bytes; "
        "each of its turns is still held to --max-action-bytes. Larger gets 413.",
        min=1,
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
    step_timeout: float = _opt(
        30.0,
        "Seconds one step may take (its turn's parsing and search, in a worker thread); a slower "
        "step answers 504 naming step_timeout and its session is closed.",
        min=0.001,
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
            "max_batch_bytes",
            "workers",
            "step_batch",
            "session_options",
            "step_timeout",
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


def _too_large(size: int, limit: int, name: str = "max_action_bytes") -> EnvServerError:
    flag = "--" + name.replace("_", "-")
    return EnvServerError(
        413,
        "ACTION_TOO_LARGE",
        f"the request has {size:,} bytes or more; the limit is {limit:,} ({flag})",
        name,
    )


def _bad(field_name: str, message: str, code: str = "VALIDATION_ERROR") -> EnvServerError:
    return EnvServerError(400, code, message, field_name)


def check_depth(value: Any, limit: int = MAX_DEPTH) -> None:
    """Refuse JSON that nests deeper than ``limit`` (a loop, no recursion: any depth is safe).

    Raises:
        EnvServerError: 400 ``INVALID_JSON`` naming the limit.
    """
    if not isinstance(value, (dict, list)):
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise _bad("body", f"the JSON nests deeper than {limit} levels", "INVALID_JSON")
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


def parse_json(raw: str | bytes) -> Any:
    """A request body or WebSocket message as Python values, its nesting checked.

    Raises:
        EnvServerError: 400 ``INVALID_JSON`` (not JSON, not UTF-8, or nested too deep).
    """
    try:
        value = loads(raw)
    except RecursionError:
        raise _bad("body", f"the JSON nests deeper than {MAX_DEPTH} levels", "INVALID_JSON") from None
    except ValueError as exc:  # json's and orjson's decode errors (bad UTF-8 too) are ValueErrors
        if "depth" in str(exc) or "recursion" in str(exc).lower():  # orjson stops at 1,024 levels
            raise _bad("body", f"the JSON nests deeper than {MAX_DEPTH} levels", "INVALID_JSON") from None
        raise _bad("body", f"Invalid JSON: {exc}", "INVALID_JSON") from None
    # Fewer opening brackets than the limit cannot nest deeper than it (most messages): no walk.
    if isinstance(raw, bytes):
        opened = raw.count(b"{") + raw.count(b"[")
    else:
        opened = raw.count("{") + raw.count("[")
    if opened > MAX_DEPTH:
        check_depth(value)
    return value


def _id(value: Any, name: str) -> str | None:
    """A ``session_id``, ``session_token`` or ``episode_id`` from a request: a string or absent."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _bad(name, f"{name} must be a string, got {type(value).__name__}")
    if len(value) > MAX_ID_CHARS:
        raise _bad(name, f"{name} is longer than {MAX_ID_CHARS} characters")
    return value


@dataclass(frozen=True)
class ResetRequest:
    """A reset's arguments, checked before any session is opened (so a bad one leaves none)."""

    seed: int | None
    episode_id: str | None
    options: dict[str, Any] | None
    env_options: dict[str, Any] | None

    @classmethod
    def parse(cls, data: Any) -> ResetRequest:
        """Check a reset's ``data`` (``seed``, ``episode_id``, ``options``, ``env_options``).

        Raises:
            EnvServerError: 400 naming the field.

        Example:
            >>> ResetRequest.parse({"seed": 1, "options": {"index": 2}}).options
            {'index': 2}
            >>> ResetRequest.parse({"options": {"index": [2]}})
            Traceback (most recent call last):
                ...
            hopgym.integrations._env_sessions.EnvServerError: options.index must be an int >= 0, got a list
        """
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise _bad("data", f"reset data must be an object, got {type(data).__name__}")
        extra = sorted(set(data) - set(_RESET_KEYS))
        if extra:
            raise _bad(
                str(extra[0])[:40], f"reset takes {list(_RESET_KEYS)}, not {[str(e)[:40] for e in extra]}"
            )
        seed, options, env_options = data.get("seed"), data.get("options"), data.get("env_options")
        if seed is not None and (
            isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63
        ):
            raise _bad("seed", f"seed must be an int >= 0, got {seed!r:.40}")
        if options is not None:
            if not isinstance(options, dict):
                raise _bad("options", f"options must be an object, got {type(options).__name__}")
            index = options.get("index")
            if index is not None and (isinstance(index, bool) or not isinstance(index, int) or index < 0):
                what = f"a {type(index).__name__}" if not isinstance(index, int) else repr(index)
                raise _bad("options.index", f"options.index must be an int >= 0, got {what}")
            qid = options.get("question_id")
            if qid is not None and (isinstance(qid, bool) or not isinstance(qid, (str, int))):
                raise _bad(
                    "options.question_id",
                    f"options.question_id must be a string, got {type(qid).__name__}",
                )
        if env_options is not None:
            if not isinstance(env_options, dict):
                raise _bad("env_options", f"env_options must be an object, got {type(env_options).__name__}")
            unknown = sorted(set(env_options) - _OPTION_NAMES)
            if unknown:
                raise _bad(
                    "env_options",
                    f"unknown env option(s) {unknown}: env_options takes {sorted(_OPTION_NAMES)}",
                )
        return cls(seed, _id(data.get("episode_id"), "episode_id"), options, env_options)


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

    def add(self, tally: dict[str, int]) -> None:
        """Count ``tally``'s ``steps``, ``episodes`` and ``resets`` at once (one lock each)."""
        for name, n in tally.items():
            if n:
                getattr(self, name).inc(n)
                self.counts[name] += n

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
    #: The secret an HTTP client shows with each request after its reset (the session's creator
    #: holds it; a session id seen elsewhere, in a log or a state reply, is not enough).
    token: str = dataclasses.field(default_factory=lambda: secrets.token_urlsafe(24))
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
        # Envs of the server's own options left by closed sessions, reused by new ones: making an
        # env (its wrappers, its task lookup) for every connection costs more than an episode.
        self._spare: list[AsyncEnv] = []
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

    def _make_for(self, env_options: dict[str, Any]) -> gym.Env[Any, Any]:
        """The env of a session with its ``env_options`` (in a worker thread)."""
        try:
            return self._make(env_options)
        except EnvServerError as err:
            if env_options:
                err.limit = "env_options"
            raise
        except (HopgymError, TypeError, ValueError) as exc:  # a bad value of a known option
            if not env_options:
                raise
            raise _bad("env_options", f"env_options: {exc}") from None

    # ------------------------------------------------------------------ lifecycle
    def get(self, session_id: Any, token: Any = None, transport: str | None = None) -> Session:
        """The open session ``session_id``, for a request that came over ``transport``.

        A session answers only its creator: over HTTP the request must show the session's
        ``token`` (``transport="http"``); a WebSocket session is driven over its own connection
        and never over HTTP. ``transport=None`` (the server itself) checks neither.

        Raises:
            EnvServerError: 400, an id that is not a string; 404, no such session (never
                opened, closed, or reaped); 403, the wrong or no token, or a WebSocket session
                asked for over HTTP.
        """
        sid = _id(session_id, "session_id")
        session = self.sessions.get(sid) if sid is not None else None
        if session is None or session.closed:
            raise EnvServerError(
                404,
                "SESSION_ERROR",
                f"unknown session {sid!r:.80}: never opened, closed, or idle for over "
                f"{self.config.session_timeout:g} s (--session-timeout)",
                "session_id",
            )
        if transport == "http":
            if session.transport != "http":
                raise EnvServerError(
                    403,
                    "SESSION_FORBIDDEN",
                    f"session {sid!r:.80} belongs to a WebSocket connection: drive it over that "
                    "connection, not over HTTP",
                    "session_id",
                )
            shown = _id(token, "session_token")
            if shown is None or not hmac.compare_digest(shown, session.token):
                raise EnvServerError(
                    403,
                    "SESSION_FORBIDDEN",
                    f"session {sid!r:.80} needs the session_token its reset returned (in the body "
                    "or the X-Session-Token header)",
                    "session_token",
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
        env = session.env
        if env is None:
            return
        if (
            reason in ("client", "idle")
            and not session.env_kwargs
            and len(self._spare) < self.config.max_sessions
        ):
            self._spare.append(env)  # whole: the next session's first reset starts it afresh
            return
        try:
            await env.close()
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
        spare, self._spare = self._spare, []
        for env in spare:
            try:
                await env.close()
            except Exception:  # noqa: BLE001, S110 - closing is best effort
                pass
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
    async def reset(self, session: Session, request: ResetRequest) -> dict[str, Any]:
        """OpenEnv's reset: ``seed``, ``episode_id``, hopgym's ``options`` and ``env_options``
        (checked by :meth:`ResetRequest.parse`)."""
        env_options = request.env_options or {}
        if env_options and not self.config.session_options:
            raise EnvServerError(
                400,
                "VALIDATION_ERROR",
                "this server fixes the env options (--no-session-options): reset without env_options",
                "session_options",
            )
        session.busy += 1
        try:
            if session.env is None and not env_options and self._spare:
                session.env, session.env_kwargs = self._spare.pop(), {}
            if session.env is None or (env_options and env_options != session.env_kwargs):
                loop = asyncio.get_running_loop()
                env = await loop.run_in_executor(self.executor, self._make_for, env_options)
                if session.env is not None:
                    await session.env.close()
                session.env, session.env_kwargs = AsyncEnv(env, self.executor, self.batcher), env_options
            try:
                obs, info = await session.env.reset(seed=request.seed, options=request.options)
            except (HopgymError, KeyError, IndexError, ValueError, TypeError) as exc:
                # A reset that raised leaves the env half reset (Gymnasium's env checker then
                # fails the next step): the next reset makes a new one.
                env_now, session.env, session.reset_done = session.env, None, False
                await env_now.close()
                raise _bad("options", f"reset refused: {exc}") from None
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
        return self._after_reset(session, request, obs, info)

    def _after_reset(
        self,
        session: Session,
        request: ResetRequest,
        obs: Any,
        info: Any,
        tally: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """The reset's reply, and its count in the metrics (or in ``tally``, counted later)."""
        session.episode_id = request.episode_id or uuid.uuid4().hex
        session.step_count, session.done, session.reset_done, session.reward_total = 0, False, True, 0.0
        if tally is None:
            self.metrics.add({"resets": 1})
        else:
            tally["resets"] += 1
        # info goes out as it is: :func:`dumps` writes it as jsonable() would, in one pass.
        observation = {"text": obs, "terminated": False, "truncated": False, "info": info}
        return {"observation": observation, "reward": None, "done": False}

    def _step_timeout(self) -> EnvServerError:
        return EnvServerError(
            504,
            "STEP_TIMEOUT",
            f"the step took over {self.config.step_timeout:g} s (--step-timeout); the session is closed",
            "step_timeout",
        )

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
            # The step (the turn's parsing and its search) runs in a worker thread; the loop
            # waits at most step_timeout for it and answers the other sessions meanwhile.
            if _timeout is not None:  # Python 3.11+: a timer, no task per step
                async with _timeout(self.config.step_timeout):
                    obs, reward, terminated, truncated, info = await session.env.step(turn)
            else:
                obs, reward, terminated, truncated, info = await asyncio.wait_for(
                    session.env.step(turn), self.config.step_timeout
                )
        except asyncio.TimeoutError:
            # The worker may still be in the step: the env's state is unknown, so the session ends.
            await self.close(session.id, "error")
            raise self._step_timeout() from None
        finally:
            session.busy -= 1
            session.last_active = time.monotonic()
        self.metrics.step_seconds.observe(time.perf_counter() - started)
        return self._after_step(session, obs, reward, terminated, truncated, info)

    def _after_step(
        self,
        session: Session,
        obs: Any,
        reward: Any,
        terminated: Any,
        truncated: Any,
        info: Any,
        tally: dict[str, int] | None = None,
    ) -> dict[str, Any]:
        """The step's reply, and its counts in the metrics (or in ``tally``, counted later)."""
        done = bool(terminated or truncated)
        ended = done and not session.done
        if tally is None:
            self.metrics.add({"steps": 1, "episodes": int(ended)})
        else:
            tally["steps"] += 1
            tally["episodes"] += ended
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

    async def run_many(self, calls: list[tuple[Session, str, Any]]) -> list[dict[str, Any] | EnvServerError]:
        """Resets and steps of several sessions (``(session, "reset", ResetRequest)`` or
        ``(session, "step", action)``), run in worker-thread hops of up to ``step_batch`` calls
        each, one after another in a hop, without a task, a lock or a timer per call: what a
        ``batch`` message costs is then mostly its env calls. A reset whose session has no env
        yet (or asks for other ``env_options``) goes through :meth:`reset`.

        Each call waits at most ``step_timeout`` from the start; a call not done by then gets
        504 and its session is closed (the calls after it in its hop are not started).
        Returns, in order, each call's reply data or its error.
        """
        out: list[dict[str, Any] | EnvServerError | None] = [None] * len(calls)
        direct: list[int] = []
        slow: list[int] = []
        for i, (session, kind, arg) in enumerate(calls):
            if kind == "reset":
                options = arg.env_options or {}
                if options and not self.config.session_options:
                    out[i] = EnvServerError(
                        400,
                        "VALIDATION_ERROR",
                        "this server fixes the env options (--no-session-options): reset without env_options",
                        "session_options",
                    )
                elif session.env is None and not options and self._spare:
                    session.env, session.env_kwargs = self._spare.pop(), {}
                    direct.append(i)
                elif session.env is None or (options and options != session.env_kwargs):
                    slow.append(i)
                else:
                    direct.append(i)
            elif not session.reset_done:
                out[i] = EnvServerError(409, "EXECUTION_ERROR", "call reset before step", "reset")
            else:
                direct.append(i)

        async def one_slow(i: int) -> None:
            session, _, request = calls[i]
            try:
                out[i] = await self.reset(session, request)
            except EnvServerError as err:
                out[i] = err

        pending = [one_slow(i) for i in slow]
        if direct:
            pending.append(self._run_direct([(i, *calls[i]) for i in direct], out))
        if pending:
            await asyncio.gather(*pending)
        assert all(reply is not None for reply in out)
        return out  # type: ignore[return-value]

    async def _run_direct(
        self, calls: list[tuple[int, Session, str, Any]], out: list[dict[str, Any] | EnvServerError | None]
    ) -> None:
        size = self.config.step_batch
        chunks = [calls[k : k + size] for k in range(0, len(calls), size)]
        results: list[list[tuple[bool, Any] | None]] = [[None] * len(c) for c in chunks]
        stop = [False]
        for session in {id(c[1]): c[1] for c in calls}.values():
            session.busy += 1
        started = time.perf_counter()
        try:
            work = []
            for chunk, into in zip(chunks, results, strict=True):
                jobs = [_job(session, kind, arg) for _, session, kind, arg in chunk]
                work.append(asyncio.wrap_future(self.executor.submit(_run_calls, jobs, into, stop)))
            _, late = await asyncio.wait(work, timeout=self.config.step_timeout)
            stop[0] = bool(late)  # the calls not yet started in a late hop are not started
        finally:
            for session in {id(c[1]): c[1] for c in calls}.values():
                session.busy -= 1
                session.last_active = time.monotonic()
        elapsed = time.perf_counter() - started
        tally = {"steps": 0, "episodes": 0, "resets": 0}
        try:
            await self._answer(chunks, results, elapsed, tally, out)
        finally:
            self.metrics.add(tally)

    async def _answer(
        self,
        chunks: list[list[tuple[int, Session, str, Any]]],
        results: list[list[tuple[bool, Any] | None]],
        elapsed: float,
        tally: dict[str, int],
        out: list[dict[str, Any] | EnvServerError | None],
    ) -> None:
        """Each call's reply (or error) from what its hop left in ``results``."""
        for chunk, into in zip(chunks, results, strict=True):
            for (i, session, kind, arg), result in zip(chunk, into, strict=True):
                if result is None:  # not done within step_timeout: the env's state is unknown
                    await self.close(session.id, "error")
                    out[i] = self._step_timeout()
                    continue
                ok, value = result
                if kind == "reset":
                    if ok:
                        obs, info = value
                        out[i] = self._after_reset(session, arg, obs, info, tally)
                        continue
                    env, session.env, session.reset_done = session.env, None, False
                    if env is not None:
                        await env.close()
                    if isinstance(value, (HopgymError, KeyError, IndexError, ValueError, TypeError)):
                        out[i] = _bad("options", f"reset refused: {value}")
                        continue
                elif ok:
                    self.metrics.step_seconds.observe(elapsed)
                    obs, reward, terminated, truncated, info = value
                    out[i] = self._after_step(session, obs, reward, terminated, truncated, info, tally)
                    continue
                # The env failed: its session ends, the batch's other calls stand.
                await self.close(session.id, "error")
                out[i] = EnvServerError(500, "INTERNAL_ERROR", f"{type(value).__name__}: {value}"[:500])

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


def _job(session: Session, kind: str, arg: Any) -> Callable[[], Any]:
    assert session.env is not None  # run_many gave every call an env
    env = session.env.env
    if kind == "reset":
        return functools.partial(env.reset, seed=arg.seed, options=arg.options)
    return functools.partial(env.step, arg.get("message", arg) if isinstance(arg, dict) else arg)


def _run_calls(jobs: list[Callable[[], Any]], into: list[Any], stop: list[bool]) -> None:
    """Run env calls one after another in a worker thread (``into[i]``: ``(ok, result or
    exception)``), stopping early once ``stop[0]`` is set (the loop stopped waiting)."""
    for i, job in enumerate(jobs):
        if stop[0]:
            return
        try:
            into[i] = (True, job())
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, which answers for it
            into[i] = (False, exc)


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


async def _receive(websocket: Any) -> str | bytes | None:
    """The next message's text (or bytes, for a binary frame); ``None`` when the client left."""
    message = await websocket.receive()
    if message["type"] == "websocket.disconnect":
        return None
    text = message.get("text")
    return text if text is not None else message.get("bytes") or b""


def _size(raw: str | bytes) -> int:
    return len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8"))


def _unknown_type(kind: Any) -> EnvServerError:
    return EnvServerError(
        400,
        "UNKNOWN_TYPE",
        f"Unknown message type: {str(kind)[:40]!r} (reset, step, state, close or batch)",
        "type",
    )


async def _session_message(sessions: Sessions, session: Session, kind: Any, data: Any) -> dict[str, Any]:
    """The reply to one ``reset``, ``step`` or ``state`` message of ``session``."""
    if kind == "reset":
        request = ResetRequest.parse(data)
        return {"type": "observation", "data": await sessions.reset(session, request)}
    if kind == "step":
        return {"type": "observation", "data": await sessions.step(session, data)}
    if kind == "state":
        return {"type": "state", "data": sessions.state(session)}
    raise _unknown_type(kind)


class _Connection:
    """The sessions of one WebSocket connection: slot 0 is the one opened with the connection
    (the one plain messages drive), the others are opened by a ``batch`` message's first
    ``reset`` of their slot. Slots are the connection's own: no other client can name them."""

    def __init__(self, sessions: Sessions, first: Session) -> None:
        self.sessions = sessions
        self.slots: dict[int, Session] = {0: first}

    def touch(self) -> None:
        """A message came: none of this connection's sessions is idle."""
        now = time.monotonic()
        for session in self.slots.values():
            session.last_active = now

    async def close_all(self, reason: str) -> None:
        slots, self.slots = self.slots, {}
        for session in slots.values():
            await self.sessions.close(session.id, reason)

    async def batch(self, items: Any) -> dict[str, Any]:
        """The reply to a ``batch`` message: one reply per item, in their order, each with its
        ``session``; the items run at once (their steps share worker hops)."""
        cap = self.sessions.config.max_sessions
        if not isinstance(items, list):
            raise _bad("data", f"a batch's data must be a list of messages, got {type(items).__name__}")
        if len(items) > cap:
            raise _bad("data", f"a batch holds at most {cap} messages (--max-sessions), got {len(items)}")
        seen: set[int] = set()
        checked: list[tuple[int, Any, Any] | EnvServerError] = []
        for i, item in enumerate(items):
            where = f"data[{i}]"
            if not isinstance(item, dict):
                checked.append(_bad(where, f"{where} must be an object, got {type(item).__name__}"))
                continue
            slot = item.get("session", 0)
            if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < cap:
                checked.append(
                    _bad(f"{where}.session", f"{where}.session must be an int in [0, {cap}) (--max-sessions)")
                )
                continue
            if slot in seen:
                checked.append(_bad(f"{where}.session", f"session {slot} appears twice in one batch"))
                continue
            seen.add(slot)
            checked.append((slot, item.get("type"), item.get("data")))
        replies: list[dict[str, Any]] = [{} for _ in checked]
        calls: list[tuple[Session, str, Any]] = []
        placed: list[tuple[int, int, bool]] = []  # (item, slot, whether its session opened here)
        for i, entry in enumerate(checked):
            if isinstance(entry, EnvServerError):
                self.sessions.metrics.error(entry.code)
                replies[i] = _error(entry)
                continue
            slot, kind, data = entry
            try:
                replies[i] = {"session": slot, **await self._plan(slot, kind, data, calls, placed, i)}
            except EnvServerError as err:
                self.sessions.metrics.error(err.code)
                replies[i] = {"session": slot, **_error(err)}
        results = await self.sessions.run_many(calls) if calls else []
        for (i, slot, opened), (session, _, _), result in zip(placed, calls, results, strict=True):
            if isinstance(result, EnvServerError):
                # A session opened for a reset that failed is of no use; one closed by
                # step_timeout is gone (the next reset of its slot opens another).
                if opened or session.closed:
                    if self.slots.get(slot) is session:
                        del self.slots[slot]
                    await self.sessions.close(session.id, "error")
                self.sessions.metrics.error(result.code)
                replies[i] = {"session": slot, **_error(result)}
            else:
                replies[i] = {"session": slot, "type": "observation", "data": result}
        return {"type": "batch", "data": replies}

    async def _plan(
        self,
        slot: int,
        kind: Any,
        data: Any,
        calls: list[tuple[Session, str, Any]],
        placed: list[tuple[int, int, bool]],
        i: int,
    ) -> dict[str, Any]:
        """Answer a ``close`` or ``state`` item now; add a ``reset`` or ``step`` to ``calls``
        (and return ``{}``: its reply comes from the run)."""
        session = self.slots.get(slot)
        if session is not None and session.closed:  # reaped or closed by step_timeout
            del self.slots[slot]
            session = None
        if kind == "close":
            if session is not None:
                del self.slots[slot]
                await self.sessions.close(session.id, "client")
            return {"type": "closed", "data": {}}
        if kind not in ("reset", "step", "state"):
            raise _unknown_type(kind)
        request = ResetRequest.parse(data) if kind == "reset" else None  # before a session opens
        limit = self.sessions.config.max_action_bytes
        if kind == "step":  # each turn of a batch is held to the limit of a message of its own
            turn = data.get("message") if isinstance(data, dict) and len(data) == 1 else None
            if not isinstance(turn, str) or len(turn) > limit // 4:  # 4: most bytes a character takes
                size = len(dumps(data).encode("utf-8"))
                if size > limit:
                    raise _too_large(size, limit)
        opened = False
        if session is None:
            if kind != "reset":
                raise EnvServerError(
                    404,
                    "SESSION_ERROR",
                    f"session {slot} is not open on this connection (never reset, closed, or closed "
                    "by a limit): reset it first",
                    "session",
                )
            session = self.slots[slot] = await self.sessions.open("ws")
            opened = True
        if kind == "state":
            return {"type": "state", "data": self.sessions.state(session)}
        calls.append((session, kind, request if kind == "reset" else data))
        placed.append((i, slot, opened))
        return {}


async def serve_websocket(sessions: Sessions, websocket: Any) -> None:
    """OpenEnv's ``/ws`` protocol: one session per connection, closed when the connection ends;
    and hopgym's ``batch`` message, which drives several sessions of the connection at once.

    A refused message gets an error reply and the connection stays open; when the server ends the
    connection it sends an error message first and then a close code that says why:
    ``1013`` (``max_sessions``), ``1003`` (a binary frame that is not UTF-8 text), ``1008`` (the
    session was closed by ``step_timeout``), ``1001`` (idle past ``session_timeout``), ``1011``
    (the server failed). A binary frame holding UTF-8 JSON is read as a text one.
    """
    await websocket.accept()
    cfg = sessions.config
    limit, batch_limit = cfg.max_action_bytes, max(cfg.max_action_bytes, cfg.max_batch_bytes)
    try:
        session = await sessions.open("ws")
    except EnvServerError as err:
        sessions.metrics.error(err.code)
        # Answer the client's first message (its reset): OpenEnv's client reads the error as the
        # reply and raises it, where a close before that would look like a network failure.
        with _quiet():
            await asyncio.wait_for(websocket.receive(), timeout=5.0)
        await _send_quietly(websocket, _error(err))
        with _quiet():
            await websocket.close(code=WS_TRY_LATER, reason="max_sessions")
        return
    session.websocket = websocket
    conn = _Connection(sessions, session)
    close_code, close_reason = 1000, ""
    try:
        while True:
            raw = await _receive(websocket)
            if raw is None:
                break
            conn.touch()
            plain = True
            try:
                if len(raw) > limit and _size(raw) > batch_limit:
                    raise _too_large(_size(raw), limit)
                if isinstance(raw, bytes):
                    try:
                        raw = raw.decode("utf-8")
                    except UnicodeDecodeError:
                        refusal = _bad("message", "a binary frame must hold UTF-8 JSON, as a text frame does")
                        sessions.metrics.error(refusal.code)
                        await _send_quietly(websocket, _error(refusal))
                        close_code, close_reason = WS_UNSUPPORTED_DATA, "binary frame not UTF-8"
                        break
                message = parse_json(raw)
                kind = message.get("type") if isinstance(message, dict) else None
                data = message.get("data") if isinstance(message, dict) else None
                if kind == "batch":
                    if len(raw) > batch_limit // 4 and _size(raw) > batch_limit:
                        raise _too_large(_size(raw), batch_limit, "max_batch_bytes")
                    plain = False
                    reply = await conn.batch(data)
                else:
                    if len(raw) > limit // 4 and _size(raw) > limit:
                        raise _too_large(_size(raw), limit)
                    if kind == "close":
                        break
                    session = conn.slots.get(0) or session
                    if session.closed:  # slot 0 was closed inside a batch: a fresh session
                        conn.slots.pop(0, None)
                        session = conn.slots[0] = await sessions.open("ws")
                        session.websocket = websocket
                    reply = await _session_message(sessions, session, kind, data)
            except EnvServerError as err:
                sessions.metrics.error(err.code)
                reply = _error(err)
                if err.code == "STEP_TIMEOUT":
                    close_code, close_reason = WS_POLICY, "step_timeout"
            if not await _send_quietly(websocket, reply):
                break
            if plain and session.closed:  # reaped, or closed by step_timeout: the reply said why
                close_code = close_code if close_code != 1000 else 1001
                break
    except Exception as exc:  # noqa: BLE001 - the connection broke, or the server failed
        from starlette.websockets import WebSocketDisconnect

        if not isinstance(exc, (WebSocketDisconnect, OSError, RuntimeError)):
            sessions.metrics.error("INTERNAL_ERROR")
            failure = EnvServerError(500, "INTERNAL_ERROR", f"{type(exc).__name__}: {exc}"[:500])
            await _send_quietly(websocket, _error(failure))
            close_code, close_reason = WS_INTERNAL, "internal error"
    finally:
        await conn.close_all("client")
        with _quiet():
            await websocket.close(code=close_code, reason=close_reason)
