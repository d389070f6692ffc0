"""``examples/trl_grpo_tools.py`` end to end on a tiny random model (``--model tiny``): the SFT
warm-up, TRL's GRPOTrainer with hopgym's environment_factory, a checkpoint every step, and
``--resume`` going on from the last one without redoing the warm-up. Learning is not asserted
(the SmolLM2 run is in docs/integrations.md)."""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

PATH = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo_tools.py"


@pytest.mark.slow  # about 10 s on one thread
def test_run_then_resume_from_the_last_checkpoint(tmp_path: Path, monkeypatch):
    main = runpy.run_path(str(PATH))["main"]
    out, run = tmp_path / "r.json", tmp_path / "run"
    argv = ["x", "--model", "tiny", "--json", str(out), "--output-dir", str(run)]
    argv += ["--sft-steps", "2", "--questions", "8", "--group", "2", "--groups-per-step", "2"]
    argv += ["--max-completion-length", "32", "--max-turns", "2"]
    monkeypatch.setattr(sys, "argv", [*argv, "--steps", "1"])
    main()
    first = json.loads(out.read_text())
    assert first["complete"] and [h["step"] for h in first["grpo_history"]] == [1]
    assert len(first["sft_losses"]) == len(first["sft_completion_tokens"]) == 2
    assert first["settings"]["rollouts_per_step"] == 4
    assert (run / "checkpoint-1").is_dir() and out.with_suffix(".png").is_file()

    monkeypatch.setattr(sys, "argv", [*argv, "--steps", "2", "--resume"])
    main()
    second = json.loads(out.read_text())
    assert [h["step"] for h in second["grpo_history"]] == [1, 2]
    assert second["grpo_history"][0] == first["grpo_history"][0]  # step 1 read back, not rerun
    assert second["sft_losses"] == first["sft_losses"] and second["sft_seconds"] == first["sft_seconds"]
    assert (run / "checkpoint-2").is_dir() and not (run / "checkpoint-1").exists()
    for row in second["grpo_history"]:
        assert row["step_time"] > 0 and "grad_norm" in row and "tools/call_frequency" in row

    monkeypatch.setattr(sys, "argv", [*argv, "--output-dir", str(tmp_path / "empty"), "--resume"])
    with pytest.raises(SystemExit):  # no checkpoint to resume from: argparse's error
        main()
