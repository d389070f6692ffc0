"""``benchmarks/habit_fix.py`` end to end on a tiny saved model (the smoke preset): SFT on the
over-searching teacher, then GRPO, RFT and continue-SFT with the cost reward, each evaluated and
compared with the SFT; a second call resumes (skips the phases the results file has)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

import tiny_llm  # noqa: E402

PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "habit_fix.py"


@pytest.fixture
def habit_fix(monkeypatch):
    spec = importlib.util.spec_from_file_location("habit_fix_script", PATH)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # about 20 s on one thread, more on a loaded machine
def test_smoke_runs_every_phase_and_resumes(habit_fix, tmp_path: Path, monkeypatch):
    import torch

    torch.set_num_threads(1)
    tok = tiny_llm.build_tokenizer()
    model_dir = tmp_path / "model"
    tiny_llm.build_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
    out, results = tmp_path / "run", tmp_path / "r.json"
    argv = ["--preset", "smoke", "--model", str(model_dir), "--out", str(out), "--json", str(results)]
    res = habit_fix.main(argv)
    assert (out / "sft" / "checkpoint" / "config.json").exists()
    for phase, step in (("sft", 2), ("grpo", 1)):  # each resumes from its newest checkpoint
        assert (out / phase / f"checkpoint-{step}" / "trainer_state.json").exists()
    assert set(res["phases"]) == {"sft", "grpo", "rft", "continue_sft"}
    assert res["args"]["teacher"] == {"extra_searches": 1}
    for name in ("sft", "grpo", "rft", "continue_sft"):
        assert res[name]["redundant_searches_per_episode"] >= 0.0
        assert len(res[f"{name}_right"]) == round(3 * res[f"em_{name}"])
    for m in ("grpo", "rft", "continue_sft"):
        s = res["summary"][m]
        assert s["gained"] + s["lost"] <= 3 and 0.0 <= s["p_value"] <= 1.0
    assert res["grpo_budget"]["episodes"] == res["rft_budget"]["episodes"] == 2 * 2

    # Resume: a finished run runs nothing again; a run without its RFT results runs RFT only.
    calls: list[tuple[str, ...]] = []
    run = habit_fix.load_example().run

    def counted(a, *args, **kw):
        calls.append((*a.methods, a.sft_steps))
        return run(a, *args, **kw)

    real_load = habit_fix.load_example

    def load():
        module = real_load()
        monkeypatch.setattr(module, "run", counted)
        return module

    monkeypatch.setattr(habit_fix, "load_example", load)
    assert habit_fix.main(argv)["phases"] == res["phases"]
    assert calls == []
    saved = json.loads(results.read_text())
    del saved["phases"]["rft"]
    results.write_text(json.dumps(saved))
    again = habit_fix.main(argv)
    assert calls == [("rft", 0)]
    assert set(again["phases"]) == {"sft", "grpo", "rft", "continue_sft"}
    # An SFT whose training finished (its checkpoint saved) but not its evaluation: evaluated only.
    del saved["phases"]["sft"], saved["sft_budget"]
    results.write_text(json.dumps(saved))
    calls.clear()
    again = habit_fix.main(argv)
    assert calls == [(0,), ("rft", 0)]
    assert again["sft_budget"]["steps"] == res["sft_budget"]["steps"] == 2
