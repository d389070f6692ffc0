"""Test-wide settings: one thread for BLAS, torch and FAISS, no network for model hubs, and
Stable-Baselines3's log folders (one per ``learn``) in the session's temporary folder instead of
the machine's ``/tmp``.

Tiny models and small FAISS indexes run 3-10x faster and steadier with one thread on small
machines (see benchmarks/), and tests must never reach a model or dataset hub.
"""

from __future__ import annotations

import os

import pytest

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session", autouse=True)
def _sb3_logs_in_the_sessions_tmp(tmp_path_factory: pytest.TempPathFactory) -> None:
    os.environ.setdefault("SB3_LOGDIR", str(tmp_path_factory.mktemp("sb3-logs")))
