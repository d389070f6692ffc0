"""A GRPO or SFT run stopped after a checkpoint and resumed (TRL's ``resume_from_checkpoint``)
ends where the run that was never stopped ends: for GRPO, the same episodes at the resumed step,
the same weights, the log's rows of both steps; for SFT, the same weights."""

# ruff: noqa: F811  (test arguments take the imported fixtures' names)
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from test_train import LengthReward, make_env, snapshot, tiny_model  # noqa: E402
from train_fixtures import tiny_grpo  # noqa: E402,F401  (fixtures)

from hopgym.agents.grpo import train_grpo  # noqa: E402
from hopgym.agents.scripted import OracleAgent  # noqa: E402
from hopgym.agents.sft import SFTRunConfig, teacher_examples, train_sft  # noqa: E402
from hopgym.agents.tiny_lm import build_tokenizer, task_texts  # noqa: E402
from hopgym.errors import InvalidOptionError  # noqa: E402


def _run(tiny_grpo, tok, qids, out: Path, steps: int, resume: str | None = None):
    model = tiny_model(tok)
    seen: list = []
    run = train_grpo(
        model,
        tok,
        lambda: LengthReward(make_env(None)),
        qids,
        tiny_grpo(
            out,
            track_kl=False,
            trl={
                "max_steps": steps,
                "num_generations": 2,
                "learning_rate": 1e-1,
                "optim": "sgd",
                "save_strategy": "steps",
                "save_steps": 1,
                "resume_from_checkpoint": resume,
            },
        ),
        on_trajectories=lambda t: seen.append([x.completion_ids for x in t]),
    )
    return snapshot(model), seen, [r["step"] for r in run.history if "loss" in r]


def test_resumed_run_matches_the_uninterrupted_one(tmp_path: Path, tiny_grpo):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    w_whole, eps_whole, steps_whole = _run(tiny_grpo, tok, qids, tmp_path / "whole", 2)
    _run(tiny_grpo, tok, qids, tmp_path / "cut", 1)  # stopped after step 1 (its checkpoint-1 saved)
    assert (tmp_path / "cut" / "checkpoint-1" / "trainer_state.json").exists()
    w_resumed, eps_resumed, steps_resumed = _run(tiny_grpo, tok, qids, tmp_path / "cut", 2, resume="last")
    assert steps_whole == steps_resumed == [1, 2]
    assert eps_resumed == eps_whole[1:]  # only step 2 sampled, with step 2's seed
    for a, b in zip(w_whole, w_resumed, strict=True):
        torch.testing.assert_close(b, a)
    with pytest.raises(InvalidOptionError, match="not a TRL checkpoint"):
        _run(tiny_grpo, tok, qids, tmp_path / "x", 1, resume=str(tmp_path / "nowhere"))


def test_resumed_sft_matches_the_uninterrupted_one(tmp_path: Path):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples][:4]
    examples = teacher_examples(lambda: make_env(None), lambda e: OracleAgent(e), qids, tok)

    def sft(out: Path, steps: int, resume: str | None = None) -> list:
        model = tiny_model(tok)
        trl = {"max_steps": steps, "per_device_train_batch_size": 2, "learning_rate": 1e-2}
        trl |= {"save_strategy": "steps", "save_steps": 1, "resume_from_checkpoint": resume}
        train_sft(model, tok, examples, SFTRunConfig(output_dir=str(out), trl=trl))
        return snapshot(model)

    whole = sft(tmp_path / "whole", 2)
    sft(tmp_path / "cut", 1)
    (tmp_path / "cut" / "checkpoint-7").mkdir()  # a save cut short: no trainer_state.json
    resumed = sft(tmp_path / "cut", 2, resume="last")
    start = snapshot(tiny_model(tok))
    assert max((a - b).abs().max().item() for a, b in zip(start, whole, strict=True)) > 1e-4
    for a, b in zip(whole, resumed, strict=True):
        torch.testing.assert_close(b, a)
