"""hopgym's one HTTP client: :class:`HTTPClient` (keep-alive, retries, back-off, timeouts).

The retrieval client (:class:`~hopgym.retrieval.http.HTTPRetriever`), the OpenAI-compatible backend
(:class:`~hopgym.backends.OpenAIBackend`) and the judges that run on it all send their requests
through this client, so the retry policy below is written once. Standard library only
(:mod:`http.client`).

Classes: :class:`HTTPClient`, :class:`Response`, :class:`~hopgym.errors.HTTPError`.
Functions: :func:`parse_retry_after`. Constant: :data:`RETRYABLE_STATUS`.

The policy:

- **What is retried**: connection errors (refused, reset, closed), timeouts and the statuses in
  :data:`RETRYABLE_STATUS` (408, 429, 500, 502, 503, 504). Any other answer that is not 2xx fails
  at once; so does a 2xx reply whose JSON cannot be read (a server that sends broken JSON sends it
  again).
- **Vocabulary**: ``timeout`` (seconds one attempt may take), ``retries`` (further attempts after
  the first), ``backoff`` (the nominal wait before the first retry, doubled for each further one),
  ``max_backoff`` (the longest wait).
- **Back-off with jitter**: the wait before retry ``n`` is drawn uniformly from
  ``[w/2, w]`` with ``w = min(max_backoff, backoff * 2**(n-1))``, from the client's own
  :class:`random.Random` (``seed=``); the global :mod:`random` state is never touched. A
  ``Retry-After`` header (seconds or an HTTP date) lengthens the wait to the server's value, up to
  ``max_backoff``.
- **Timeout**: one attempt — connecting, sending, reading the status line, the headers and the
  whole body — gets ``timeout`` seconds in all: every socket operation waits only for the time
  left (the DNS lookup is the one step the standard library cannot bound).
- **Total time**: a call that fails returns within ``timeout * (retries + 1) + retries *
  max_backoff`` seconds (the waits are at most ``min(max_backoff, backoff * 2**(n-1))`` unless
  the server asks for more with ``Retry-After``).
- **Errors**: :class:`~hopgym.errors.HTTPError` names the method and URL, how many attempts were
  made and the last cause (``HTTP 503: busy``, ``no reply within 5 s``, ``cannot connect: ...``).
- **Connections**: kept alive and reused, one per thread (an :class:`http.client.HTTPConnection`
  is not thread-safe), with ``TCP_NODELAY`` so that small requests are not held back by Nagle's
  algorithm. A kept-alive connection that the server closed while it was idle is reopened at once,
  inside the same attempt. Connections are not pickled: a copy opens its own.

Example:
    >>> client = HTTPClient("http://127.0.0.1:8000/v1", timeout=5, retries=2, backoff=0.5, seed=0)
    >>> client.url("/chat/completions")
    'http://127.0.0.1:8000/v1/chat/completions'
    >>> client.max_total_seconds()
    75.0
"""

from __future__ import annotations

import email.utils
import http.client
import json
import math
import random
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timezone
from typing import Any
from urllib.parse import urlsplit

from hopgym.errors import HTTPError, InvalidOptionError

__all__ = ["HTTPClient", "HTTPError", "Response", "RETRYABLE_STATUS", "parse_retry_after"]

#: The HTTP statuses that are retried: request timeout, too many requests, and the server errors
#: that mean "busy or restarting" (500 included: vLLM and SGLang answer 500 while overloaded).
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})

# A kept-alive connection that the server closed while idle fails with one of these when reused.
_STALE = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError, ConnectionAbortedError)
_CHUNK = 1 << 16
_MAX_DETAIL = 300


@dataclass(frozen=True)
class Response:
    """A complete HTTP reply.

    Attributes:
        status: the HTTP status.
        headers: the reply's headers, names in lower case.
        body: the whole body.
        url: the URL that answered.
    """

    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str

    def json(self) -> Any:
        """The body decoded as JSON.

        Raises:
            HTTPError: when the body is not JSON (not retried).
        """
        try:
            return json.loads(self.body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HTTPError(
                f"{self.url} sent a reply that is not JSON ({exc}): {self.body[:200]!r}",
                url=self.url,
                status=self.status,
                cause="invalid JSON",
            ) from None


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date.

    Args:
        value: the header's value (``None`` when absent).
        now: the current Unix time for dates (defaults to :func:`time.time`).

    Returns:
        The wait in seconds (never negative), or ``None`` when the header is absent or unreadable.

    Example:
        >>> parse_retry_after("3"), parse_retry_after("0.5"), parse_retry_after("soon")
        (3.0, 0.5, None)
        >>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0)
        10.0
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


def _detail(body: bytes) -> str:
    """The useful part of an error body: ``{"error": ...}`` (hopgym, OpenAI) or the text."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        data = None
    if isinstance(data, dict):
        err = data.get("error", data.get("detail"))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            return str(err)[:_MAX_DETAIL]
    return body[:_MAX_DETAIL].decode("utf-8", "replace").strip()


class _Slot:
    """One thread's connection; closed when the thread (and so its slot) goes away."""

    __slots__ = ("conn",)

    def __init__(self) -> None:
        self.conn: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def __del__(self) -> None:
        self.close()


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the attempt's time is up")
    return left


class HTTPClient:
    """Requests to one server with keep-alive connections, retries and bounded time.

    See the module docstring for the policy (what is retried, the waits, the time bound).
    Thread-safe: each thread uses its own connection.

    Args:
        base_url: ``http(s)://host[:port][/path]``; request paths are appended to it.
        timeout: seconds one attempt may take, from connecting to the last byte of the reply.
        retries: further attempts after a failed one (0: try once).
        backoff: the nominal wait before the first retry, in seconds; doubled for each further one.
        max_backoff: the longest wait between two attempts (also caps ``Retry-After``).
        headers: sent with every request (e.g. ``{"Authorization": "Bearer ..."}``); never shown
            by ``repr``.
        seed: seeds the jitter's :class:`random.Random`. ``None`` (the default) draws a fresh
            seed: jitter is there to keep many workers from retrying in lockstep, which equal
            seeds would defeat; it changes only how long a retry waits, never a result.

    Attributes:
        connects: connections opened so far (a kept-alive client opens one per thread).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        headers: Mapping[str, str] | None = None,
        seed: int | None = None,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidOptionError(f"url must look like http://host:port, got {base_url!r}")
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, (int, float))
            or not (timeout > 0 and math.isfinite(timeout))
        ):
            raise InvalidOptionError(f"timeout must be a finite number of seconds > 0, got {timeout!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise InvalidOptionError(f"retries must be an int >= 0, got {retries!r}")
        for name, value in (("backoff", backoff), ("max_backoff", max_backoff)):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not (value >= 0 and math.isfinite(value))
            ):
                raise InvalidOptionError(f"{name} must be a finite number of seconds >= 0, got {value!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise InvalidOptionError(f"seed must be an int or None, got {seed!r}")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.base_path = parts.path.rstrip("/")
        self.timeout = float(timeout)
        self.retries = retries
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.headers = dict(headers or {})
        self.seed = seed
        self.connects = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._local = threading.local()

    # ------------------------------------------------------------------ plumbing
    def __repr__(self) -> str:  # headers may carry a key: never shown
        return (
            f"HTTPClient({self.base_url!r}, timeout={self.timeout:g}, retries={self.retries}, "
            f"backoff={self.backoff:g}, max_backoff={self.max_backoff:g})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"], state["_local"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._local = threading.local()

    @property
    def origin(self) -> str:
        """``scheme://host:port``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The origin and the base path."""
        return self.origin + self.base_path

    def _target(self, path: str) -> str:
        if not path:
            return self.base_path or "/"
        return self.base_path + (path if path.startswith("/") else "/" + path)

    def url(self, path: str = "") -> str:
        """The full URL of ``path`` (relative to the base URL)."""
        return self.origin + self._target(path)

    def max_total_seconds(self, retries: int | None = None) -> float:
        """The longest a failing call can take: ``timeout * (retries + 1) + retries * max_backoff``."""
        n = self.retries if retries is None else retries
        return self.timeout * (n + 1) + n * self.max_backoff

    def close(self) -> None:
        """Close this thread's connection (a later request reconnects)."""
        slot = getattr(self._local, "slot", None)
        if slot is not None:
            slot.close()

    def _slot(self) -> _Slot:
        slot = getattr(self._local, "slot", None)
        if slot is None:
            slot = self._local.slot = _Slot()
        return slot

    def _connect(self, deadline: float) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=_remaining(deadline))
        conn.connect()
        # Small requests must not wait for delayed ACKs (Nagle): send each one at once.
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            self.connects += 1
        return conn

    def backoff_delay(self, retry: int, retry_after: float | None = None) -> float:
        """The wait before retry number ``retry`` (1 for the first), jittered; draws from the
        client's generator.

        Example:
            >>> a = HTTPClient("http://h", backoff=1.0, seed=3)
            >>> 0.5 <= a.backoff_delay(1) <= 1.0, a.backoff_delay(9) <= a.max_backoff
            (True, True)
            >>> a.backoff_delay(1, retry_after=4.0)
            4.0
        """
        nominal = min(self.max_backoff, self.backoff * 2.0 ** min(retry - 1, 64))
        with self._lock:
            u = self._rng.random()
        wait = nominal * (0.5 + 0.5 * u)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.max_backoff))
        return wait

    def _timeout_cause(self) -> str:
        return f"no reply within {self.timeout:g} s (timeout={self.timeout:g})"

    def _attempt(
        self, method: str, target: str, body: bytes | None, headers: dict[str, str]
    ) -> Response | str:
        """One attempt within one deadline: the reply, or the cause of a transient failure."""
        deadline = time.monotonic() + self.timeout
        slot = self._slot()
        reopened = False
        while True:
            if slot.conn is not None and slot.conn.sock is None:  # closed by http.client
                slot.close()
            reused = slot.conn is not None
            if not reused:
                try:
                    slot.conn = self._connect(deadline)
                except TimeoutError:
                    return self._timeout_cause()
                except OSError as exc:
                    return f"cannot connect: {exc}"
            conn = slot.conn
            assert conn is not None  # connected just above
            sock = conn.sock  # kept: http.client hands the socket over to a reply that closes it
            try:
                sock.settimeout(_remaining(deadline))
                conn.request(method, target, body=body, headers=headers)
                sock.settimeout(_remaining(deadline))
                resp = conn.getresponse()
                chunks = []
                while True:
                    sock.settimeout(_remaining(deadline))
                    chunk = resp.read1(_CHUNK)  # one recv at most: the deadline holds
                    if not chunk:
                        break
                    chunks.append(chunk)
                if resp.length:  # the server closed before the end of the body
                    raise http.client.IncompleteRead(b"".join(chunks), resp.length)
                resp.read()  # no I/O left: marks the reply done (read1 does not) for keep-alive
            except _STALE as exc:
                slot.close()
                if reused and not reopened:  # closed by the server while idle: reopen at once
                    reopened = True
                    continue
                return f"connection lost: {type(exc).__name__}: {exc}"
            except TimeoutError:
                slot.close()
                return self._timeout_cause()
            except (OSError, http.client.HTTPException) as exc:
                slot.close()
                return f"connection failed: {type(exc).__name__}: {exc}"
            if resp.will_close:
                slot.close()
            return Response(
                resp.status,
                {k.lower(): v for k, v in resp.getheaders()},
                b"".join(chunks),
                self.origin + target,
            )

    # ------------------------------------------------------------------ requests
    def request(
        self,
        method: str,
        path: str = "",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        *,
        retries: int | None = None,
    ) -> Response:
        """Send a request, retrying transient failures; return the 2xx reply.

        Args:
            method: ``"GET"``, ``"POST"``...
            path: appended to the base URL.
            body: the request body.
            headers: added to (and overriding) the client's headers.
            retries: this call's retries instead of the client's.

        Raises:
            HTTPError: for a non-retryable status (at once), or when every attempt failed.
        """
        n_retries = self.retries if retries is None else retries
        target = self._target(path)
        url = self.origin + target
        all_headers = {"Connection": "keep-alive", **self.headers, **(headers or {})}
        attempt = 0
        while True:
            attempt += 1
            result = self._attempt(method, target, body, all_headers)
            retry_after = None
            status = None
            if isinstance(result, Response):
                status = result.status
                if 200 <= status < 300:
                    return result
                cause = f"HTTP {status}: {_detail(result.body)}"
                if status not in RETRYABLE_STATUS:
                    raise HTTPError(
                        f"{method} {url} answered {cause} (attempt {attempt}; this status is not retried)",
                        method=method,
                        url=url,
                        attempts=attempt,
                        cause=cause,
                        status=status,
                    )
                retry_after = parse_retry_after(result.headers.get("retry-after"))
            else:
                cause = result
            if attempt > n_retries:
                raise HTTPError(
                    f"{method} {url} failed after {attempt} attempt(s): {cause}",
                    method=method,
                    url=url,
                    attempts=attempt,
                    cause=cause,
                    status=status,
                    transient=True,
                    retry_after=retry_after,
                )
            time.sleep(self.backoff_delay(attempt, retry_after))

    def post_json(
        self, path: str, payload: Any, *, headers: Mapping[str, str] | None = None, retries: int | None = None
    ) -> Any:
        """POST ``payload`` as JSON and return the decoded JSON reply (see :meth:`request`)."""
        body = json.dumps(payload).encode("utf-8")
        hdrs = {"Content-Type": "application/json", "Accept": "application/json", **(headers or {})}
        return self.request("POST", path, body, hdrs, retries=retries).json()

    def get_json(
        self, path: str = "", *, headers: Mapping[str, str] | None = None, retries: int | None = None
    ) -> Any:
        """GET ``path`` and return the decoded JSON reply (see :meth:`request`)."""
        hdrs = {"Accept": "application/json", **(headers or {})}
        return self.request("GET", path, None, hdrs, retries=retries).json()
