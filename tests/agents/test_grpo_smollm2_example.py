"""``examples/grpo_smollm2.py`` end to end on a tiny saved model (the smoke preset): SFT, GRPO,
RFT and continue-SFT run, held-out EM is written for each, and the baselines get GRPO's budget of
sampled episodes. Learning is not asserted (the SmolLM2 figures are in docs/training.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

import tiny_llm  # noqa: E402

PATH = Path(__file__).resolve().parents[2] / "examples" / "grpo_smollm2.py"


@pytest.fixture
def example(monkeypatch):
    spec = importlib.util.spec_from_file_location("grpo_smollm2_example", PATH)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # about 15 s on one thread, more on a loaded machine
def test_smoke_preset_end_to_end_on_a_saved_model(example, tmp_path: Path, capsys):
    """A transformers folder (a tiny random Qwen2 and its BPE tokenizer), as --model DIR."""
    import torch

    torch.set_num_threads(1)
    tok = tiny_llm.build_tokenizer()
    model_dir = tmp_path / "model"
    tiny_llm.build_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out = tmp_path / "run"
    result = example.main(
        [
            "--preset",
            "smoke",
            "--model",
            str(model_dir),
            "--out",
            str(out),
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    assert json.loads((tmp_path / "r.json").read_text())["em_grpo"] == result["em_grpo"]
    for name in ("sft", "grpo", "rft", "continue_sft"):
        assert 0.0 <= result[f"em_{name}"] <= 1.0
        assert result[name]["em"] == result[f"em_{name}"]
    assert result["test_questions"] == result["args"]["n_eval"] == 3
    assert result["args"]["model"] == str(model_dir)
    # Every baseline gets GRPO's budget of sampled episodes (B x G x steps = 2 x 2 x 1).
    assert result["budget_episodes"] == 4
    assert result["grpo_budget"]["episodes"] == result["rft_budget"]["episodes"] == 4
    assert result["continue_sft_budget"]["examples"] == 4
    assert result["sft_budget"]["steps"] == 2
    assert (out / "grpo" / "curves.png").exists()
    assert "em_sft" in capsys.readouterr().out


def test_settings_are_checked(example):
    assert example.make_args("cpu-quick", {}).episodes == 5 * 2 * 4
    assert example.make_args("smoke", {"env_kw.hops": 3}).env_kw["hops"] == 3
    with pytest.raises(SystemExit, match="unknown setting"):
        example.make_args("smoke", {"grpo_lrr": 1.0})
    with pytest.raises(ValueError, match="include 'grpo'"):
        example.make_args("smoke", {"methods": ("rft",)})
    with pytest.raises(ValueError, match="group_size"):
        example.make_args("smoke", {"group_size": 1})
