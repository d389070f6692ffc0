"""A GRPO or SFT run stopped after a checkpoint and resumed (TRL's ``resume_from_checkpoint``)
ends where the run that was never stopped ends: for GRPO, the same episodes at the resumed step,
the same weights, the log's rows of both steps; for SFT, the same weights."""

# ruff: noqa: F811  (test arguments take the imported fixtures' names)
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from test_train import FlatForSome, make_env, snapshot, tiny_model  # noqa: E402
from train_fixtures import tiny_grpo  # noqa: E402,F401  (fixtures)

from hopgym.agents.grpo import train_grpo  # noqa: E402
from hopgym.agents.scripted import OracleAgent  # noqa: E402
from hopgym.agents.sft import SFTRunConfig, teacher_examples, train_sft  # noqa: E402
from hopgym.agents.tiny_lm import build_tokenizer, task_texts  # noqa: E402
from hopgym.errors import InvalidOptionError  # noqa: E402


def _run(tiny_grpo, tok, qids, out: Path, steps: int, resume: str | None = None, resample_rounds: int = 0):
    model = tiny_model(tok)
    seen: list = []
    # With dynamic sampling, 4 of the 6 questions' groups have no variance and are replaced.
    flat = set(qids[:4]) if resample_rounds else set()
    run = train_grpo(
        model,
        tok,
        lambda: FlatForSome(make_env(None), flat),
        qids,
        tiny_grpo(
            out,
            track_kl=False,
            resample_rounds=resample_rounds,
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
    return snapshot(model), seen, [r["step"] for r in run.history if "loss" in r], run


@pytest.mark.parametrize("resample_rounds", [0, 2])
def test_resumed_run_matches_the_uninterrupted_one(tmp_path: Path, tiny_grpo, resample_rounds):
    """Also with dynamic sampling: the draws of the replacement groups go on as in the run that
    never stopped (their generator's state is saved with each checkpoint), and so do the counts
    of episodes and of replaced groups."""
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    kw = {"resample_rounds": resample_rounds}
    w_whole, eps_whole, steps_whole, whole = _run(tiny_grpo, tok, qids, tmp_path / "whole", 3, **kw)
    _run(tiny_grpo, tok, qids, tmp_path / "cut", 1, **kw)  # stopped after step 1 (checkpoint-1 saved)
    assert (tmp_path / "cut" / "checkpoint-1" / "trainer_state.json").exists()
    w_resumed, eps_resumed, steps_resumed, resumed = _run(
        tiny_grpo, tok, qids, tmp_path / "cut", 3, resume="last", **kw
    )
    assert steps_whole == steps_resumed == [1, 2, 3]
    assert eps_resumed == eps_whole[1:]  # only steps 2 and 3 sampled, with their seeds and draws
    for a, b in zip(w_whole, w_resumed, strict=True):
        torch.testing.assert_close(b, a)
    assert resumed.rollout.episodes == whole.rollout.episodes  # the steps before the checkpoint count
    assert resumed.rollout.groups_resampled == whole.rollout.groups_resampled
    if resample_rounds:
        assert whole.rollout.groups_resampled >= 2  # the test can fail: draws were made after step 1
    assert resumed.cpu_seconds > 0 and resumed.seconds > 0
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


def test_resuming_a_finished_run_loads_it_and_trains_no_step_more(tmp_path: Path, tiny_grpo):
    """A run stopped after its last step (before what came after it) and resumed: the last
    checkpoint's weights, log and counts, nothing sampled and no step more (transformers' loop
    alone would train one, and its checkpoint would replace the finished run's)."""
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    w_done, _, steps_done, done = _run(tiny_grpo, tok, qids, tmp_path / "done", 2)
    w_again, eps_again, steps_again, again = _run(tiny_grpo, tok, qids, tmp_path / "done", 2, resume="last")
    assert eps_again == [] and steps_again == steps_done == [1, 2]
    start = snapshot(tiny_model(tok))
    assert max((a - b).abs().max().item() for a, b in zip(start, w_done, strict=True)) > 1e-4
    for a, b in zip(w_done, w_again, strict=True):
        torch.testing.assert_close(b, a)
    assert again.rollout.episodes == done.rollout.episodes
    assert sorted(p.name for p in (tmp_path / "done").glob("checkpoint-*")) == [
        "checkpoint-1",
        "checkpoint-2",
    ]
    assert again.trainer.state.global_step == 2
    with pytest.raises(InvalidOptionError, match="of step 2, past this run's max_steps"):
        _run(tiny_grpo, tok, qids, tmp_path / "done", 1, resume="last")


def test_resuming_a_finished_sft_loads_it_and_trains_no_step_more(tmp_path: Path):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples][:4]
    examples = teacher_examples(lambda: make_env(None), lambda e: OracleAgent(e), qids, tok)
    runs = []
    for resume in (None, "last"):
        model = tiny_model(tok)
        # 2 steps of an epoch of 4 (the loop's own epoch count does not stop it after step 2).
        trl = {"max_steps": 2, "per_device_train_batch_size": 1, "learning_rate": 1e-2, "logging_steps": 1}
        trl |= {"save_strategy": "steps", "save_steps": 1, "resume_from_checkpoint": resume}
        trainer = train_sft(model, tok, examples, SFTRunConfig(output_dir=str(tmp_path), trl=trl))
        runs.append(
            (
                snapshot(model),
                trainer.state.global_step,
                [r["loss"] for r in trainer.state.log_history if "loss" in r],
            )
        )
    (w_done, step_done, loss_done), (w_again, step_again, loss_again) = runs
    assert step_done == step_again == 2 and loss_again == loss_done and len(loss_done) == 2
    for a, b in zip(w_done, w_again, strict=True):
        torch.testing.assert_close(b, a)
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
