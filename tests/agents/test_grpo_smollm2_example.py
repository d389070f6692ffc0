"""``examples/grpo_smollm2.py`` end to end on a tiny saved model (the smoke preset): SFT, GRPO,
RFT and continue-SFT run, held-out EM is written for each, and the baselines get GRPO's budget of
sampled episodes. Learning is not asserted (the SmolLM2 figures are in docs/training.md)."""

# ruff: noqa: F811  (test arguments take the imported fixtures' names)
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from train_fixtures import load_script, tiny_model_dir  # noqa: E402,F401  (fixtures)


@pytest.fixture
def example(load_script):
    return load_script("examples/grpo_smollm2.py", "grpo_smollm2_example")


@pytest.mark.slow  # about 15 s on one thread, more on a loaded machine
def test_smoke_preset_end_to_end_on_a_saved_model(example, tiny_model_dir: Path, tmp_path: Path, capsys):
    """A transformers folder (a tiny random Qwen2 and its BPE tokenizer), as --model DIR."""
    model_dir = tiny_model_dir
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
        assert len(result[f"{name}_right"]) == round(3 * result[f"em_{name}"])
        if name != "sft":  # question by question against the SFT, on the same 3 questions
            pair = result[f"{name}_vs_sft"]
            assert pair["gained"] - pair["lost"] == len(result[f"{name}_right"]) - len(result["sft_right"])
            assert 0.0 < pair["p_value"] <= 1.0
    assert result["test_questions"] == result["args"]["n_eval"] == 3
    assert result["args"]["model"] == str(model_dir)
    # Every baseline gets GRPO's budget of sampled episodes (B x G x steps = 2 x 2 x 1).
    assert result["budget_episodes"] == 4
    assert result["grpo_budget"]["episodes"] == result["rft_budget"]["episodes"] == 4
    assert result["continue_sft_budget"]["examples"] == 4
    assert result["sft_budget"]["steps"] == 2
    assert (out / "grpo" / "curves.png").exists()
    assert "em_sft" in capsys.readouterr().out
    assert [h["step"] for h in result["rft_history"]] == [1]
    args = example.make_args("smoke", {})
    assert result["train_fields"] == {p: args.train_fields(p) for p in ("sft", "grpo")}
    # A second seed from the saved SFT checkpoint, which the first run evaluated already.
    again = example.main(
        ["--preset", "smoke", "--model", str(out / "sft" / "checkpoint"), "--out", str(tmp_path / "b")]
        + ["--methods", "grpo", "--set", "sft_steps=0", "seed=1", "eval_start=False"]
    )
    assert "em_sft" not in again and "sft" not in again and 0.0 <= again["em_grpo"] <= 1.0
    # LoRA adapters for every method after SFT; each starts again from the SFT weights (a LoRA
    # layer left in the model would make the next method's load_state_dict fail).
    lora = example.main(
        ["--preset", "smoke", "--model", str(out / "sft" / "checkpoint"), "--out", str(tmp_path / "c")]
        + ["--set", "sft_steps=0", "eval_start=False", "lora_r=4"]
    )
    for name in ("grpo", "rft", "continue_sft"):
        counts = lora[f"{name}_lora"]
        assert counts["r"] == 4 and 0 < counts["trainable_params"] < counts["total_params"]
        assert 0.0 <= lora[f"em_{name}"] <= 1.0
    assert "grpo_lora" not in result
    # The curves of a finished run, drawn from its results file alone.
    png = tmp_path / "curves.png"
    assert example.main(["--curves", str(png), str(tmp_path / "r.json")]) == {"png": str(png)}
    assert png.stat().st_size > 1000


def test_settings_are_checked(example):
    assert example.make_args("cpu-quick", {}).episodes == 5 * 2 * 4
    assert example.make_args("smoke", {"env_kw.hops": 3}).env_kw["hops"] == 3
    with pytest.raises(SystemExit, match="unknown setting"):
        example.make_args("smoke", {"grpo_lrr": 1.0})
    # A baseline alone takes the budget GRPO would sample with the same settings.
    assert example.make_args("smoke", {"methods": ("rft",)}).episodes == 1 * 2 * 2
    with pytest.raises(ValueError, match="unknown methods"):
        example.make_args("smoke", {"methods": ("ppo",)})
    with pytest.raises(ValueError, match="group_size"):
        example.make_args("smoke", {"group_size": 1})
    with pytest.raises(ValueError, match="r must be >= 0"):
        example.make_args("smoke", {"lora_r": -2})
    # A micro-batch that does not divide a step's episodes, refused before the SFT runs.
    assert example.make_args("cpu-quick", {"micro_batch": 4}).micro_batch == 4
    with pytest.raises(ValueError, match=r"micro_batch_size \(3\) must divide the 8 episodes"):
        example.make_args("cpu-quick", {"micro_batch": 3})


def test_train_fields_follow_the_bf16_setting(example, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    fp32 = example.make_args("smoke", {"bf16": False})
    assert fp32.train_fields() == {"bf16": False, "gradient_checkpointing": False}
    # GRPO's step is one batch of B x G episodes: checkpointed unless told otherwise.
    assert fp32.train_fields("grpo") == {"bf16": False, "gradient_checkpointing": True}
    # transformers accepts bf16 without a GPU only with use_cpu.
    bf16 = example.make_args("smoke", {"bf16": True, "gradient_checkpointing": True}).train_fields()
    assert bf16 == {"bf16": True, "gradient_checkpointing": True, "use_cpu": True}
    monkeypatch.setattr(example, "bf16_supported", lambda: False)
    assert example.make_args("smoke", {}).train_fields()["bf16"] is False


def test_curves_need_a_history(example, tmp_path: Path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"args": {"seed": 0, "reward": "default"}}))
    with pytest.raises(SystemExit, match="no GRPO or RFT history"):
        example.main(["--curves", str(tmp_path / "c.png"), str(path)])
    path.write_text(json.dumps({"args": {"seed": 0, "reward": "em"}, "grpo_history": [{"step": 1}]}))
    with pytest.raises(SystemExit, match="both be drawn as 'GRPO seed 0 \\(em\\)'"):
        example.main(["--curves", str(tmp_path / "c.png"), str(path), str(path)])
    # A dynamic-sampling run is named apart from a plain one with the same seed and reward.
    rows = [{"step": 1, "env/reward": 0.25}, {"step": 2, "env/reward": 0.5}]
    path.write_text(json.dumps({"args": {"seed": 0, "reward": "em"}, "grpo_history": rows}))
    dynamic = tmp_path / "d.json"
    dynamic.write_text(
        json.dumps({"args": {"seed": 0, "reward": "em", "resample_rounds": 2}, "grpo_history": rows})
    )
    png = tmp_path / "two.png"
    assert example.main(["--curves", str(png), str(path), str(dynamic)]) == {"png": str(png)}
    assert png.stat().st_size > 1000


def test_paired_comparison_counts_and_exact_mcnemar(example):
    """Gained and lost questions, and the exact two-sided McNemar p-value (binomial, 1/2)."""
    assert example.paired(["a", "b"], ["a", "b"]) == {"gained": 0, "lost": 0, "p_value": 1.0}
    # 5 gained, 0 lost: 2 * 0.5**5
    assert example.paired([], list("abcde")) == {"gained": 5, "lost": 0, "p_value": 0.0625}
    # 7 gained, 2 lost, one kept: 2 * (1 + 9 + 36) / 2**9
    pair = example.paired(["x", "y", "k"], list("abcdefgk"))
    assert (pair["gained"], pair["lost"]) == (7, 2)
    assert pair["p_value"] == pytest.approx(92 / 512)
    assert example.paired(list("abc"), list("def"))["p_value"] == 1.0  # 3 vs 3: capped at 1


def test_cost_counts_are_the_cost_terms_over_their_scale(example):
    """An evaluation's repeated queries and search cost, from the reward terms' means: the
    over-searching, randomly routing teacher in the routing world, counted from its infos."""
    import gymnasium as gym

    import hopgym  # noqa: F401
    from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig

    costs = {
        "redundancy": {"query_penalty": 0.2, "query_similarity": 0.6},
        "search_cost": {"weight": 0.1, "per_search": 0.02},
    }
    kw = dict(hops=2, n_entities=100, n_questions=60, max_turns=8, reward="default")
    env = example.with_costs(gym.make("hopgym/SyntheticRouting-v1", **kw), costs)
    teacher = ImperfectTeacher(env, TeacherConfig(extra_searches=1, random_route=1.0), seed=0)
    qids = [s.id for s in env.unwrapped.task.samples][:12]
    terms: dict[str, float] = {}
    repeats = charged = 0.0
    for q in qids:
        teacher.reset()
        obs, info = env.reset(seed=0, options={"question_id": q})
        done = False
        while not done:
            obs, _, term, trunc, info = env.step(env.unwrapped.protocol.render(teacher.act(obs, info)))
            done = term or trunc
            for k, v in info["reward_terms"].items():
                terms[k] = terms.get(k, 0.0) + v
            repeats += info["reward_terms"].get("redundant_query", 0.0) < 0
        charged += 0.02 * info["searches"] + 1.0 * info["searches_by_source"]["web"]  # web costs 1
    stats = {f"reward_terms/{k}": v / len(qids) for k, v in terms.items()}
    counts = example.cost_counts(stats, costs)
    assert repeats > 0
    assert counts["redundant_searches_per_episode"] == pytest.approx(repeats / len(qids))
    assert counts["search_cost_per_episode"] == pytest.approx(charged / len(qids))
    assert example.cost_counts(stats, {}) == {}


def test_unanswered_cost_prices_only_an_episode_that_never_answers(example):
    """``costs={"unanswered": {"value": V}}``: V when the step budget ends the episode without an
    answer, nothing beside a wrong or a right answer (whose outcome the preset scores)."""
    import gymnasium as gym

    import hopgym  # noqa: F401

    costs = {"unanswered": {"value": -1.0}, "search_cost": {"per_search": 0.02}}

    def episode(turns: list[str]) -> tuple[float, dict[str, float]]:
        env = example.with_costs(gym.make("hopgym/Tiny-v1", reward="default", max_turns=2), costs)
        env.reset(seed=0)
        total, terms = 0.0, {}
        for turn in turns:
            _, r, term, trunc, info = env.step(turn)
            total += r
            for k, v in info["reward_terms"].items():
                terms[k] = terms.get(k, 0.0) + v
            if term or trunc:
                return total, terms
        raise AssertionError("the episode did not end")

    silent, terms = episode(["<search>q</search>", "<search>q again</search>"])
    assert terms["unanswered"] == -1.0 and terms["outcome"] == 0.0
    assert silent == pytest.approx(-1.0 - 2 * 0.02)
    wrong, terms = episode(["<search>q</search>", "<answer>nobody at all</answer>"])
    assert terms["unanswered"] == 0.0 and wrong == pytest.approx(-0.02)
    with pytest.raises(ValueError, match="unanswered cost term takes"):
        example.with_costs(gym.make("hopgym/Tiny-v1", reward="default"), {"unanswered": {"no_answer": -1}})
    with pytest.raises(ValueError, match="search_cost, redundancy, unanswered"):
        example.with_costs(gym.make("hopgym/Tiny-v1", reward="default"), {"format": {}})
