"""``hopgym train sft|grpo`` end to end with a tiny model: parameters change, masks are right.

These assert that training runs and touches the weights through the right masks, not that reward
rises (``examples/grpo_synthetic.py`` measures learning).
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

import hopgym  # noqa: E402,F401
from hopgym.agents.grpo import EnvReward, GRPORunConfig, train_grpo  # noqa: E402
from hopgym.agents.rollout import Trajectory  # noqa: E402
from hopgym.agents.scripted import OracleAgent  # noqa: E402
from hopgym.agents.sft import SFTRunConfig, teacher_examples, train_sft  # noqa: E402
from hopgym.agents.tiny_lm import (  # noqa: E402
    TinyLMConfig,
    build_model,
    build_tokenizer,
    task_texts,
)
from hopgym.cli import main  # noqa: E402

TINY_ARGS = ["--tiny", "layers=1", "hidden=32", "heads=2", "ffn=64", "max_positions=512"]


def make_env(reward: str | None = "searchr1") -> gym.Env:
    return gym.make("hopgym/Tiny-v1", reward=reward)


class LengthReward(gym.Wrapper):
    """A test reward that varies within a group even for an untrained model: 0.01 per character."""

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        bonus = 0.01 * len(action) if isinstance(action, str) else 0.0
        info = {**info, "reward_terms": {**info.get("reward_terms", {}), "length": bonus}}
        return obs, reward + bonus, term, trunc, info


def snapshot(model) -> list:
    return [p.detach().clone() for p in model.parameters()]


def changed(before, model) -> int:
    return sum(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters(),
                                                              strict=True))


@pytest.mark.slow
def test_cli_train_sft_then_grpo(tmp_path: Path, capsys):
    sft_out, grpo_out = tmp_path / "sft", tmp_path / "grpo"
    assert main(["train", "sft", "--env", "hopgym/Tiny-v1", "--model", "tiny", *TINY_ARGS,
                 "--out", str(sft_out), "--split", "none", "--steps", "3", "--batch-size", "4",
                 "--max-length", "400", "--logging-steps", "1"]) == 0
    summary = json.loads((sft_out / "hopgym_train.json").read_text())["summary"]
    assert summary["steps"] == 3 and summary["changed_tensors"] > 0
    assert summary["teacher_em"] == 1.0
    assert (sft_out / "tokenizer.json").exists() and (sft_out / "config.json").exists()
    assert main(["train", "grpo", "--env", "hopgym/Tiny-v1", "--model", str(sft_out),
                 "--out", str(grpo_out), "--split", "none", "--reward", "kunlun",
                 "--steps", "2", "--questions-per-step", "2", "--group-size", "2",
                 "--max-length", "200", "--max-new-tokens", "12", "--logging-steps", "1",
                 "--lr", "1e-2"]) == 0
    summary = json.loads((grpo_out / "hopgym_train.json").read_text())["summary"]
    assert summary["steps"] == 2 and summary["reward"] == "kunlun"
    assert (grpo_out / "curves.png").exists()
    logs = [json.loads(line) for line in (grpo_out / "log.jsonl").read_text().splitlines()]
    assert any("env/em" in row and "env/invalid_rate" in row for row in logs)
    assert any("env/reward_terms/outcome" in row and "env/reward_terms/format" in row
               for row in logs)
    capsys.readouterr()


@pytest.mark.slow
def test_sft_labels_mask_env_tokens(tmp_path: Path):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = build_model(TinyLMConfig(layers=1, hidden=32, heads=2, ffn=64), tok, seed=0)
    qids = [s.id for s in env.unwrapped.task.samples]
    exs = teacher_examples(lambda: make_env(None), lambda e: OracleAgent(e), qids, tok)
    before = snapshot(model)
    trainer = train_sft(model, tok, exs, SFTRunConfig(
        output_dir=str(tmp_path), max_steps=2, batch_size=3, warmup_steps=0, logging_steps=1))
    assert changed(before, model) > 0
    # TRL turned completion_mask into labels: -100 exactly on env tokens.
    for row, ex in zip(trainer.train_dataset, exs, strict=True):
        assert row["input_ids"] == ex["input_ids"]
        assert row["labels"] == [i if m else -100 for i, m in
                                 zip(ex["input_ids"], ex["completion_mask"], strict=True)]


@pytest.mark.slow
def test_grpo_rollouts_reach_trl_with_env_mask(tmp_path: Path):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = build_model(TinyLMConfig(layers=1, hidden=32, heads=2, ffn=64), tok, seed=0)
    seen: list[Trajectory] = []
    before = snapshot(model)
    trainer = train_grpo(
        model, tok, lambda: LengthReward(make_env(None)),
        [s.id for s in env.unwrapped.task.samples],
        GRPORunConfig(output_dir=str(tmp_path), max_steps=2, questions_per_step=2, group_size=3,
                      learning_rate=1e-2, max_new_tokens=8, max_completion_tokens=120,
                      plot=False),
        on_trajectories=seen.extend)
    assert trainer.state.global_step == 2 and changed(before, model) > 0
    assert len(seen) == 2 * 2 * 3
    # TRL's RepeatSampler hands each question G times in a row: groups are one question each.
    for g in range(0, len(seen), 3):
        assert len({t.question_id for t in seen[g:g + 3]}) == 1
    for t in seen:
        assert len(t.mask) == len(t.completion_ids) == len(t.logprobs)
        assert t.mask[-1] == 0 and set(t.mask) <= {0, 1} and 1 in t.mask
    hist = trainer.hopgym_history
    assert any("env/searches_per_episode" in h and "env/reward_terms/length" in h for h in hist)


def test_env_reward_and_config_checks():
    assert EnvReward()(prompts=["a", "b"], completions=["x", "y"], env_reward=[1, 0.5]) == [1.0,
                                                                                            0.5]
    with pytest.raises(ValueError, match="env_reward"):
        EnvReward()(prompts=["a"], completions=["x"])
    with pytest.raises(ValueError, match="group_size"):
        GRPORunConfig(group_size=1)
    with pytest.raises(ValueError, match="warmup_steps"):
        SFTRunConfig(max_steps=5, warmup_steps=5)
    with pytest.raises(ValueError, match="heads"):
        TinyLMConfig(hidden=30, heads=4)
