"""``hopgym train sft|grpo|rft`` end to end with a tiny model: parameters change, masks are right.

These assert that training runs and touches the weights through the right masks, not that reward
rises (``examples/grpo_synthetic.py`` measures learning).
"""

# ruff: noqa: F811  (test arguments take the imported fixtures' names)
from __future__ import annotations

import json
import types
from pathlib import Path

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from train_fixtures import load_script, tiny_grpo  # noqa: E402,F401  (fixtures)

import hopgym  # noqa: E402,F401
from hopgym.agents.grpo import EnvReward, EnvRolloutFunc, GRPORunConfig, train_grpo  # noqa: E402
from hopgym.agents.rft import (  # noqa: E402
    RFTRunConfig,
    keep_best,
    keep_correct,
    train_rft,
    trajectory_example,
)
from hopgym.agents.rollout import RolloutConfig, Trajectory, frozen_copy  # noqa: E402
from hopgym.agents.scripted import OracleAgent  # noqa: E402
from hopgym.agents.sft import (  # noqa: E402
    EntityRenamer,
    SFTRunConfig,
    teacher_examples,
    train_sft,
)
from hopgym.agents.teachers import ImperfectTeacher, TeacherConfig  # noqa: E402
from hopgym.agents.tiny_lm import (  # noqa: E402
    TinyLMConfig,
    build_model,
    build_tokenizer,
    task_texts,
)
from hopgym.cli import main  # noqa: E402
from hopgym.errors import InvalidOptionError  # noqa: E402

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


def tiny_model(tok, seed: int = 0):
    """The one-layer tiny model of these tests (and of the GRPO tests that import it)."""
    return build_model(TinyLMConfig(layers=1, hidden=32, heads=2, ffn=64), tok, seed=seed)


def snapshot(model) -> list:
    return [p.detach().clone() for p in model.parameters()]


def changed(before, model) -> int:
    return sum(not torch.equal(a, b.detach()) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.slow
def test_cli_train_sft_then_grpo(tmp_path: Path, capsys):
    sft_out, grpo_out = tmp_path / "sft", tmp_path / "grpo"
    assert (
        main(
            [
                "train",
                "sft",
                "--env",
                "hopgym/Tiny-v1",
                "--model",
                "tiny",
                *TINY_ARGS,
                "--out",
                str(sft_out),
                "--split",
                "none",
                "--steps",
                "3",
                "--batch-size",
                "4",
                "--max-length",
                "400",
                "--logging-steps",
                "1",
            ]
        )
        == 0
    )
    summary = json.loads((sft_out / "hopgym_train.json").read_text())["summary"]
    assert summary["steps"] == 3 and summary["changed_tensors"] > 0
    assert summary["teacher_em"] == 1.0
    assert (sft_out / "tokenizer.json").exists() and (sft_out / "config.json").exists()
    sft_err = capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "grpo",
                "--env",
                "hopgym/Tiny-v1",
                "--model",
                str(sft_out),
                "--out",
                str(grpo_out),
                "--split",
                "none",
                "--reward",
                "kunlun",
                "--steps",
                "2",
                "--questions-per-step",
                "2",
                "--group-size",
                "2",
                "--max-length",
                "200",
                "--max-new-tokens",
                "12",
                "--logging-steps",
                "1",
                "--lr",
                "1e-2",
            ]
        )
        == 0
    )
    summary = json.loads((grpo_out / "hopgym_train.json").read_text())["summary"]
    assert summary["steps"] == 2 and summary["reward"] == "kunlun"
    assert (grpo_out / "curves.png").exists()
    logs = [json.loads(line) for line in (grpo_out / "log.jsonl").read_text().splitlines()]
    assert any("env/em" in row and "env/invalid_rate" in row for row in logs)
    assert any("env/reward_terms/outcome" in row and "env/reward_terms/format" in row for row in logs)
    for err, command, steps in ((sft_err, "sft", 3), (capsys.readouterr().err, "grpo", 2)):
        lines = err.splitlines()
        # progress: steps, seconds per step, time left (outside a terminal, at the first and last step)
        progress = [line for line in lines if " s/step · " in line]
        assert [line.split(" · ")[0] for line in progress] == [
            f"{command} step 1/{steps}",
            f"{command} step {steps}/{steps}",
        ]
        assert all(" left" in line for line in progress)
        # library warnings: one line each, none twice, no source line under them
        warned = [line for line in lines if line.split(":")[0].endswith("Warning")]
        assert len(warned) == len(set(warned)) and not any(line.startswith("  ") for line in lines)


@pytest.mark.slow
def test_sft_labels_mask_env_tokens(tmp_path: Path):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = tiny_model(tok)
    qids = [s.id for s in env.unwrapped.task.samples]
    exs = teacher_examples(lambda: make_env(None), lambda e: OracleAgent(e), qids, tok)
    before = snapshot(model)
    trainer = train_sft(
        model,
        tok,
        exs,
        SFTRunConfig(
            output_dir=str(tmp_path),
            trl={"max_steps": 2, "per_device_train_batch_size": 3, "warmup_steps": 0, "logging_steps": 1},
        ),
    )
    assert changed(before, model) > 0
    # TRL turned completion_mask into labels: -100 exactly on env tokens.
    for row, ex in zip(trainer.train_dataset, exs, strict=True):
        assert row["input_ids"] == ex["input_ids"]
        assert row["labels"] == [
            i if m else -100 for i, m in zip(ex["input_ids"], ex["completion_mask"], strict=True)
        ]
    # The Trainer left an instance-level forward wrapper on the model that calls the original
    # model; the KL reference must not run the live weights through it.
    ref = frozen_copy(model)
    x = torch.tensor([exs[0]["input_ids"]])
    with torch.no_grad():
        before_ref = ref(input_ids=x).logits.clone()
        for p in model.parameters():
            p.add_(0.1)
        assert torch.equal(ref(input_ids=x).logits, before_ref)
        assert not torch.allclose(model(input_ids=x).logits, before_ref)


@pytest.mark.slow
def test_grpo_rollouts_reach_trl_with_env_mask(tmp_path: Path, tiny_grpo):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = tiny_model(tok)
    seen: list[Trajectory] = []
    before = snapshot(model)
    run = train_grpo(
        model,
        tok,
        lambda: LengthReward(make_env(None)),
        [s.id for s in env.unwrapped.task.samples],
        tiny_grpo(tmp_path, trl={"max_steps": 2, "num_generations": 3, "learning_rate": 1e-2}),
        on_trajectories=seen.extend,
    )
    trainer = run.trainer
    assert trainer.state.global_step == 2 and changed(before, model) > 0
    assert len(seen) == 2 * 2 * 3
    # TRL's RepeatSampler hands each question G times in a row: groups are one question each.
    for g in range(0, len(seen), 3):
        assert len({t.question_id for t in seen[g : g + 3]}) == 1
    for t in seen:
        assert len(t.mask) == len(t.completion_ids) == len(t.logprobs)
        assert t.mask[-1] == 0 and set(t.mask) <= {0, 1} and 1 in t.mask
    hist = run.history
    assert any("env/searches_per_episode" in h and "env/reward_terms/length" in h for h in hist)
    assert not hasattr(trainer, "hopgym_history")  # nothing patched onto TRL's trainer


class FlatForSome(LengthReward):
    """LengthReward, except that the questions in ``flat`` always earn 0: their groups have no variance."""

    def __init__(self, env: gym.Env, flat: set[str]) -> None:
        super().__init__(env)
        self.flat = flat

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        return obs, 0.0 if self.env.unwrapped.sample.id in self.flat else reward, term, trunc, info


def _flat_run(tmp_path: Path, rounds: int, tiny_grpo):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    flat = set(qids[:4])  # 4 of the 6 questions give groups without variance
    model = tiny_model(tok)
    seen: list[Trajectory] = []
    run = train_grpo(
        model,
        tok,
        lambda: FlatForSome(make_env(None), flat),
        qids,
        tiny_grpo(
            tmp_path / str(rounds),
            track_kl=False,
            resample_rounds=rounds,
            trl={"max_steps": 3, "num_generations": 3, "learning_rate": 1e-2},
        ),
        on_trajectories=seen.extend,
    )
    groups = [seen[g : g + 3] for g in range(0, len(seen), 3)]
    return run, groups, flat


@pytest.mark.slow
def test_grpo_dynamic_sampling_replaces_groups_without_variance(tmp_path: Path, tiny_grpo):
    # Without it, the sampler hands flat questions' groups to the loss; with it, each is
    # replaced by a group of a question drawn from the pool until it varies (or rounds run out).
    run0, groups0, flat = _flat_run(tmp_path, 0, tiny_grpo)
    assert sum(g[0].question_id in flat for g in groups0) >= 2  # the test can fail
    run, groups, flat = _flat_run(tmp_path, 8, tiny_grpo)
    rollout = run.rollout
    assert len(groups) == 3 * 2 and all(len({t.question_id for t in g}) == 1 for g in groups)
    kept_flat = sum(g[0].question_id in flat for g in groups)
    steps = [h for h in run.history if "env/groups_resampled" in h]
    assert len(steps) == 3 and sum(h["env/zero_std_kept"] for h in steps) == kept_flat
    resampled = sum(h["env/groups_resampled"] for h in steps)
    assert resampled == rollout.groups_resampled >= 2
    assert kept_flat == 0  # 8 rounds at 2 flat draws in 3: (2/3)^8 per group, and the seed is fixed
    # Every episode sampled counts, the discarded ones too.
    assert rollout.episodes == 3 * 2 * 3 + 3 * resampled
    assert [h["frac_reward_zero_std"] for h in run.history if "frac_reward_zero_std" in h] == [0.0] * 3


def test_grpo_warns_in_one_line_when_no_group_varies(tmp_path: Path, caplog, tiny_grpo):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    model = tiny_model(tok)
    before = snapshot(model)
    with caplog.at_level("WARNING", logger="hopgym.agents.grpo"):
        run = train_grpo(
            model,
            tok,
            lambda: FlatForSome(make_env(None), set(qids[:-1])),  # only the last question's groups vary
            [qids[-1], qids[0], qids[1], qids[2]],  # step 1 has a group that varies, step 2 none
            tiny_grpo(
                tmp_path, track_kl=False, trl={"max_steps": 2, "num_generations": 3, "shuffle_dataset": False}
            ),
        )
    warnings = [r.getMessage() for r in caplog.records if "reward variance" in r.getMessage()]
    rows = [h for h in run.history if "frac_reward_zero_std" in h]
    flat_steps = [h["step"] for h in rows if h["frac_reward_zero_std"] == 1.0]
    assert flat_steps and len(flat_steps) < len(rows)  # both kinds of step happened: the test can fail
    assert [int(w.split(":")[0].removeprefix("GRPO step ")) for w in warnings] == flat_steps
    assert all("\n" not in w and "--group-size" in w for w in warnings)
    assert run.rollout.steps_without_variance == len(flat_steps)
    assert changed(before, model) > 0  # the step with variance trained


@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_grpo_micro_batches_give_the_one_pass_update(tmp_path: Path, loss_type: str, tiny_grpo):
    # A step's 2 x 3 episodes through the loss in one pass, or in passes of 2 and of 3 with the
    # gradients accumulated: the same rollouts (one per step) and, with plain SGD, the same weights.
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]
    weights, rollouts = [], []
    for micro in (None, 2, 3):
        model = tiny_model(tok)
        seen: list[Trajectory] = []
        run = train_grpo(
            model,
            tok,
            lambda: LengthReward(make_env(None)),
            qids,
            tiny_grpo(
                tmp_path / str(micro),
                micro_batch_size=micro,
                track_kl=False,
                trl={
                    "max_steps": 1,
                    "num_generations": 3,
                    "learning_rate": 1e-1,
                    "optim": "sgd",
                    "loss_type": loss_type,
                },
            ),
            on_trajectories=seen.extend,
        )
        args = run.trainer.args
        passes = 1 if micro is None else 6 // micro
        assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (6 // passes, passes)
        weights.append(snapshot(model))
        rollouts.append([t.completion_ids for t in seen])
    start = snapshot(tiny_model(tok))
    assert rollouts[0] == rollouts[1] == rollouts[2] and len(rollouts[0]) == 6
    # The step moves weights by ~1e-3, so a pass scaled wrongly (say 1/2 or 1/3) would show.
    assert max((a - b).abs().max().item() for a, b in zip(start, weights[0], strict=True)) > 1e-3
    for other in weights[1:]:
        for a, b in zip(weights[0], other, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    with pytest.raises(InvalidOptionError, match=r"micro_batch_size \(4\) must divide the 6 episodes"):
        GRPORunConfig(questions_per_step=2, micro_batch_size=4, trl={"num_generations": 3}).trl_config()
    with pytest.raises(InvalidOptionError, match="micro_batch_size must be >= 1"):
        GRPORunConfig(micro_batch_size=0)
    with pytest.raises(InvalidOptionError, match="gradient_accumulation_steps is set by hopgym"):
        GRPORunConfig(trl={"gradient_accumulation_steps": 2}).trl_config()


def test_grpo_kl_reference_is_the_starting_model(tmp_path: Path, tiny_grpo):
    # beta > 0 with a model built in memory (no path for TRL to load a reference from).
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = tiny_model(tok)
    before = snapshot(model)
    trainer = train_grpo(
        model,
        tok,
        lambda: LengthReward(make_env(None)),
        [s.id for s in env.unwrapped.task.samples],
        tiny_grpo(tmp_path, trl={"max_steps": 2, "num_generations": 2, "learning_rate": 1e-2, "beta": 0.5}),
    ).trainer
    assert changed(before, model) > 0
    ref = dict(trainer.ref_model.named_parameters())
    assert all(
        torch.equal(ref[name], b) for (name, _), b in zip(model.named_parameters(), before, strict=True)
    )
    assert model.config._name_or_path == ""
    assert any(h.get("kl", 0) > 0 for h in trainer.state.log_history)


def test_env_reward_and_config_checks():
    assert EnvReward()(prompts=["a", "b"], completions=["x", "y"], env_reward=[1, 0.5]) == [1.0, 0.5]
    with pytest.raises(ValueError, match="env_reward"):
        EnvReward()(prompts=["a"], completions=["x"])
    # TRL checks its own fields; hopgym refuses unknown names, the fields it sets, and sampling
    # its rollouts cannot do, all as typed errors.
    with pytest.raises(InvalidOptionError, match="at least 2 generations"):
        GRPORunConfig(trl={"num_generations": 1}).trl_config()
    with pytest.raises(InvalidOptionError, match="did you mean 'learning_rate'"):
        GRPORunConfig(trl={"learnin_rate": 1e-5}).trl_config()
    with pytest.raises(InvalidOptionError, match="per_device_train_batch_size is set by hopgym"):
        GRPORunConfig(trl={"per_device_train_batch_size": 4}).trl_config()
    with pytest.raises(InvalidOptionError, match="temperature must be > 0"):
        GRPORunConfig(trl={"temperature": 0.0}).trl_config()
    with pytest.raises(InvalidOptionError, match="max_completion_length"):
        GRPORunConfig(max_new_tokens=64, trl={"max_completion_length": 32}).trl_config()
    with pytest.raises(InvalidOptionError, match="resample_rounds must be >= 0"):
        GRPORunConfig(resample_rounds=-1)
    with pytest.raises(InvalidOptionError, match="needs a question_pool"):
        EnvRolloutFunc(make_env, tokenizer=None, config=RolloutConfig(), resample_rounds=1)
    with pytest.raises(InvalidOptionError, match="completion_only_loss is set by hopgym"):
        SFTRunConfig(trl={"completion_only_loss": False}).trl_config()
    with pytest.raises(InvalidOptionError, match="each round sets learning_rate"):
        RFTRunConfig(trl={"learning_rate": 1e-3})
    # hopgym's defaults under the user's fields; what hopgym derives on top.
    args = GRPORunConfig(
        output_dir="o", questions_per_step=3, trl={"num_generations": 4, "beta": 0.04}
    ).trl_config()
    assert (args.output_dir, args.per_device_train_batch_size, args.beta, args.max_steps) == (
        "o",
        12,
        0.04,
        100,
    )
    assert args.bf16 is False or torch.cuda.is_available()  # TRL's own default is bf16 on CPU too
    sft = SFTRunConfig(trl={"max_steps": 5}).trl_config()
    assert (sft.max_steps, sft.learning_rate, sft.completion_only_loss) == (5, 1e-3, True)
    with pytest.raises(ValueError, match="heads"):
        TinyLMConfig(hidden=30, heads=4)


# ---------------------------------------------------------------- rejection sampling (RFT)


def test_keep_correct_and_trajectory_examples():
    good = Trajectory(
        "q", [1, 2], completion_ids=[3, 4, 5], logprobs=[-1.0, 0.0, -2.0], mask=[1, 0, 1], em=1.0, reward=1.0
    )
    bad = Trajectory("q", [1, 2], completion_ids=[3], logprobs=[-1.0], mask=[1], em=0.0, reward=0.3)
    assert keep_correct([good, bad]) == [good]
    assert keep_correct([good, bad], min_reward=0.2) == [good, bad]
    assert keep_correct([{"em": 0.0, "reward": 0.0}, {"em": 1.0, "reward": 1.0}]) == [
        {"em": 1.0, "reward": 1.0}
    ]
    ex = trajectory_example(good)
    assert ex["input_ids"] == [1, 2, 3, 4, 5]
    assert ex["completion_mask"] == [0, 0, 1, 0, 1]
    with pytest.raises(ValueError, match="group_size"):
        RFTRunConfig(group_size=0)
    with pytest.raises(ValueError, match="temperature"):
        RFTRunConfig(temperature=0.0)
    with pytest.raises(ValueError, match="time_limit_clock"):
        RFTRunConfig(time_limit_clock="cpu")
    with pytest.raises(ValueError, match="env_workers"):
        RFTRunConfig(env_workers=-1)


def test_keep_best_keeps_each_questions_highest_return_among_the_kept():
    def t(q: str, em: float, reward: float) -> Trajectory:
        return Trajectory(q, [], em=em, reward=reward)

    a_cheap, a_dear, a_tie = t("a", 1.0, 0.9), t("a", 1.0, 0.6), t("a", 1.0, 0.9)
    b_wrong_high, b_right = t("b", 0.0, 1.5), t("b", 1.0, 0.4)
    c_wrong = t("c", 0.0, 0.0)
    got = keep_best([a_cheap, a_dear, b_wrong_high, a_tie, b_right, c_wrong])
    # Ties stay; a wrong episode is never kept, however high its return; order is kept.
    assert got == [a_cheap, a_tie, b_right]
    # With min_reward the same rule picks the candidates: b's 1.5 now counts.
    assert keep_best([a_cheap, a_dear, b_wrong_high, b_right], min_reward=0.5) == [a_cheap, b_wrong_high]
    assert keep_best([c_wrong]) == []
    with pytest.raises(ValueError, match="keep must be one of"):
        RFTRunConfig(keep="all")


@pytest.mark.slow
def test_rft_stopped_after_a_round_resumes_to_the_same_run(tmp_path: Path):
    """A run saved after round 2 and resumed from it ends as the 3-round run that never stopped:
    the same history (questions, samples, kept episodes) and the same weights."""
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples]

    def run(out: Path, rounds: int, resume: str | None = None):
        cfg = RFTRunConfig(
            output_dir=str(out),
            max_rounds=rounds,
            questions_per_round=2,
            group_size=3,
            min_reward=1.3,
            keep="best",
            batch_size=2,
            learning_rate=1e-2,
            max_new_tokens=8,
            max_completion_tokens=120,
            save_rounds=True,
            resume_from_checkpoint=resume,
            plot=False,
        )
        model = tiny_model(tok)
        return model, train_rft(model, tok, lambda: LengthReward(make_env(None)), qids, cfg)

    whole_model, whole = run(tmp_path / "whole", 3)
    run(tmp_path / "stopped", 2)
    assert sorted(p.name for p in (tmp_path / "stopped").glob("*round-*")) == ["round-2"]  # the newest
    resumed_model, resumed = run(tmp_path / "stopped", 3, resume="last")
    assert 0 < whole.kept < whole.episodes  # "best" kept some episodes, not all
    drop = ("cpu_seconds",)
    assert [{k: v for k, v in r.items() if k not in drop} for r in resumed.history] == [
        {k: v for k, v in r.items() if k not in drop} for r in whole.history
    ]
    assert (resumed.rounds, resumed.episodes, resumed.kept, resumed.optimizer_steps) == (
        whole.rounds,
        whole.episodes,
        whole.kept,
        whole.optimizer_steps,
    )
    for a, b in zip(whole_model.parameters(), resumed_model.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    rows = (tmp_path / "stopped" / "log.jsonl").read_text().splitlines()
    assert [json.loads(r)["step"] for r in rows] == [1, 2, 3]
    assert resumed.cpu_seconds >= resumed.history[1]["cpu_seconds"]  # the stopped run's time counts
    with pytest.raises(ValueError, match="not a saved RFT round"):
        run(tmp_path / "x", 1, resume=str(tmp_path / "whole"))


def test_env_workers_reach_the_rollout_collector(monkeypatch, tmp_path: Path):
    """``env_workers`` of the GRPO and RFT configs is the collector's (Ray envs there are tested
    in tests/envs/test_ray_vector.py); the runs stop at the collector here."""
    from hopgym.agents import grpo, rft

    seen = []

    class Stop(Exception):
        pass

    def collector(model, tok, env_fn, config, *args, **kwargs):
        seen.append(config.env_workers)
        raise Stop

    def rollout_func(env_fn, tok, config, *args, **kwargs):
        seen.append(config.env_workers)
        raise Stop

    monkeypatch.setattr(rft, "RolloutCollector", collector)
    monkeypatch.setattr(grpo, "EnvRolloutFunc", rollout_func)
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = tiny_model(tok)
    with pytest.raises(Stop):
        train_rft(
            model,
            tok,
            lambda: make_env("default"),
            ["tiny-1"],
            RFTRunConfig(output_dir=str(tmp_path), env_workers=3, max_new_tokens=8, max_completion_tokens=64),
        )
    with pytest.raises(Stop):
        train_grpo(
            model,
            tok,
            lambda: make_env("default"),
            ["tiny-1"],
            GRPORunConfig(output_dir=str(tmp_path), env_workers=2, plot=False),
        )
    assert seen == [3, 2]
    with pytest.raises(ValueError, match="env_workers"):
        GRPORunConfig(env_workers=-1)


@pytest.mark.slow
def test_rft_keeps_only_passing_episodes_and_accounts_its_budget(tmp_path: Path):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = tiny_model(tok)
    rounds: list[list[Trajectory]] = []
    cfg = RFTRunConfig(
        output_dir=str(tmp_path),
        max_rounds=3,
        questions_per_round=2,
        group_size=3,
        min_reward=1.3,
        batch_size=2,
        epochs=2,
        learning_rate=1e-2,
        max_new_tokens=8,
        max_completion_tokens=120,
    )
    before = snapshot(model)
    res = train_rft(
        model,
        tok,
        lambda: LengthReward(make_env(None)),
        [s.id for s in env.unwrapped.task.samples],
        cfg,
        on_trajectories=rounds.append,
    )
    # Budget: every round samples B x G episodes, G in a row per question.
    assert res.rounds == 3 and len(rounds) == 3
    assert res.episodes == 3 * cfg.episodes_per_round == sum(len(r) for r in rounds)
    for trajs in rounds:
        for g in range(0, len(trajs), 3):
            assert len({t.question_id for t in trajs[g : g + 3]}) == 1
    # Kept: exactly the episodes whose return reaches min_reward; SFT steps follow from them.
    kept = [[t for t in trajs if t.reward >= cfg.min_reward] for trajs in rounds]
    assert [h["rft/kept"] for h in res.history] == [len(k) for k in kept]
    assert 0 < res.kept == sum(len(k) for k in kept) < res.episodes
    assert res.optimizer_steps == sum(-(-len(k) * 2 // 2) for k in kept if k)
    assert changed(before, model) > 0
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["episodes"] for r in rows] == [6, 12, 18]
    assert all("policy/kl_ref" in r and "policy/entropy" in r and "env/em" in r for r in rows)
    assert rows[0]["policy/kl_ref"] < 1e-6 <= rows[-1]["policy/kl_ref"]  # moved off the start
    assert (tmp_path / "curves.png").exists()


@pytest.mark.slow
def test_rft_with_nothing_correct_leaves_the_model_alone(tmp_path: Path):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = tiny_model(tok)
    before = snapshot(model)
    res = train_rft(
        model,
        tok,
        lambda: make_env("default"),
        [s.id for s in env.unwrapped.task.samples],
        RFTRunConfig(
            output_dir=str(tmp_path),
            max_rounds=2,
            questions_per_round=2,
            group_size=2,
            max_new_tokens=6,
            max_completion_tokens=60,
            min_reward=2.0,
            plot=False,
            track_kl=False,
        ),
    )
    assert res.episodes == 8 and res.kept == 0 and res.optimizer_steps == 0
    assert changed(before, model) == 0


@pytest.mark.slow
def test_filtered_teacher_baseline_trains_on_correct_episodes_only(tmp_path: Path):
    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    qids = [s.id for s in env.unwrapped.task.samples] * 3
    tcfg = TeacherConfig(early_answer=0.5, think=False)
    exs = teacher_examples(
        lambda: make_env("default"), lambda e: ImperfectTeacher(e, tcfg, seed=0), qids, tok
    )
    kept = keep_correct(exs)
    assert 0 < len(kept) < len(exs)
    assert all(e["em"] == 1.0 for e in kept)
    assert len(kept) == sum(e["em"] == 1.0 for e in exs)
    # An early answer (one search, then the bridge entity) never survives the filter.
    assert all(e["messages"][-1]["content"] != "" for e in kept)
    answers = [e["messages"][-1]["content"] for e in kept]
    searches = [sum("<search>" in m["content"] for m in e["messages"]) for e in kept]
    assert min(searches) >= 1 and all("<answer>" in a for a in answers)
    model = tiny_model(tok)
    before = snapshot(model)
    trainer = train_sft(
        model,
        tok,
        kept,
        SFTRunConfig(
            output_dir=str(tmp_path),
            trl={"max_steps": 2, "per_device_train_batch_size": 4, "warmup_steps": 0, "logging_steps": 1},
        ),
    )
    assert changed(before, model) > 0
    assert len(trainer.train_dataset) == len(kept)


@pytest.mark.slow
def test_cli_train_rft(tmp_path: Path, capsys):
    out = tmp_path / "rft"
    assert (
        main(
            [
                "train",
                "rft",
                "--env",
                "hopgym/Synthetic-v1",
                "--model",
                "tiny",
                *TINY_ARGS,
                "--kw",
                "n_entities=100",
                "n_questions=20",
                "hops=2",
                "--out",
                str(out),
                "--split",
                "train",
                "--steps",
                "2",
                "--questions-per-step",
                "2",
                "--group-size",
                "2",
                "--max-length",
                "120",
                "--max-new-tokens",
                "8",
                "--min-reward",
                "-1",
                "--eval-split",
                "test",
                "--eval-n",
                "2",
            ]
        )
        == 0
    )
    summary = json.loads((out / "hopgym_train.json").read_text())["summary"]
    assert summary["rounds"] == 2 and summary["episodes"] == 8 and summary["kept"] == 8
    for key in ("eval_before", "eval_after"):  # greedy episodes on two held-out questions
        assert 0.0 <= summary[key]["em"] <= 1.0 and 0.0 <= summary[key]["answered"] <= 1.0
    assert summary["optimizer_steps"] > 0 and summary["changed_tensors"] > 0
    assert (out / "curves.png").exists() and (out / "config.json").exists()
    err = capsys.readouterr().err
    assert [line.split(" · ")[0] for line in err.splitlines() if " s/step · " in line] == [
        "rft step 1/2",
        "rft step 2/2",
    ]
    assert "{'loss'" not in err and "{'train_runtime'" not in err  # the rounds' trainers print no dicts


# ---------------------------------------------------------------- GRPO through TRL's vLLM path


class StandInVLLMClient:
    """Speaks TRL 1.16's ``VLLMClient`` interface (what ``trl vllm-serve`` answers) without vLLM.

    It keeps its own copy of the policy, which TRL's ``sync_weights`` overwrites through
    ``update_named_params`` (as it streams weights to a real server), and samples completions
    from token-id prompts with the sampling parameters TRL sends (``n``, ``temperature``,
    ``max_tokens`` and, from ``generation_kwargs``, ``stop_token_ids`` / ``max_tokens``),
    returning ``completion_ids`` and per-token ``logprobs`` in the server's layout.
    """

    template = None  # the policy at start, set by the test
    instances: list[StandInVLLMClient] = []

    def __init__(
        self, base_url=None, host="0.0.0.0", server_port=8000, group_port=51216, connection_timeout=0.0
    ):
        import copy

        self.model = copy.deepcopy(StandInVLLMClient.template).eval()
        self.gen = torch.Generator().manual_seed(123)
        self.returned: list[tuple[list[int], list[float]]] = []
        self.syncs = 0
        self.requests: list[dict] = []
        StandInVLLMClient.instances.append(self)

    def init_communicator(self, device=0):
        self.device = device

    def get_server_info(self):
        return {"model_config": {"logprobs_mode": "processed_logprobs"}}

    def update_named_params(self, metadata, named_params):
        state = {name: t.detach().clone() for name, t in named_params}
        assert list(state) == [m[0] for m in metadata]
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        assert not unexpected and all("lm_head" in k for k in missing)  # tied to the embeddings
        self.syncs += 1

    def reset_prefix_cache(self):
        pass

    def generate(
        self,
        prompts,
        features=None,
        n=1,
        repetition_penalty=1.0,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        min_p=0.0,
        max_tokens=16,
        logprobs=0,
        structured_outputs_regex=None,
        generation_kwargs=None,
    ):
        params = {"max_tokens": max_tokens, **(generation_kwargs or {})}
        self.requests.append(params)
        stops = set(params.get("stop_token_ids", ()))
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "logprob_token_ids": []}
        with torch.no_grad():
            for prompt in prompts:
                out["prompt_ids"].append(list(prompt))
                for _ in range(n):
                    seq, ids, lps = list(prompt), [], []
                    while len(ids) < params["max_tokens"]:
                        logits = self.model(input_ids=torch.tensor([seq])).logits[0, -1].float()
                        lp = torch.log_softmax(logits / temperature, -1)
                        tok_id = int(torch.multinomial(lp.exp(), 1, generator=self.gen))
                        ids.append(tok_id)
                        lps.append([float(lp[tok_id])])
                        seq.append(tok_id)
                        if tok_id in stops:
                            break
                    out["completion_ids"].append(ids)
                    out["logprobs"].append(lps)
                    out["logprob_token_ids"].append([[i] for i in ids])
                    self.returned.append((ids, [x[0] for x in lps]))
        return out


@pytest.mark.slow
def test_grpo_takes_turns_and_logprobs_from_trl_vllm_server_mode(tmp_path: Path, monkeypatch, tiny_grpo):
    import trl.generation.vllm_generation as vg

    env = make_env(None)
    tok = build_tokenizer(task_texts(env.unwrapped.task))
    model = tiny_model(tok)
    StandInVLLMClient.template = model
    StandInVLLMClient.instances = []
    # TRL's own VLLMGeneration runs (server mode); only the client is the stand-in.
    monkeypatch.setattr(vg, "is_vllm_available", lambda *a, **k: True)
    monkeypatch.setattr(vg, "VLLMClient", StandInVLLMClient)
    seen: list[Trajectory] = []
    before = snapshot(model)
    run = train_grpo(
        model,
        tok,
        lambda: LengthReward(make_env(None)),
        [s.id for s in env.unwrapped.task.samples],
        tiny_grpo(
            tmp_path,
            trl={
                "max_steps": 2,
                "num_generations": 3,
                "learning_rate": 1e-2,
                "use_vllm": True,
                "vllm_mode": "server",
            },
        ),
        on_trajectories=seen.extend,
    )
    trainer = run.trainer
    (client,) = StandInVLLMClient.instances
    assert trainer.state.global_step == 2 and changed(before, model) > 0
    assert client.syncs == 2  # TRL pushed the weights before each step's rollouts
    assert all(r["max_tokens"] == 8 and tok.eos_token_id in r["stop_token_ids"] for r in client.requests)
    # Every model turn of every trajectory is a completion the engine returned, ids and
    # log-probs as they came (cut only at the token budget), never re-tokenised.
    returned = {tuple(ids): lps for ids, lps in client.returned}
    turns = 0
    for t in seen:
        for kind, s, e in t.spans:
            if kind != "model":
                continue
            ids = tuple(t.completion_ids[s:e])
            match = [k for k in returned if k[: len(ids)] == ids]
            assert match, "a model turn that the engine did not return"
            assert t.logprobs[s:e] == returned[match[0]][: len(ids)]
            assert t.mask[s:e] == [1] * (e - s)
            turns += 1
    assert turns >= len(seen) and len(client.returned) >= turns
    # TRL recomputed the log-probs of exactly those tokens with the synced policy: its
    # importance-sampling check sees no gap between engine and trainer.
    hist = run.history
    diffs = [
        h["sampling/sampling_logp_difference/max"]
        for h in hist
        if "sampling/sampling_logp_difference/max" in h
    ]
    assert diffs and max(diffs) < 1e-4


# ---------------------------------------------------------------- fresh facts for SFT


def test_entity_renamer_redraws_facts_consistently():
    import numpy as np

    world = dict(
        n_entities=100,
        hops=2,
        kinds="bridge",
        n_questions=40,
        distractors=0.0,
        phrasing_variety=1,
        passages_per_doc=1,
        web_noise=0.0,
    )

    def env_fn():
        return gym.make("hopgym/Synthetic-v0", split="train", reward=None, top_k=1, **world)

    env = env_fn()
    tok = build_tokenizer(task_texts(env.unwrapped.task, ("tags",)))
    qids = [s.id for s in env.unwrapped.task.samples]
    exs = teacher_examples(
        env_fn, lambda e: ImperfectTeacher(e, TeacherConfig(think=False), seed=0), qids, tok
    )
    ren = EntityRenamer(tok, env.unwrapped.task, exs)
    pool = set(ren.pool.tolist())
    # Name words only: never a tag, a relation word of the templates, or a number.
    assert not pool & {
        tok.convert_tokens_to_ids(w)
        for w in (
            "<search>",
            "<answer>",
            "▁born",
            "▁married",
            "▁directed",
            "▁Question",
            "▁Doc",
            "▁Title",
            "▁is",
            "▁the",
        )
    }
    out = ren.apply(exs, seed=0)
    again = ren.apply(exs, seed=0)
    assert [e["input_ids"] for e in out] == [e["input_ids"] for e in again]  # seeded
    n_changed = 0
    for old, new in zip(exs, out, strict=True):
        assert new["completion_mask"] == old["completion_mask"] and new["em"] == old["em"]
        assert len(new["input_ids"]) == len(old["input_ids"])
        mapping: dict[int, int] = {}
        for a, b in zip(old["input_ids"], new["input_ids"], strict=True):
            if a not in pool:
                assert a == b  # everything but names is untouched
            else:
                assert b in pool and mapping.setdefault(a, b) == b  # one new name per name
        assert len(set(mapping.values())) == len(mapping)  # a bijection: no two names merge
        n_changed += any(a != b for a, b in mapping.items())
    assert n_changed > 0.9 * len(exs)
    # The episode stays answerable: a correct teacher answer is still copied from the text.
    ok = [e for e in out if e["em"] == 1.0]
    assert ok
    ans_start = {tok.convert_tokens_to_ids("<answer>")}
    for e in ok[:10]:
        ids = e["input_ids"]
        i = max(j for j, t in enumerate(ids) if t in ans_start)
        answer = ids[i + 1 : ids.index(tok.convert_tokens_to_ids("</answer>"), i)]
        body = ids[:i]
        assert any(body[k : k + len(answer)] == answer for k in range(len(body)))
    with pytest.raises(ValueError, match="documents"):
        EntityRenamer(tok, types.SimpleNamespace(documents={}, samples=[]))
    assert np.all(np.sort(ren.pool) == ren.pool)


# ---------------------------------------------------------------- the learning example, end to end


@pytest.mark.slow
def test_grpo_example_smoke_preset_and_merge(tmp_path: Path, capsys, load_script):
    example = load_script("examples/grpo_synthetic.py", "grpo_synthetic_example")
    result = example.main(
        ["--preset", "smoke", "--out", str(tmp_path / "run"), "--json", str(tmp_path / "s0.json")]
    )
    run = result["runs"][0]
    for method in ("sft", "grpo", "rft", "continue_sft", "filtered_sft"):
        assert 0.0 <= run[method]["em"] <= 1.0
    assert run["grpo_budget"]["episodes"] == run["rft_budget"]["episodes"] == 2 * 2 * 2
    assert (tmp_path / "run" / "seed0" / "curves.png").exists()
    # Seeds run in separate processes merge into one result; other settings do not.
    other = json.loads((tmp_path / "s0.json").read_text())
    other["runs"][0]["seed"] = 1
    (tmp_path / "s1.json").write_text(json.dumps(other))
    merged = example.main(["--merge", str(tmp_path / "s0.json"), str(tmp_path / "s1.json")])
    assert merged["seeds"] == [0, 1] and len(merged["targets"]["per_seed"]) == 2
    other["args"]["grpo_lr"] = 1.0
    (tmp_path / "s2.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="settings differ"):
        example.main(["--merge", str(tmp_path / "s0.json"), str(tmp_path / "s2.json")])
    capsys.readouterr()


@pytest.mark.slow
def test_cli_train_sft_grpo_rft_with_tool_calls(tmp_path: Path, capsys):
    """``--protocol tools``: SFT on the oracle's tool-call episodes through the chat template, then
    GRPO and RFT rollouts built turn by turn, their token mismatches counted in the logs."""
    sft_out = tmp_path / "sft"
    common = ["--env", "hopgym/Tiny-v1", "--protocol", "tools", "--split", "none"]
    sft = ["train", "sft", *common, "--model", "tiny", *TINY_ARGS[:-1], "max_positions=1024"]
    sft += ["--out", str(sft_out), "--steps", "2", "--batch-size", "2", "--max-length", "900"]
    assert main(sft) == 0
    summary = json.loads((sft_out / "hopgym_train.json").read_text())["summary"]
    assert summary["teacher_em"] == 1.0 and summary["changed_tensors"] > 0
    rollout = ["--model", str(sft_out), "--steps", "1", "--questions-per-step", "2", "--group-size", "2"]
    rollout += ["--max-length", "900", "--max-new-tokens", "8"]
    assert main(["train", "grpo", *common, *rollout, "--out", str(tmp_path / "grpo"), "--lr", "1e-2"]) == 0
    logs = (tmp_path / "grpo" / "log.jsonl").read_text()
    assert "env/invalid_rate" in logs
    assert (
        main(["train", "rft", *common, *rollout, "--out", str(tmp_path / "rft"), "--min-reward", "-1"]) == 0
    )
    summary = json.loads((tmp_path / "rft" / "hopgym_train.json").read_text())["summary"]
    assert summary["optimizer_steps"] > 0
    capsys.readouterr()
