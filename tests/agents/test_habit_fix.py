"""``benchmarks/habit_fix.py`` end to end on a tiny saved model (the smoke preset): SFT on the
over-searching teacher, then GRPO, RFT and continue-SFT with the cost reward, each evaluated and
compared with the SFT; a second call resumes (skips the phases the results file has)."""

# ruff: noqa: F811  (test arguments take the imported fixtures' names)
from __future__ import annotations

import json
import os
from pathlib import Path
from unittest.mock import ANY

import pytest

pytest.importorskip("torch")
pytest.importorskip("trl")

from train_fixtures import load_script, tiny_model_dir  # noqa: E402,F401  (fixtures)

from hopgym._atomic import OutputFileError, sole_writer  # noqa: E402

#: The committed results files (the table's runs that C's remake is set beside).
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


@pytest.fixture
def habit_fix(load_script):
    return load_script("benchmarks/habit_fix.py", "habit_fix_script")


@pytest.mark.slow  # about 20 s on one thread, more on a loaded machine
def test_smoke_runs_every_phase_and_resumes(habit_fix, tiny_model_dir: Path, tmp_path: Path, monkeypatch):
    model_dir = tiny_model_dir
    out, results = tmp_path / "run", tmp_path / "r.json"
    argv = ["--preset", "smoke", "--model", str(model_dir), "--out", str(out), "--json", str(results)]
    res = habit_fix.main(argv)
    assert (out / "sft" / "checkpoint" / "config.json").exists()
    for phase, step in (("sft", 2), ("grpo", 1)):  # each resumes from its newest checkpoint
        assert (out / phase / f"checkpoint-{step}" / "trainer_state.json").exists()
    assert (out / "rft" / "round-1" / "rft_state.json").exists()  # and RFT from its newest round
    assert res["args"]["rft"]["keep"] == "best"  # RFT keeps the highest-return right episodes
    assert set(res["phases"]) == {"sft", "grpo", "rft", "continue_sft"}
    assert not any("resumed_from" in p for p in res["phases"].values())  # each phase from the start
    # Each phase records how it trained (bf16=None follows the CPU; GRPO checkpoints by default).
    assert res["phases"]["grpo"]["train_fields"]["gradient_checkpointing"] is True
    assert res["phases"]["rft"]["train_fields"]["gradient_checkpointing"] is False
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
    # RFT went on from its saved round: the file says so (its seconds count this process only).
    assert again["phases"]["rft"]["resumed_from"] == "rft/round-1"
    # An SFT whose training finished (its checkpoint saved) but not its evaluation: evaluated only.
    del saved["phases"]["sft"], saved["sft_budget"]
    results.write_text(json.dumps(saved))
    calls.clear()
    again = habit_fix.main(argv)
    assert calls == [(0,), ("rft", 0)]
    assert again["phases"]["sft"]["resumed_from"] == "sft/checkpoint"
    assert again["sft_budget"]["steps"] == res["sft_budget"]["steps"] == 2


@pytest.mark.slow  # about 10 s on one thread, more on a loaded machine
def test_routing_habit_runs_in_its_own_folder_and_file(
    habit_fix, tiny_model_dir: Path, tmp_path: Path, monkeypatch
):
    model_dir = tiny_model_dir
    monkeypatch.chdir(tmp_path)  # the default run folder is relative
    argv = ["--habit", "routing", "--preset", "smoke", "--model", str(model_dir), "--methods", "grpo"]
    # A budget that ends inside every SFT example (its prompt is ~380 tiny-tokenizer tokens, its
    # last teacher token past 1,300): every example is cut, and the run says so.
    res = habit_fix.main([*argv, "--json", "r.json", "--set", "max_length=600"])
    assert res["args"]["max_length"] == 600
    assert res["sft_budget"]["cut_examples"] == res["sft_budget"]["examples"] == 4
    assert (tmp_path / "runs/habit_fix/routing_smoke_seed0/sft/checkpoint/config.json").exists()
    assert res["habit"] == "routing" and set(res["phases"]) == {"sft", "grpo"}
    a = res["args"]
    assert a["env"] == "hopgym/SyntheticRouting-v1" and a["env_kw"]["local_coverage"] == 0.8
    assert a["teacher"] == {"random_route": 1.0} and a["costs"] == {"search_cost": {"weight": 0.1}}
    for name in ("sft", "grpo"):  # two sources: the evaluation counts cost and right sources
        assert {"search_cost_per_episode", "right_source_rate"} <= set(res[name])
    assert {"cost", "cost_drop", "right_source", "right_source_sft", "goal_met"} <= set(
        res["summary"]["grpo"]
    )
    assert {"env/right_source_rate", "env/reward_terms/search_cost"} <= set(res["grpo_history"][0])
    # A results file answers only for its own habit.
    with pytest.raises(SystemExit, match="routing habit, not searches"):
        habit_fix.main(["--preset", "smoke", "--model", str(model_dir), "--json", "r.json"])


@pytest.mark.slow  # about 15 s on one thread, more on a loaded machine
def test_unanswered_habit_trains_grpo_from_the_searches_runs_sft(
    habit_fix, load_script, tiny_model_dir: Path, tmp_path: Path, monkeypatch
):
    """``searches_unanswered``: no SFT of its own (it evaluates the ``searches`` run's checkpoint
    under its reward, which prices an unanswered episode), then GRPO only; without that SFT it
    says which run to make first; the re-evaluation pairs its GRPO with that SFT."""
    monkeypatch.chdir(tmp_path)  # the default run folders are relative
    base = ["--preset", "smoke", "--model", str(tiny_model_dir)]
    with pytest.raises(SystemExit, match="no trained SFT of the searches habit .seed 0."):
        habit_fix.main([*base, "--habit", "searches_unanswered", "--json", "u.json"])
    first = habit_fix.main([*base, "--methods", "grpo", "--json", "s.json"])
    res = habit_fix.main([*base, "--habit", "searches_unanswered", "--json", "u.json"])
    sft = "runs/habit_fix/smoke_seed0/sft/checkpoint"
    assert res["sft_checkpoint"] == sft and first["sft_checkpoint"] == sft
    assert not (tmp_path / "runs/habit_fix/searches_unanswered_smoke_seed0/sft").exists()
    assert set(res["phases"]) == {"sft", "grpo"} and res["phases"]["sft"]["resumed_from"] == sft
    assert res["args"]["costs"]["unanswered"] == {"value": -1.0}
    # The same checkpoint, greedy: the same answers; the reward has one term more.
    assert res["sft_right"] == first["sft_right"]
    assert "reward_terms/unanswered" in res["sft"] and "reward_terms/unanswered" not in first["sft"]
    assert "env/reward_terms/unanswered" in res["grpo_history"][0]
    assert set(res["summary"]) == {"grpo"} and "redundant_drop" in res["summary"]["grpo"]
    paired_eval = load_script("benchmarks/paired_eval.py", "paired_eval_script")
    assert paired_eval.checkpoints(res)["sft"] == {"model": sft}


def test_routing_unanswered_prices_an_episode_without_an_answer_over_routings_costs(
    habit_fix, tmp_path: Path, monkeypatch
):
    """``routing_unanswered`` is ``routing``'s reward with one term more, GRPO only from the
    ``routing`` run's SFT: in the routing env an episode of six web searches and no answer pays
    more than one of six web searches and a wrong answer (under ``routing``'s terms alone, no
    answer and a wrong one pay the same); without that SFT it names the run to make first."""
    import gymnasium as gym

    import hopgym  # noqa: F401  (registers the envs)

    routing, habit = habit_fix.HABITS["routing"], habit_fix.HABITS["routing_unanswered"]
    assert habit.sft_of == "routing" and habit.methods == ("grpo",)
    assert habit.settings == {
        **routing.settings,
        "costs": {**routing.settings["costs"], "unanswered": {"value": -1.0}},
    }
    example = habit_fix.load_example()

    def returns(costs: dict, last: str) -> float:
        kw = {**habit.settings["env_kw"], **habit_fix.ENV_KW, "n_entities": 100, "n_questions": 20}
        env = example.with_costs(gym.make(habit.settings["env"], **kw), costs)
        env.reset(seed=0)
        total, done, turn = 0.0, False, 0
        while not done:
            turn += 1
            action = (
                last
                if turn == habit_fix.ENV_KW["max_turns"]
                else f"<route>web</route><search>q{turn}</search>"
            )
            _, r, term, trunc, _ = env.step(action)
            total, done = total + float(r), term or trunc
        return total

    wrong, unanswered = "<answer>no such name</answer>", "<think>one more search</think>"
    assert returns(routing.settings["costs"], unanswered) == pytest.approx(
        returns(routing.settings["costs"], wrong)
    )
    assert returns(habit.settings["costs"], unanswered) == pytest.approx(
        returns(habit.settings["costs"], wrong) - 1.0
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit, match=r"no trained SFT of the routing habit \(seed 0\).*--habit routing"):
        habit_fix.main(["--preset", "smoke", "--habit", "routing_unanswered", "--json", "u.json"])


def _results(habit: str, sft: dict, after: dict, right_sft: list, right: list, **args) -> dict:
    return {
        "habit": habit,
        "args": {"costs": {}, **args},
        "sft": sft,
        "grpo": after,
        "sft_right": right_sft,
        "grpo_right": right,
        "em_sft": len(right_sft) / 20,
        "em_grpo": len(right) / 20,
    }


def test_summary_computes_each_habits_goal(habit_fix):
    example = habit_fix.load_example()
    routing = habit_fix.HABITS["routing"]
    costs = {"search_cost": {"weight": 0.1}}
    sft = {"reward_terms/search_cost": -0.1, "right_source_rate": 0.5}
    qs = [f"q{i}" for i in range(20)]

    def goal(after: dict, right: list) -> dict:
        res = _results("routing", sft, after, qs[:10], right, costs=costs)
        return habit_fix.summary(res, example, routing)["grpo"]

    # Cost 1.0 -> 0.6 web searches (-40%), right sources 0.5 -> 0.7, the same questions right.
    met = goal({"reward_terms/search_cost": -0.06, "right_source_rate": 0.7}, qs[:10])
    assert met["cost_sft"] == pytest.approx(1.0) and met["cost_drop"] == pytest.approx(0.4)
    assert (met["right_source_sft"], met["right_source"], met["goal_met"]) == (0.5, 0.7, True)
    # Cost down but right sources not up, or cost down by less than 30%: not met.
    assert not goal({"reward_terms/search_cost": -0.06, "right_source_rate": 0.5}, qs[:10])["goal_met"]
    assert not goal({"reward_terms/search_cost": -0.08, "right_source_rate": 0.7}, qs[:10])["goal_met"]
    # An SFT that never searched the web (it did not learn the coin's routing): no share to cut,
    # the goal undefined (None), not "not met".
    untaught = _results(
        "routing",
        {"reward_terms/search_cost": 0.0, "right_source_rate": 0.7},
        {"reward_terms/search_cost": 0.0, "right_source_rate": 0.8},
        qs[:10],
        qs[:10],
        costs=costs,
    )
    s = habit_fix.summary(untaught, example, routing)["grpo"]
    assert (s["cost_sft"], s["cost_drop"], s["goal_met"]) == (0.0, None, None)
    # Eight questions lost, none gained: EM significantly lower (p = 2 / 2**8).
    lost = goal({"reward_terms/search_cost": 0.0, "right_source_rate": 0.9}, qs[:2])
    assert (lost["lost"], lost["gained"], lost["goal_met"]) == (8, 0, False)
    # Over-searching, from a file whose redundant count was written as 0 (the term's name was
    # misread before): the count comes from the reward term again.
    costs = {"redundancy": {"query_penalty": 0.2}}
    res = _results(
        "searches",
        {"redundant_searches_per_episode": 0.0, "reward_terms/redundant_query": -0.4},
        {"redundant_searches_per_episode": 0.0, "reward_terms/redundant_query": -0.1},
        qs[:10],
        qs[:11],
        costs=costs,
    )
    s = habit_fix.summary(res, example, habit_fix.HABITS["searches"])["grpo"]
    assert (s["redundant_sft"], s["redundant"], s["redundant_drop"]) == pytest.approx((2.0, 0.5, 0.75))
    assert s["goal_met"] and s["gained"] == 1


@pytest.mark.slow  # about 20 s on one thread, more on a loaded machine
def test_paired_eval_reevaluates_every_checkpoint_on_more_questions_and_resumes(
    habit_fix, load_script, tiny_model_dir: Path, tmp_path: Path, capsys
):
    paired_eval = load_script("benchmarks/paired_eval.py", "paired_eval_script")
    out, run_json, eval_json = tmp_path / "run", tmp_path / "r.json", tmp_path / "e.json"
    habit_fix.main(
        ["--preset", "smoke", "--model", str(tiny_model_dir), "--out", str(out), "--json", str(run_json)]
    )
    run = json.loads(run_json.read_text())
    argv = ["--run", str(run_json), "--json", str(eval_json), "--n-eval", "7", "--chunk", "3"]
    # A world with too few test questions: the error names the option.
    with pytest.raises(SystemExit, match="fewer than --n-eval 100: raise --n-questions"):
        paired_eval.main([*argv, "--n-questions", "60", "--n-eval", "100"])
    res = paired_eval.main([*argv, "--n-questions", "150"])
    assert set(res["summary"]) == {"sft", "grpo", "rft", "continue_sft"}
    assert res["checkpoints"]["rft"]["weights"].endswith("round-1/model.pt")
    for name, row in res["summary"].items():
        assert row["questions"] == len(res["episodes"][name]) == 7
        # The bigger world's first test questions are the run's: each checkpoint answers them as
        # the run's own evaluation did (the same weights, greedy).
        assert row["first_n"] == run["test_questions"] == 3 and row["first_n_agree"] == 3, name
        assert row["em"] == pytest.approx(sum(r["em"] for r in res["episodes"][name]) / 7)
        assert "redundant_searches_per_episode" in row and "searches_per_episode" in row
    for name in ("grpo", "rft", "continue_sft"):
        row = res["summary"][name]
        assert row["vs_sft_questions"] == 7 and row["gained"] + row["lost"] <= 7
        assert row["holds"] == (row["p_value"] < 0.05)
    # Resume: a method cut after its first chunk evaluates its other chunks only.
    saved = json.loads(eval_json.read_text())
    saved["episodes"]["rft"] = saved["episodes"]["rft"][:3]
    eval_json.write_text(json.dumps(saved))
    capsys.readouterr()
    again = paired_eval.main([*argv, "--n-questions", "150"])
    assert again["episodes"] == res["episodes"]
    printed = capsys.readouterr().out
    assert "rft: 7/7" in printed and "sft: 3/7" not in printed
    # A file of another evaluation is refused, not mixed.
    with pytest.raises(SystemExit, match="another evaluation"):
        paired_eval.main([*argv, "--n-questions", "200"])
    # Two commands on one file: a checkpoint another command is evaluating is left to it (its
    # holder named), the others go on, and each save keeps the other command's rows.
    saved = json.loads(eval_json.read_text())
    for name in ("grpo", "rft"):
        saved["episodes"][name] = saved["episodes"][name][:3]
    eval_json.write_text(json.dumps(saved))
    capsys.readouterr()
    with sole_writer(paired_eval.checkpoint_lock(eval_json, "rft")):
        part = paired_eval.main([*argv, "--n-questions", "150"])
    printed = capsys.readouterr().out
    assert f"rft: another command is evaluating it (process {os.getpid()}" in printed
    assert "grpo: 7/7" in printed and "rft: 7/7" not in printed
    assert len(part["episodes"]["grpo"]) == 7 and part["episodes"]["rft"] == res["episodes"]["rft"][:3]
    assert paired_eval.main([*argv, "--n-questions", "150"])["episodes"] == res["episodes"]
    # The run's results file another command is writing is refused before any work, the holder
    # named (habit_fix resumes from it as paired_eval does from its own).
    before = run_json.read_text()
    with (
        sole_writer(run_json),
        pytest.raises(OutputFileError, match=f"another command is writing it \\(process {os.getpid()}"),
    ):
        habit_fix.main(
            ["--preset", "smoke", "--model", str(tiny_model_dir), "--out", str(out), "--json", str(run_json)]
        )
    assert run_json.read_text() == before


def test_paired_eval_saves_its_checkpoints_rows_into_the_file_as_another_command_left_it(
    load_script, tmp_path: Path
):
    """``merge_save``: the file read again under its lock keeps every checkpoint's rows but those
    of the checkpoints this command evaluates, which come from it; the summary covers all."""
    paired_eval = load_script("benchmarks/paired_eval.py", "paired_eval_script")
    path = tmp_path / "e.json"
    common = {"settings": {"n_eval": 2}, "args": {}, "habit": None, "run_test_questions": 1}
    theirs = {**common, "checkpoints": {"sft": {"model": "s"}}, "run_right": {"sft": ["q1"]},
              "episodes": {"sft": [1, 2]}, "seconds": {"sft": 5.0}, "fingerprints": {"sft": ["x"]},
              "rss_mib": {"sft": [[1, 1]]}}  # fmt: skip
    path.write_text(json.dumps(theirs))
    mine = {**common, "checkpoints": {"sft": {"model": "s"}, "grpo": {"model": "g"}, "rft": {"model": "r"}},
            "run_right": {}, "episodes": {"rft": [4], "sft": [1], "grpo": [3]}, "seconds": {"grpo": 1.0},
            "fingerprints": {}, "rss_mib": {"grpo": [[2, 2]]}}  # fmt: skip
    paired_eval.merge_save(path, mine, ["rft", "grpo"], lambda r: list(r["episodes"]))
    saved = json.loads(path.read_text())
    assert saved == mine  # ``res`` becomes the merged file
    assert saved["episodes"] == {"sft": [1, 2], "grpo": [3], "rft": [4]}  # the other command's SFT rows kept
    assert list(saved["episodes"]) == ["sft", "grpo", "rft"]  # in the checkpoints' order
    assert saved["seconds"] == {"sft": 5.0, "grpo": 1.0} and saved["fingerprints"] == {"sft": ["x"]}
    assert saved["run_right"] == {"sft": ["q1"]} and list(saved["checkpoints"]) == ["sft", "grpo", "rft"]
    assert saved["summary"] == ["sft", "grpo", "rft"]


@pytest.mark.slow  # about 40 s on one thread, more on a loaded machine
def test_power_c_makes_every_run_again_and_pairs_its_final_checkpoints(
    load_script, tiny_model_dir: Path, tmp_path: Path, monkeypatch
):
    power_c = load_script("benchmarks/power_c.py", "power_c_script")
    argv = [
        *("--root", str(tmp_path / "c"), "--preset", "smoke", "--model", str(tiny_model_dir)),
        *("--json", str(tmp_path / "e.json"), "--n-eval", "4", "--n-questions", "150"),
        *("--compare-json", str(tmp_path / "remake.json")),
        *("--set", "grpo_steps=1", "questions_per_step=2", "group_size=2"),
    ]
    res = power_c.main(argv)
    names = ["sft", *(name for name, *_ in power_c.RUNS)]
    assert list(res["summary"]) == names
    c_sft = str(tmp_path / "c" / "long" / "sft" / "checkpoint")
    # Every run after the first starts from C's SFT checkpoint, which is the one paired with.
    assert res["checkpoints"]["sft"] == {"model": c_sft}
    assert res["checkpoints"]["rft"] == {"model": c_sft, "weights": f"{tmp_path}/c/rftC/rft/round-1/model.pt"}
    assert res["checkpoints"]["grpo_seed3"]["model"].endswith("long3/grpo/checkpoint-1")
    for name in names[1:]:
        assert res["summary"][name]["questions"] == 4 and "p_value" in res["summary"][name]
        # Each checkpoint answers its own run's held-out questions again as that run did.
        assert res["summary"][name]["first_n_agree"] == res["summary"][name]["first_n"] > 0, name
    run = json.loads((tmp_path / "c" / "long3.json").read_text())
    assert run["args"]["seed"] == 3 and run["args"]["trl"]["save_strategy"] == "steps"
    # fp32 as the table's runs trained, on any CPU; GRPO's loss one episode a pass, activations kept.
    assert run["train_fields"]["grpo"] == {"bf16": False, "gradient_checkpointing": False}
    assert run["args"]["micro_batch"] == 1
    # Everything done: a second call runs nothing again.
    example = power_c.load_example()
    monkeypatch.setattr(power_c, "load_example", lambda: example)
    monkeypatch.setattr(example, "main", lambda *a, **k: pytest.fail("ran a finished run again"))
    assert power_c.main(argv)["episodes"] == res["episodes"]
    # Each run set beside the table's: here a tiny model's, so the logs differ.
    remake = json.loads((tmp_path / "remake.json").read_text())
    assert list(remake["runs"]) == names[1:] and remake["to_make"] == []
    assert remake["runs"]["grpo"]["phases"]["grpo"]["steps"]["made_steps"] == 1


@pytest.mark.slow  # about 60 s on one thread, more on a loaded machine
def test_power_habits_makes_lost_checkpoints_again_and_never_mixes_weights(
    habit_fix, load_script, tiny_model_dir: Path, tmp_path: Path, monkeypatch, capsys
):
    """``benchmarks/power_habits.py``: a run's checkpoints evaluated on more questions; once its
    run folder is gone, made again by the run's command (training is the same bit for bit here,
    so the file's fingerprints match and the evaluation goes on); the unanswered habit's GRPO joins
    the searches file, paired with the same SFT; other weights, or a run whose settings the script
    no longer makes, are refused."""
    import shutil

    monkeypatch.chdir(tmp_path)  # the default run folders are relative
    power = load_script("benchmarks/power_habits.py", "power_habits_script")
    base = ["--preset", "smoke", "--model", str(tiny_model_dir)]
    habit_fix.main([*base, "--methods", "grpo", "--json", "results/habit_fix_searches_seed0.json"])
    habit_fix.main(
        [
            *base,
            "--habit",
            "searches_unanswered",
            "--json",
            "results/habit_fix_searches_unanswered_seed0.json",
        ]
    )
    argv = [*base, "--results", "results", "--n-eval", "5", "--n-questions", "150"]
    target = tmp_path / "results/habit_fix_searches_seed0_eval5.json"
    res = power.main([*argv, "--habit", "searches"])
    assert res["settings"]["run"] == "results/habit_fix_searches_seed0.json"
    assert set(res["summary"]) == {"sft", "grpo"} and set(res["fingerprints"]) == {"sft", "grpo"}
    for row in res["summary"].values():
        assert row["questions"] == 5 and row["first_n_agree"] == row["first_n"] == 3
    first = json.loads(target.read_text())

    # The run folder lost, the GRPO evaluation cut short: both checkpoints made again, the same
    # weights, and the evaluation goes on where it stopped.
    shutil.rmtree("runs/habit_fix/smoke_seed0")
    cut = json.loads(target.read_text())
    cut["episodes"]["grpo"] = cut["episodes"]["grpo"][:2]
    target.write_text(json.dumps(cut))
    capsys.readouterr()
    again = power.main([*argv, "--habit", "searches"])
    assert (
        "making again: habit_fix.py --habit searches --seed 0 --preset smoke --methods grpo"
        in capsys.readouterr().out
    )
    assert (tmp_path / "runs/habit_fix/smoke_seed0/grpo/checkpoint-1/config.json").exists()
    assert again["episodes"] == first["episodes"] and again["fingerprints"] == first["fingerprints"]

    # The unanswered habit's GRPO: into the searches file, as grpo_unanswered, paired with that SFT.
    both = power.main([*argv, "--habit", "searches_unanswered"])
    assert set(both["summary"]) == {"sft", "grpo", "grpo_unanswered"}
    row = both["summary"]["grpo_unanswered"]
    assert row["first_n_agree"] == 3 and row["vs_sft_questions"] == 5
    assert both["episodes"]["sft"] == first["episodes"]["sft"]

    # Weights the file has no record of (a checkpoint made again on another CPU, say): they go on
    # only where they answer the file's first chunk as its episodes say, and the file says where
    # they started; else they are refused, nothing added.
    other = json.loads(target.read_text())
    sha = other["fingerprints"]["grpo"][0]["sha256"]
    other["fingerprints"]["grpo"] = [{"sha256": "0" * 64, "from_question": 0}]
    other["episodes"]["grpo"] = other["episodes"]["grpo"][:2]
    target.write_text(json.dumps(other))
    res = power.main([*argv, "--habit", "searches"])
    assert res["fingerprints"]["grpo"][1] == {"sha256": sha, "from_question": 2, "same_outcomes_on": 2}
    assert res["episodes"] == both["episodes"]
    # Saved again by the searches run, whose file has no grpo_unanswered: that row keeps its check.
    assert res["summary"]["grpo_unanswered"]["first_n_agree"] == 3
    other["episodes"]["grpo"][1]["searches"] += 1
    target.write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="nor answer as they did: evaluated again, 1 of the first 2 differ"):
        power.main([*argv, "--habit", "searches"])
    # A file from before fingerprints: the same check on its first chunk.
    del other["fingerprints"]
    other["episodes"]["grpo"][1]["searches"] -= 1
    other["episodes"]["sft"][1]["searches"] += 1
    target.write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="1 of the first 5 differ"):
        power.main([*argv, "--habit", "searches"])
    other["episodes"]["sft"][1]["searches"] -= 1
    target.write_text(json.dumps(other))
    capsys.readouterr()
    res = power.main([*argv, "--habit", "searches"])
    assert res["episodes"] == both["episodes"]
    assert "sft: other weights, the first 5 questions answered as before" in capsys.readouterr().out
    assert res["fingerprints"]["sft"] == [{"sha256": ANY, "from_question": 5, "same_outcomes_on": 5}]

    with pytest.raises(SystemExit, match="the run has no rft; run habit_fix.py for it first"):
        power.main([*argv, "--habit", "searches_unanswered", "--methods", "rft"])
    # A run whose settings habit_fix.py no longer makes is not made "again".
    shutil.rmtree("runs/habit_fix/smoke_seed0")
    run = json.loads(Path("results/habit_fix_searches_seed0.json").read_text())
    run["args"]["sft_lr"] *= 2
    Path("results/habit_fix_searches_seed0.json").write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="settings now differ from the run's in sft_lr"):
        power.main([*argv, "--habit", "searches"])


def test_power_c_runs_some_runs_beside_another_command(load_script, tmp_path: Path, monkeypatch):
    """``power_c.py --runs``: the named runs only, no evaluation; a run after the first waits for
    C's SFT (the command to train it named); a run another command is making is refused."""
    power_c = load_script("benchmarks/power_c.py", "power_c_script")
    root = tmp_path / "c"
    made: list[str] = []

    def fake_main(argv):  # one run's results file, as examples/grpo_smollm2.py writes it
        out, results = Path(argv[argv.index("--out") + 1]), Path(argv[argv.index("--json") + 1])
        made.append(out.name)
        method = argv[argv.index("--methods") + 1]
        if out.name == "long":
            (out / "sft" / "checkpoint").mkdir(parents=True)
            (out / "sft" / "checkpoint" / "sft_budget.json").write_text("{}")
        results.write_text(json.dumps({f"em_{method}": 0.25}))

    monkeypatch.setattr(
        power_c, "load_example", lambda: type("Example", (), {"main": staticmethod(fake_main)})
    )
    monkeypatch.setattr(power_c, "evaluate", lambda *a, **k: pytest.fail("--runs evaluated"))
    argv = [
        "--root",
        str(root),
        "--json",
        str(tmp_path / "e.json"),
        "--compare-json",
        str(tmp_path / "r.json"),
    ]
    with pytest.raises(SystemExit, match=r"C's SFT is not trained yet.*power_c.py --runs grpo"):
        power_c.main([*argv, "--runs", "grpo_seed3"])
    assert made == []
    assert power_c.main([*argv, "--runs", "grpo"]) == {"made": {"grpo": 0.25}}
    with sole_writer(root / "long3.json"):  # another command is making grpo_seed3
        with pytest.raises(OutputFileError, match="long3.json.*another command is writing it"):
            power_c.main([*argv, "--runs", "rft", "grpo_seed3"])  # in RUNS' order: grpo_seed3 first
    assert made == ["long"]
    assert power_c.main([*argv, "--runs", "grpo_seed3"]) == {"made": {"grpo_seed3": 0.25}}
    assert power_c.main([*argv, "--runs", "grpo_seed3", "rft"]) == {"made": {"grpo_seed3": 0.25, "rft": 0.25}}
    assert made == ["long", "long3", "rftC"]  # a run made already is not made again
    with sole_writer(root / "long3.json"):  # a made run is read, not locked: no refusal
        assert power_c.main([*argv, "--runs", "grpo_seed3"]) == {"made": {"grpo_seed3": 0.25}}
    with pytest.raises(SystemExit):  # names outside RUNS are refused by argparse
        power_c.main([*argv, "--runs", "sft"])
    # After each command, the runs made so far beside the table's.
    remake = json.loads((tmp_path / "r.json").read_text())
    assert list(remake["runs"]) == ["grpo", "grpo_seed3", "rft"]
    assert remake["to_make"] == ["continue_sft", "grpo_dynamic", "grpo_dynamic_seed3"]
    table_rft = json.loads((RESULTS / "grpo_smollm2_cpu_seed2_long_rft.json").read_text())
    # The table's EM, then this run's.
    assert remake["runs"]["rft"]["phases"]["rft"]["em"] == [table_rft["em_rft"], 0.25]
    # --runs ... --evaluate: C's SFT and those runs evaluated, before the rest are made.
    monkeypatch.setattr(
        power_c, "checkpoints", lambda run: {m[3:]: {"model": m} for m in run if m.startswith("em_")}
    )
    monkeypatch.setattr(power_c, "evaluate", lambda run, specs, *a, **k: specs)
    (root / "long.json").write_text(json.dumps({"em_sft": 0.2, "em_grpo": 0.25}))
    specs = power_c.main([*argv, "--runs", "grpo_seed3", "rft", "--evaluate"])
    assert specs == {
        "sft": {"model": "em_sft"},
        "grpo_seed3": {"model": "em_grpo"},
        "rft": {"model": "em_rft"},
    }
    assert made == ["long", "long3", "rftC"]
    with pytest.raises(SystemExit):  # without --runs every run is evaluated anyway
        power_c.main([*argv, "--evaluate"])


def test_power_c_sets_each_remade_run_beside_the_tables_step_by_step(load_script, tmp_path: Path):
    """``compare_with_table``: per phase EM, loss and the per-step log against the table's file;
    a step differing in one entry beyond ``SAME_TO`` is not alike, and the largest difference shows."""
    power_c = load_script("benchmarks/power_c.py", "power_c_script")
    table = json.loads((RESULTS / "grpo_smollm2_cpu_seed2_long.json").read_text())
    made = json.loads(json.dumps(table))
    made["grpo_history"][4]["policy/kl_ref"] += 0.01  # step 5's KL off
    made["grpo_history"][7]["policy/entropy"] += power_c.SAME_TO / 2  # within rounding
    made["grpo_history"] = made["grpo_history"][:19]  # a run one step short
    (tmp_path / "long.json").write_text(json.dumps(made))
    res = power_c.compare_with_table(tmp_path, RESULTS)
    assert list(res["runs"]) == ["grpo"] and res["to_make"] == [n for n, *_ in power_c.RUNS][1:]
    phases = res["runs"]["grpo"]["phases"]
    assert phases["sft"]["em"] == [table["em_sft"]] * 2 and "steps" not in phases["sft"]
    assert phases["sft"]["final_loss"] == [table["sft_budget"]["final_loss"]] * 2
    steps = phases["grpo"]["steps"]
    assert (steps["table_steps"], steps["made_steps"], steps["same_steps"]) == (20, 19, 18)
    assert steps["max_difference"]["policy/kl_ref"] == pytest.approx(0.01)
    assert steps["max_difference"]["env/reward"] == 0.0
    assert steps["made"][4]["policy/kl_ref"] == made["grpo_history"][4]["policy/kl_ref"]


def test_power_c_keeps_the_runs_an_earlier_command_compared_whose_folders_are_gone(
    load_script, tmp_path: Path
):
    """``save_comparison``: a run made again here replaces its entry; a run compared by an earlier
    command (on a machine whose run folders are gone) stays, and the runs keep ``RUNS``' order."""
    power_c = load_script("benchmarks/power_c.py", "power_c_script")
    path = tmp_path / "remake.json"
    earlier = {"grpo": {"phases": "earlier"}, "grpo_dynamic_seed3": {"phases": "earlier"}}
    path.write_text(json.dumps({"same_to": 1.0, "runs": earlier, "to_make": []}))
    made = {"same_to": power_c.SAME_TO, "runs": {"rft": {"phases": "now"}, "grpo": {"phases": "now"}}}
    saved = power_c.save_comparison(path, made)
    assert json.loads(path.read_text()) == saved
    assert saved["same_to"] == power_c.SAME_TO
    assert saved["runs"] == {
        "grpo": {"phases": "now"},
        "rft": {"phases": "now"},
        "grpo_dynamic_seed3": {"phases": "earlier"},
    }
    assert saved["to_make"] == ["grpo_seed3", "continue_sft", "grpo_dynamic"]
    assert power_c.save_comparison(tmp_path / "new.json", made)["runs"] == {
        "grpo": {"phases": "now"},
        "rft": {"phases": "now"},
    }
