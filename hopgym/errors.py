"""hopgym's exceptions: :class:`HopgymError` is the root of every one of them.

``except hopgym.errors.HopgymError`` catches anything hopgym raises on purpose. Each class also
keeps a standard-library base that says what kind of failure it is (``RuntimeError``,
``ValueError``, ``ImportError``...), so ``except ValueError`` around hopgym code keeps working.

Classes defined here (and re-exported where they were first defined):

- :class:`HopgymError` — the root.
- :class:`InvalidOptionError` — an option, argument or setting has a bad value (also a
  ``ValueError``); :class:`InvalidOptionTypeError` — one has the wrong type (also a ``TypeError``).
- :class:`DependencyNotInstalled` — an optional extra is missing (also Gymnasium's
  ``gymnasium.error.DependencyNotInstalled`` and an ``ImportError``); imported from here only.
- :class:`HTTPError` — an HTTP request failed for good (:mod:`hopgym.httpclient`).
- :class:`RetrievalError` — a retriever could not answer (:mod:`hopgym.retrieval`).
- :class:`BackendError` — a language-model backend failed (:mod:`hopgym.backends`).
- :class:`JudgeError` — a judge could not give a verdict (:mod:`hopgym.rewards.judges`).
- :class:`RewardTermError`, :class:`RewardArgumentError` — reward wrappers
  (:mod:`hopgym.rewards.base`).

Defined beside the code that raises them, on the same root: ``IndexStoreError``,
``StaleIndexError``, ``ForeignIndexError`` (:mod:`hopgym.retrieval.index_store`),
``DeviceUnavailableError`` (:mod:`hopgym.retrieval.devices`),
``DatasetFormatError``, ``DatasetUnavailableError`` (:mod:`hopgym.corpora.datasets`),
``TrajectoryFormatError`` (:mod:`hopgym.agents.trajectories`), ``TokenMismatchError``
(:mod:`hopgym.agents.chat_tokens`), ``WorkerError``
(:mod:`hopgym.envs.ray_vector`).

This module is on the lowest floor: it imports nothing from hopgym.

Example:
    >>> from hopgym.errors import DependencyNotInstalled, HopgymError
    >>> err = DependencyNotInstalled.for_extra("faiss", "dense")
    >>> str(err)
    "faiss is not installed: run `pip install 'hopgym[dense]'`"
    >>> isinstance(err, HopgymError) and isinstance(err, ImportError)
    True
"""

from __future__ import annotations

from typing import Any

import gymnasium.error

__all__ = [
    "HopgymError",
    "InvalidOptionError",
    "InvalidOptionTypeError",
    "DependencyNotInstalled",
    "HTTPError",
    "RetrievalError",
    "BackendError",
    "JudgeError",
    "RewardTermError",
    "RewardArgumentError",
]


class HopgymError(Exception):
    """The root of every exception hopgym raises."""


class InvalidOptionError(HopgymError, ValueError):
    """An option, argument or setting hopgym was given has a bad value; the message names it.

    Example:
        >>> import gymnasium as gym, hopgym
        >>> try:
        ...     gym.make("hopgym/Tiny-v1", top_k=0)
        ... except HopgymError as err:
        ...     print(type(err).__name__, isinstance(err, ValueError))
        InvalidOptionError True
    """


class InvalidOptionTypeError(InvalidOptionError, TypeError):
    """An option or argument has the wrong type (also a ``TypeError``)."""


class DependencyNotInstalled(HopgymError, gymnasium.error.DependencyNotInstalled, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    @classmethod
    def for_extra(cls, package: str, extra: str) -> DependencyNotInstalled:
        """The error for a missing ``package`` that ``pip install 'hopgym[extra]'`` installs."""
        return cls(f"{package} is not installed: run `pip install 'hopgym[{extra}]'`")


class HTTPError(HopgymError, RuntimeError):
    """An HTTP request failed for good: the server refused it, or every attempt failed.

    Attributes:
        method: ``"GET"``, ``"POST"``...
        url: the URL that failed.
        attempts: how many times it was tried.
        cause: the last failure, e.g. ``"HTTP 503: busy"``, ``"no reply within 5 s"``,
            ``"cannot connect: [Errno 111] Connection refused"``.
        status: the last HTTP status, or ``None`` when no reply came.
        transient: whether the last failure was one that retries are for (a connection error,
            a timeout, a retryable status): ``True`` means the retries ran out.
        retry_after: the last reply's ``Retry-After`` in seconds, or ``None`` (a caller that
            retries elsewhere, e.g. on another server, honours it).
    """

    def __init__(
        self,
        message: str,
        *,
        method: str = "",
        url: str = "",
        attempts: int = 0,
        cause: str = "",
        status: int | None = None,
        transient: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.method, self.url, self.attempts = method, url, attempts
        self.cause, self.status, self.transient = cause, status, transient
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[Any, ...]:  # keyword attributes survive pickling (Ray, workers)
        return (type(self), self.args, self.__dict__)


class RetrievalError(HopgymError, RuntimeError):
    """A retriever could not answer (backend down, timeout, bad index). The env reports it."""


class BackendError(HopgymError, RuntimeError):
    """A backend failed to generate (server error, timeout, bad reply)."""


class JudgeError(HopgymError, RuntimeError):
    """A judge could not give a verdict (unreachable endpoint, bad reply, missing function)."""


class RewardTermError(HopgymError, ValueError):
    """Two reward wrappers in one stack want the same term name."""


class RewardArgumentError(HopgymError, ValueError):
    """A reward wrapper got an argument it cannot use (the message says which and why)."""
