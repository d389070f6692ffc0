"""Fixtures shared by the training tests, which a test module imports by name (``from
train_fixtures import load_script, tiny_grpo  # noqa: F401``; a ``conftest.py`` here would clash
with ``tests/conftest.py`` under ``--doctest-modules``): a repository script loaded as a module, a
tiny saved model folder, and the settings of a small GRPO run on the tiny corpus."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def load_script(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``load_script(path, name)``: the repository's script ``path`` (``examples/...``,
    ``benchmarks/...``) as a module, in ``sys.modules`` under ``name`` for the test (dataclasses
    look their module up)."""

    def load(path: str, name: str) -> Any:
        spec = importlib.util.spec_from_file_location(name, ROOT / path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, name, module)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def tiny_model_dir(tmp_path: Path) -> Path:
    """A transformers folder (a tiny random Qwen2 and its BPE tokenizer, :mod:`tiny_llm`) for a
    script's ``--model DIR``; torch runs on one thread from here on."""
    import torch
    from tiny_llm import build_model, build_tokenizer

    torch.set_num_threads(1)
    tok = build_tokenizer()
    model_dir = tmp_path / "model"
    build_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    return model_dir


@pytest.fixture
def tiny_grpo() -> Any:
    """``tiny_grpo(output_dir, trl={...}, **fields)``: the ``GRPORunConfig`` of a small GRPO run
    on the tiny corpus (2 questions a step, 8-token turns, 120-token completions, no curves);
    ``fields`` and the ``trl`` entries are added or override."""
    from hopgym.agents.grpo import GRPORunConfig

    def config(output_dir: Path, trl: dict[str, Any] | None = None, **fields: Any) -> GRPORunConfig:
        fields = {"questions_per_step": 2, "max_new_tokens": 8, "plot": False, **fields}
        trl = {"max_completion_length": 120, **(trl or {})}
        return GRPORunConfig(output_dir=str(output_dir), trl=trl, **fields)

    return config
