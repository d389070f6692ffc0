"""What ``hopgym serve`` serves and how: :class:`ServeConfig`, one field per option.

Every limit, timeout and default of the retrieval server lives here, once: the uvicorn server
(:mod:`hopgym.retrieval.serving.app`), the Ray Serve deployment
(:mod:`hopgym.retrieval.serving.ray_serve`) and the ``hopgym serve`` command (whose flags are
generated from these fields and their ``metadata["help"]``) all read it. Importing it imports no
web framework.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Any

from hopgym.errors import InvalidOptionError, InvalidOptionTypeError
from hopgym.retrieval.devices import INDEX_BACKENDS, check_device
from hopgym.retrieval.failures import MAX_QUERY_CHARS
from hopgym.retrieval.index_store import RETRIEVER_KINDS, VERIFY_MODES
from hopgym.retrieval.query_cache import DEFAULT_CACHE_BYTES, DEFAULT_CACHE_ENTRIES

__all__ = ["ServeConfig"]


def _opt(default: Any, help: str, **meta: Any) -> Any:  # noqa: A002 - the metadata key is "help"
    return field(default=default, metadata={"help": help, **meta})


@dataclass(frozen=True)
class ServeConfig:
    """Options of the retrieval server (``hopgym serve``), with one default each.

    Limits answer with a 4xx JSON error ``{"error": message, "limit": field}`` that names the
    field (and so the flag); the server stays up. Time limits are in seconds.

    Raises:
        hopgym.errors.InvalidOptionError: a bad value; the message names the field.

    Example:
        >>> ServeConfig(max_queries=8).max_queries
        8
        >>> ServeConfig(topk=500)
        Traceback (most recent call last):
            ...
        hopgym.errors.InvalidOptionError: need 1 <= topk <= max_topk (100), got topk=500
    """

    # ---- what to serve
    index: str | None = _opt(None, "Index directory (hopgym index build).", metavar="DIR")
    corpus: str | None = _opt(None, "The corpus file, if it moved since the index was built.", metavar="FILE")
    model: str | None = _opt(
        None,
        "Embedding model (a name or path) for a dense or hybrid index (default: the index's own).",
    )
    threads: int | None = _opt(1, "FAISS and torch threads of the engine (none: leave them).")
    device: str = _opt(
        "cpu", "Where a dense or hybrid index's encoder and index run: cpu, cuda, cuda:N or auto."
    )
    index_backend: str = _opt(
        "auto",
        "The dense index's engine: auto, faiss or torch (the same FAISS file).",
        choices=INDEX_BACKENDS,
    )
    nprobe: int | None = _opt(
        None,
        "Inverted lists an ivf/ivfpq index searches per query (default: the index's own, from "
        "its build): more finds more of the exact top k, and takes longer.",
        metavar="N",
    )
    ef_search: int | None = _opt(
        None,
        "Candidates an hnsw index's search keeps (default: the index's own, from its build).",
        metavar="N",
    )
    verify: str = _opt(
        "sample",
        "How the index files are checked against the manifest's checksums when "
        "loaded: sample (size and up to 16 MiB of each file), full (every byte), size, "
        "none.",
        choices=VERIFY_MODES,
    )
    rebuild: bool = _opt(
        False,
        "Rebuild the index from its corpus when it cannot be loaded as it is (no "
        "manifest, a corrupted file, a changed corpus); without it such an index is "
        "refused.",
    )
    retriever: str | None = _opt(
        None,
        "The index kind expected (another is refused), and the kind --rebuild builds when "
        "there is no manifest (default: what the index holds; bm25 for a new one).",
        choices=RETRIEVER_KINDS,
    )
    cache_entries: int = _opt(
        DEFAULT_CACHE_ENTRIES,
        "Ranked results the query cache keeps: a query the engine ranked "
        "before is answered from it (0: off).",
    )
    cache_bytes: int = _opt(DEFAULT_CACHE_BYTES, "Bytes the query cache may hold (0: off).")
    # ---- where
    host: str = _opt("127.0.0.1", "Address to listen on (0.0.0.0: every interface).")
    port: int = _opt(8000, "Port to listen on (0: any free port).")
    backlog: int = _opt(2048, "Connections the kernel queues before the server accepts them.")
    # ---- requests
    topk: int = _opt(3, "Documents per query when a request gives no topk.")
    max_topk: int = _opt(100, "The largest topk a request may ask for.")
    max_queries: int = _opt(
        8192,
        "Queries one request may carry (Search-R1 sends a training "
        "batch's queries, e.g. 512 x 5 rollouts, in one request).",
    )
    max_query_chars: int = _opt(
        MAX_QUERY_CHARS,
        "Characters one query may have (the env's longest turn, max_action_chars, by default: "
        "every query an env sends fits); a longer query is refused with HTTP 413 (not "
        "truncated), so it never holds the engine.",
    )
    max_body_bytes: int = _opt(4 << 20, "Bytes a request body may have (HTTP 413 beyond).")
    max_reply_bytes: int = _opt(
        64 << 20,
        "Bytes a reply may have, bounded before searching as queries x topk x the longest "
        "document's JSON; a request whose reply could be larger gets HTTP 413 naming this limit.",
    )
    max_header_bytes: int = _opt(16384, "Bytes the request line and headers may have (HTTP 431 beyond).")
    max_json_depth: int = _opt(
        16, "Nesting depth of a request's JSON (checked before parsing, without recursion)."
    )
    # ---- batching
    max_batch: int = _opt(
        64, "Most queries one engine call answers (uvicorn batcher and Ray Serve's @serve.batch)."
    )
    max_wait_ms: float = _opt(
        2.0,
        "How long a batch waits for more requests: uvicorn waits only for requests still "
        "being received; Ray Serve waits this long whenever a batch is not full.",
    )
    max_pending: int = _opt(
        65536, "Queries waiting for the engine before new requests get HTTP 503 with Retry-After."
    )
    # ---- time
    read_timeout: float = _opt(
        10.0,
        "Seconds a client has to send a request's line and headers, and again its body "
        "(HTTP 408 and the connection is closed).",
    )
    keep_alive: float = _opt(5.0, "Seconds an idle kept-alive connection stays open.")
    request_timeout: float = _opt(60.0, "Seconds a request may wait for the engine (HTTP 503 beyond).")
    shutdown_timeout: float = _opt(
        5.0, "Seconds SIGINT/SIGTERM wait for in-flight requests before closing their connections."
    )
    # ---- Ray Serve
    ray: bool = _opt(
        False, "Serve the index as a Ray Serve deployment instead of one uvicorn process (needs hopgym[ray])."
    )
    replicas: int = _opt(1, "Ray Serve replicas (each loads the index, memory-mapped).")
    ray_address: str | None = _opt(
        None, "Ray cluster to join (ray start --head prints it; default: start a local Ray).", metavar="ADDR"
    )
    # ---- logging
    verbose: bool = _opt(False, "Log every request.")

    def __post_init__(self) -> None:
        def whole(name: str, low: int) -> None:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidOptionError(f"{name} must be an int >= {low}, got {value!r}")

        def seconds(name: str, low: float = 0.0, inclusive: bool = False) -> None:
            value = getattr(self, name)
            ok = (
                isinstance(value, (int, float))
                and not isinstance(value, bool)
                and math.isfinite(value)
                and (value >= low if inclusive else value > low)
            )
            if not ok:
                sign = ">=" if inclusive else ">"
                raise InvalidOptionError(f"{name} must be a number {sign} {low}, got {value!r}")

        for name in (
            "max_topk",
            "max_queries",
            "max_query_chars",
            "max_body_bytes",
            "max_reply_bytes",
            "max_json_depth",
            "max_batch",
            "max_pending",
            "replicas",
            "backlog",
        ):
            whole(name, 1)
        whole("max_header_bytes", 256)
        whole("port", 0)
        whole("cache_entries", 0)
        whole("cache_bytes", 0)
        if self.port > 65535:
            raise InvalidOptionError(f"port must be 0..65535, got {self.port}")
        whole("topk", 1)
        if self.topk > self.max_topk:
            raise InvalidOptionError(f"need 1 <= topk <= max_topk ({self.max_topk}), got topk={self.topk}")
        for name in ("threads", "nprobe", "ef_search"):
            if getattr(self, name) is not None:
                whole(name, 1)
        seconds("max_wait_ms", inclusive=True)
        for name in ("read_timeout", "keep_alive", "request_timeout", "shutdown_timeout"):
            seconds(name)
        check_device(self.device)
        if self.index_backend not in INDEX_BACKENDS:
            raise InvalidOptionError(
                f"index_backend must be one of {INDEX_BACKENDS}, got {self.index_backend!r}"
            )
        if self.verify not in VERIFY_MODES:
            raise InvalidOptionError(f"verify must be one of {VERIFY_MODES}, got {self.verify!r}")
        if self.retriever is not None and self.retriever not in RETRIEVER_KINDS:
            raise InvalidOptionError(f"retriever must be one of {RETRIEVER_KINDS}, got {self.retriever!r}")
        if self.replicas > 1 and not self.ray:
            raise InvalidOptionError(
                "replicas > 1 needs ray=True (--ray): one uvicorn process serves one engine"
            )
        if self.ray_address is not None and not self.ray:
            raise InvalidOptionError("ray_address needs ray=True (--ray)")

    def updated(self, **changes: Any) -> ServeConfig:
        """This config with some fields replaced (checked again)."""
        names = {f.name for f in fields(self)}
        for key in changes:
            if key not in names:
                raise InvalidOptionTypeError(f"unknown serve option {key!r}")
        return replace(self, **changes)
