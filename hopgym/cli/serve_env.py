"""``hopgym serve-env``: serve a hopgym env to OpenEnv clients (HTTP and WebSocket), many
sessions at once, on uvicorn.

Options: :class:`~hopgym.integrations.openenv.EnvServerConfig` (the env id, ``--kw``, the limits)
and the env options (:data:`~hopgym.cli._common.ENV_OPTIONS`), every field a flag.
"""

from __future__ import annotations

import argparse
from typing import Any

from hopgym.cli._common import ENV_OPTIONS, CommandError, command_parser, env_kwargs
from hopgym.cli._dataclass_args import ConfigSpec, add_config_arguments, config_from_args
from hopgym.integrations.openenv import EnvServerConfig

__all__ = ["SERVE_ENV", "add_parser", "run"]

#: ``hopgym serve-env``'s own options: :class:`EnvServerConfig`.
SERVE_ENV = ConfigSpec(EnvServerConfig, title="server (EnvServerConfig)")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``serve-env`` to the ``hopgym`` command."""
    p = command_parser(
        subparsers,
        "serve-env",
        "serve an env to OpenEnv clients (HTTP and WebSocket)",
        "Serve an env id, with its options and reward preset, behind an OpenEnv-compatible server "
        "(WebSocket /ws as OpenEnv's clients use it; POST /reset, POST /step and GET /state with "
        "sessions; GET /health, GET /metrics) on uvicorn: one session per client, many at once. "
        "Each limit below answers with a 4xx JSON error naming it; idle sessions are closed after "
        "--session-timeout. SIGINT or SIGTERM finishes the steps in flight, closes every session "
        "and exits.",
        run=run,
    )
    add_config_arguments(p, SERVE_ENV)
    add_config_arguments(p, ENV_OPTIONS)
    return p


def run(args: argparse.Namespace) -> int:
    """Run ``hopgym serve-env`` until SIGINT or SIGTERM."""
    from hopgym.integrations.openenv import serve_env

    cfg = config_from_args(args, SERVE_ENV)
    cfg = cfg.updated(kw=env_kwargs(args, cfg.kw))
    try:
        serve_env(cfg)
    except OSError as exc:  # hopgym's own errors pass through
        raise CommandError(str(exc)) from None
    return 0
