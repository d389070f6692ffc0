"""LoRA as an option of SFT, GRPO and rejection sampling: only the adapter trains, and the saved
policy loads (merged, with ``AutoModelForCausalLM``; the adapter alone, with ``PeftModel``)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
pytest.importorskip("peft")

from tiny_llm import build_model, one_thread, tokenizer  # noqa: E402,F401

import hopgym  # noqa: E402,F401
from hopgym.agents.grpo import GRPORunConfig, train_grpo  # noqa: E402
from hopgym.agents.lora import LoRAConfig, save_policy, trainable_parameters  # noqa: E402
from hopgym.agents.rft import RFTRunConfig, train_rft  # noqa: E402
from hopgym.agents.scripted import OracleAgent  # noqa: E402
from hopgym.agents.sft import SFTRunConfig, teacher_examples, train_sft  # noqa: E402
from hopgym.cli import main  # noqa: E402
from hopgym.errors import InvalidOptionError  # noqa: E402

LORA = LoRAConfig(r=4, alpha=8, dropout=0.0)


class LengthReward(gym.Wrapper):
    """A reward that varies within a group even for an untrained model: 0.01 per character."""

    def step(self, action):
        obs, reward, term, trunc, info = self.env.step(action)
        bonus = 0.01 * len(action) if isinstance(action, str) else 0.0
        info = {**info, "reward_terms": {**info.get("reward_terms", {}), "length": bonus}}
        return obs, reward + bonus, term, trunc, info


def make_env(reward: str | None = None) -> gym.Env:
    return gym.make("hopgym/Tiny-v1", reward=reward)


def qids() -> list[str]:
    return [s.id for s in make_env().unwrapped.task.samples]


def base_snapshot(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def check_adapter_only(before: dict[str, torch.Tensor], policy, tokenizer, out: Path) -> None:  # noqa: F811
    """Base weights as they were, adapter weights moved, and the saved policy loads."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    params = dict(policy.named_parameters())
    lora = {n: p for n, p in params.items() if "lora_" in n}
    assert lora and all(p.requires_grad for p in lora.values())
    base = {n: p for n, p in params.items() if "lora_" not in n}
    assert not any(p.requires_grad for p in base.values())
    # PEFT names a wrapped layer's weight ...<layer>.base_layer.weight under base_model.model.
    for name, p in base.items():
        orig = name.removeprefix("base_model.model.").replace(".base_layer.", ".")
        assert torch.equal(p.detach(), before[orig]), name
    assert any(n.endswith("lora_B.default.weight") and p.abs().sum() > 0 for n, p in lora.items())
    trainable, total = trainable_parameters(policy)
    assert trainable == sum(p.numel() for p in lora.values()) < total

    save_policy(policy, tokenizer, out)
    ids = torch.tensor([tokenizer.encode("Which city")])
    with torch.no_grad():
        want = policy(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(out).eval()
        assert torch.allclose(merged(input_ids=ids).logits, want, atol=1e-4)
        start = build_model(tokenizer)
        assert not torch.allclose(start(input_ids=ids).logits, want, atol=1e-4)  # it trained
        adapter = PeftModel.from_pretrained(start, out / "adapter").eval()
        assert torch.allclose(adapter(input_ids=ids).logits, want, atol=1e-4)
    assert "lora_" not in "".join(n for n, _ in merged.named_parameters())


@pytest.mark.slow
def test_sft_with_lora_trains_only_the_adapter(tmp_path: Path, tokenizer):  # noqa: F811
    model = build_model(tokenizer)
    before = base_snapshot(model)
    examples = teacher_examples(make_env, lambda e: OracleAgent(e), qids()[:4], tokenizer)
    trainer = train_sft(
        model,
        tokenizer,
        examples,
        SFTRunConfig(
            output_dir=str(tmp_path / "run"),
            trl={"max_steps": 3, "per_device_train_batch_size": 2, "learning_rate": 5e-2},
        ),
        lora=LORA,
    )
    check_adapter_only(before, trainer.model, tokenizer, tmp_path / "out")


@pytest.mark.slow
def test_grpo_with_lora_trains_only_the_adapter(tmp_path: Path, tokenizer):  # noqa: F811
    model = build_model(tokenizer)
    before = base_snapshot(model)
    run = train_grpo(
        model,
        tokenizer,
        lambda: LengthReward(make_env()),
        qids(),
        GRPORunConfig(
            output_dir=str(tmp_path / "run"),
            questions_per_step=2,
            max_new_tokens=8,
            plot=False,
            trl={
                "max_steps": 2,
                "num_generations": 3,
                "learning_rate": 5e-2,
                "beta": 0.1,
                "max_completion_length": 120,
            },
        ),
        lora=LORA,
    )
    assert run.trainer.state.global_step == 2
    assert not (tmp_path / "run" / "kl_reference").exists()  # the reference is the adapter switched off
    check_adapter_only(before, run.trainer.model, tokenizer, tmp_path / "out")


@pytest.mark.slow
def test_rft_with_lora_trains_only_the_adapter(tmp_path: Path, tokenizer):  # noqa: F811
    model = build_model(tokenizer)
    before = base_snapshot(model)
    res = train_rft(
        model,
        tokenizer,
        lambda: LengthReward(make_env()),
        qids(),
        RFTRunConfig(
            output_dir=str(tmp_path / "run"),
            max_rounds=2,
            questions_per_round=2,
            group_size=2,
            min_reward=-100.0,  # keep everything: the point is which weights train
            batch_size=4,
            learning_rate=5e-2,
            max_new_tokens=8,
            max_completion_tokens=120,
            plot=False,
        ),
        lora=LORA,
    )
    assert res.optimizer_steps == 2 and res.kept == 8
    check_adapter_only(before, res.model, tokenizer, tmp_path / "out")


@pytest.mark.slow
def test_cli_train_sft_with_lora(tmp_path: Path, capsys):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "sft"
    argv = ["train", "sft", "--env", "hopgym/Tiny-v1", "--model", "tiny", "--split", "none"]
    argv += ["--tiny", "layers=1", "hidden=32", "heads=2", "ffn=64", "max_positions=512"]
    argv += ["--out", str(out), "--steps", "2", "--batch-size", "2", "--max-length", "400"]
    argv += ["--lora-r", "4", "--lora-target-modules", "q_proj,v_proj", "--lora-dropout", "0"]
    assert main(argv) == 0
    meta = json.loads((out / "hopgym_train.json").read_text())
    summary = meta["summary"]
    assert summary["changed_tensors"] == 0  # the starting model's tensors: all frozen
    assert 0 < summary["lora"]["trainable_params"] < summary["lora"]["total_params"]
    assert meta["configs"]["lora"]["target_modules"] == ["q_proj", "v_proj"]
    adapter = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["q_proj", "v_proj"]
    AutoModelForCausalLM.from_pretrained(out)
    capsys.readouterr()


def test_lora_options_are_checked():
    peft_cfg = LoRAConfig(r=8, target_modules=["q_proj"]).peft_config()
    assert (peft_cfg.r, peft_cfg.lora_alpha, set(peft_cfg.target_modules)) == (8, 16, {"q_proj"})
    assert LoRAConfig(r=2).peft_config().target_modules == "all-linear"
    assert LoRAConfig().peft_config() is None
    for bad in ({"r": -1}, {"r": 4, "alpha": 0}, {"r": 4, "dropout": 1.0}, {"r": 4, "target_modules": []}):
        with pytest.raises(InvalidOptionError):
            LoRAConfig(**bad)
    # Adapter options without a rank are a mistake, not silently full fine-tuning.
    argv = ["train", "rft", "--env", "hopgym/Tiny-v1", "--model", "tiny", "--lora-alpha", "32"]
    with pytest.raises(SystemExit, match="--lora-alpha describe a LoRA adapter: add --lora-r"):
        main(argv)
