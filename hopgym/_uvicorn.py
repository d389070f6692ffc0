"""What hopgym's two servers share: a socket bound up front and a uvicorn server run in a
background thread (:meth:`UvicornServer.start`) or in this one until SIGINT/SIGTERM
(:meth:`UvicornServer.serve_forever`), with a graceful :meth:`~UvicornServer.stop`.

Used by the retrieval server (:class:`hopgym.retrieval.serving.app.RetrievalServer`) and the env
server (:class:`hopgym.integrations.openenv.EnvServer`). uvicorn is imported when a server runs.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, TypeVar

__all__ = ["UvicornServer", "bind", "signals_end_quietly", "raise_open_files_limit"]

_S = TypeVar("_S", bound="UvicornServer")


def bind(host: str, port: int, backlog: int) -> socket.socket:
    """A listening, non-blocking socket on ``host:port`` (``port=0``: any free port).

    Raises:
        OSError: the address cannot be listened on (the message names it).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


@contextlib.contextmanager
def signals_end_quietly() -> Iterator[None]:
    """Uvicorn re-raises the SIGINT/SIGTERM it handled once it has shut down; with these
    handlers in place that re-raise does nothing, so the process exits 0 after a clean stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, lambda *_: None) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def raise_open_files_limit() -> None:
    """Lift the soft limit of open files to the hard one: every client connection is a file."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):  # pragma: no cover - Windows, containers
        pass


class UvicornServer:
    """A uvicorn server on a socket bound at construction (so :attr:`url` is known at once).

    Subclasses set :attr:`what` (named in errors and the thread's name) and implement
    :meth:`uvicorn_config`; ``shutdown_timeout`` bounds :meth:`stop`'s wait.

    Args:
        host, port, backlog: where to listen (``port=0``: any free port).
        shutdown_timeout: how long in-flight requests may take once a stop is asked for.
    """

    what = "server"

    def __init__(self, host: str, port: int, backlog: int, shutdown_timeout: float) -> None:
        self._sock = bind(host, port, backlog)
        self.host, self.port = self._sock.getsockname()[:2]
        self._shutdown_timeout = shutdown_timeout
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def uvicorn_config(self) -> Any:
        """The ``uvicorn.Config`` of one run (a subclass's)."""
        raise NotImplementedError

    @property
    def url(self) -> str:
        """``http://host:port`` of the server (the real port when ``port=0``)."""
        host = self.host if ":" not in str(self.host) else f"[{self.host}]"
        return f"http://{host}:{self.port}"

    def _new_server(self) -> Any:
        import uvicorn

        if self._server is not None:
            raise RuntimeError(f"the {self.what} is already running")
        self._server = uvicorn.Server(self.uvicorn_config())
        return self._server

    def start(self: _S, timeout: float = 60.0) -> _S:
        """Serve in a background thread; returns ``self`` once it accepts requests (use it as a
        context manager to stop)."""
        server = self._new_server()

        def run() -> None:
            try:
                server.run(sockets=[self._sock])
            except BaseException as exc:  # noqa: BLE001 - reported by start()
                self._error = exc

        self._thread = threading.Thread(target=run, name=f"hopgym-{self.what.replace(' ', '-')}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the {self.what} did not start: {self._error!r}")
            time.sleep(0.005)
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until SIGINT or SIGTERM, then shut down gracefully (exits
        normally: the signal is not raised again)."""
        server = self._new_server()
        with signals_end_quietly():
            server.run(sockets=[self._sock])
        self._server = None
        self._sock.close()

    def stop(self, timeout: float | None = None) -> None:
        """Stop serving: stop accepting, close idle connections, let in-flight requests finish
        (for at most the shutdown timeout), then close the socket."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout if timeout is not None else self._shutdown_timeout + 10)
            self._thread = None
        self._server = None
        self._sock.close()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
