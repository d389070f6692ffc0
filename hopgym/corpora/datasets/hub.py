"""Hugging Face hub access: hub names (``owner/name``) are read through the ``datasets`` library.

hopgym never waits on an unreachable hub. ``datasets`` retries a failing connection for about
23 seconds before it gives up; instead, before calling it:

- offline by configuration (``HF_DATASETS_OFFLINE``, else ``HF_HUB_OFFLINE`` or
  ``TRANSFORMERS_OFFLINE``, decided as ``datasets`` decides): ``datasets`` is asked for its cached
  copy only, which answers at once; if ``datasets`` was imported before the variable was set it
  would still use the network, so hopgym fails at once instead;
- otherwise one TCP connection to the hub's host (``HF_ENDPOINT``, or the HTTPS proxy when one
  is configured) must open within two seconds, else the load fails at once.

Every failure is a :class:`DatasetUnavailableError` that says which file to download and pass
as ``path=``.
"""

from __future__ import annotations

import os
import re
import socket
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from urllib.parse import urlsplit

from hopgym.corpora.datasets.base import DatasetFormat
from hopgym.corpora.datasets.errors import DatasetUnavailableError
from hopgym.corpora.datasets.records import iter_records
from hopgym.errors import DependencyNotInstalled

__all__ = [
    "is_hub_name",
    "hub_records",
    "offline_reason",
    "unreachable_reason",
    "hub_endpoint",
    "record_source",
]

_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_TRUE = {"1", "ON", "YES", "TRUE"}  # what huggingface_hub and datasets count as set
#: Seconds the reachability check waits for the hub's host.
PROBE_TIMEOUT = 2.0


def is_hub_name(path: str | os.PathLike[str]) -> bool:
    """True for ``owner/name`` strings that are not an existing file (read through ``datasets``).

    Example:
        >>> is_hub_name("hotpotqa/hotpot_qa"), is_hub_name("data/dev.jsonl")
        (True, False)
    """
    s = os.fspath(path)
    return not os.path.exists(s) and bool(_HUB_NAME.match(s)) and not s.endswith((".json", ".jsonl", ".gz"))


def offline_reason(env: Mapping[str, str] | None = None) -> str | None:
    """Which variable puts the hub offline, read the way ``datasets`` reads them; else None.

    ``HF_DATASETS_OFFLINE`` decides when it is set; otherwise ``HF_HUB_OFFLINE`` (or, when that
    is empty, ``TRANSFORMERS_OFFLINE``) as ``huggingface_hub`` reads it.

    Example:
        >>> offline_reason({"HF_HUB_OFFLINE": "1"})
        'HF_HUB_OFFLINE=1'
        >>> offline_reason({"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "0"}) is None
        True
    """
    env = os.environ if env is None else env
    value = env.get("HF_DATASETS_OFFLINE")
    if value is not None:
        return f"HF_DATASETS_OFFLINE={value}" if value.upper() in _TRUE else None
    name = "HF_HUB_OFFLINE" if env.get("HF_HUB_OFFLINE") else "TRANSFORMERS_OFFLINE"
    value = env.get(name) or ""
    return f"{name}={value}" if value.upper() in _TRUE else None


def hub_endpoint() -> str:
    """The hub's URL: ``HF_ENDPOINT``, or https://huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")


def unreachable_reason(endpoint: str, timeout: float = PROBE_TIMEOUT) -> str | None:
    """Why a TCP connection to ``endpoint``'s host (or its proxy) fails; None when it opens.

    Bounded by ``timeout`` seconds in all, name resolution included.
    """
    parts = urlsplit(endpoint)
    if not parts.hostname:
        return f"the endpoint {endpoint!r} has no host name"
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            host, port = p.hostname, p.port or 80
    result: list[str | None] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                result.append(None)
        except OSError as exc:
            result.append(f"{type(exc).__name__}: {exc}")

    # Name resolution ignores the socket timeout: a thread bounds the whole check.
    thread = threading.Thread(target=probe, name="hopgym-hub-probe", daemon=True)
    thread.start()
    thread.join(timeout)
    if not result:
        return f"no connection to {host}:{port} within {timeout:g} s"
    return None if result[0] is None else f"cannot connect to {host}:{port}: {result[0]}"


def hub_records(name: str, fmt: DatasetFormat, config: str | None, split: str) -> Iterator[tuple[int, Any]]:
    """Rows of a hub dataset, through ``datasets``; fails at once when the hub is out of reach."""
    advice = (
        f"hopgym does not download data for you when offline: download {fmt.download_hint} "
        "and pass path='<file>'"
    )
    try:
        import datasets
    except ImportError:
        raise DatasetUnavailableError(
            f"{DependencyNotInstalled.for_extra('datasets', 'hub')} to read {name!r} from the "
            f"Hugging Face hub; or download {fmt.download_hint} and pass path='<file>'"
        ) from None
    what = f"{name!r} (config={config!r}, split={split!r})"
    offline = offline_reason()
    if offline is not None:
        if not getattr(getattr(datasets, "config", None), "HF_HUB_OFFLINE", False):
            raise DatasetUnavailableError(
                f"could not load {what}: {offline} is set, but `datasets` was imported before it "
                f"was, so it would use the network; set it before starting Python. {advice}"
            )
        # Offline, `datasets` answers from its cache or fails at once.
    else:
        reason = unreachable_reason(hub_endpoint())
        if reason is not None:
            raise DatasetUnavailableError(
                f"could not load {what}: the Hugging Face hub ({hub_endpoint()}) is unreachable "
                f"({reason}). {advice}; or set HF_HUB_OFFLINE=1 to read a copy already in the "
                "`datasets` cache"
            )
    try:
        ds = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # noqa: BLE001 - offline, unknown name, gated: all end here
        where = f" with {offline} (cache only)" if offline else ""
        raise DatasetUnavailableError(
            f"could not load {what} from the Hugging Face hub{where}: {type(exc).__name__}: {exc}. {advice}"
        ) from exc
    yield from enumerate(ds, 1)


def record_source(
    path: str | os.PathLike[str], fmt: DatasetFormat, config: str | None, split: str
) -> Callable[[], Iterator[tuple[int, Any]]]:
    """``() -> (line, record) pairs`` of a file or a hub name; a missing file fails now."""
    if is_hub_name(path):
        return lambda: hub_records(os.fspath(path), fmt, config, split)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"no such file: {os.fspath(path)} (a Hugging Face hub name looks like 'owner/name')"
        )
    return lambda: iter_records(path)
