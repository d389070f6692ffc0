"""The MkDocs hooks (``docs_hooks/``): the results tables, and the CLI reference."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hook(name: str):
    """A hook module of ``docs_hooks/``, loaded under a name no other module uses."""
    spec = importlib.util.spec_from_file_location(
        f"_hopgym_docs_hook_{name}", ROOT / "docs_hooks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli_reference, results = _hook("cli_reference"), _hook("results")


def _markers() -> list[str]:
    return sorted({m for p in (ROOT / "docs").glob("*.md") for m in results.MARKER.findall(p.read_text())})


def test_every_results_marker_has_a_renderer():
    assert _markers() and set(_markers()) <= set(results.RENDERERS)


@pytest.mark.parametrize("name", sorted(results.RENDERERS))
def test_results_tables_hold_the_json_figures(name):
    table = results.RENDERERS[name]()
    if table.startswith("```text\n"):  # a run's printed lines, shown as they were printed
        assert table.endswith("\n```") and table.count("\n") >= 3
        return
    if table.startswith("!["):  # pictures (habit_fix_curves), one a paragraph
        assert all(p.startswith("![") and "](data:image/png;base64," in p for p in table.split("\n\n"))
        return
    rows = [line for line in table.splitlines() if line.startswith("|")]
    assert len(rows) >= 3 and len({row.count("|") for row in rows}) == 1  # header, rule, rows: one width


def test_sb3_table_reads_the_json():
    import json

    data = json.loads((results.RESULTS / "sb3_learning.json").read_text())
    em = data["summary"]["ppo"]["em"]
    assert f"{em:.3f} ± " in results.sb3_learning()


def test_grpo_step_rows_say_when_the_loss_or_the_episodes_differ():
    text = results.grpo_step_cost(results.GRPO_STEP_BF16)
    same, bf16 = (line for line in text.splitlines() if line.startswith("- **"))
    assert same.startswith("- **shared_no_kl**:") and "rounding" not in same and "other episodes" not in same
    assert bf16.startswith("- **shared_no_kl_bf16**:")
    assert "up to bf16 rounding" in bf16 and "It sampled other episodes than before" in bf16


def test_unknown_results_marker_fails_the_build():
    with pytest.raises(KeyError, match="unknown results table"):
        results.render("<!-- results: nothing_here -->")


def test_cli_reference_covers_every_command_and_subcommand():
    from hopgym.cli import COMMANDS

    progs = [prog for prog, _ in cli_reference.parsers()]
    assert progs[0] == "hopgym"
    for command in COMMANDS:
        assert f"hopgym {command.replace('_', '-')}" in progs
    assert {"hopgym index build", "hopgym train grpo", "hopgym train sft"} <= set(progs)
    page = cli_reference.on_page_markdown("# CLI\n\n" + cli_reference.MARKER)
    assert "## `hopgym eval`" in page and re.search(r"--max-turns", page)


def test_first_run_results_are_of_the_training_pages_commands():
    """``train_first_run.json`` times the commands the training page shows now, not older ones."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location(
        "_train_first_run", ROOT / "benchmarks" / "train_first_run.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ran = [
        c["command"] for c in json.loads((results.RESULTS / "train_first_run.json").read_text())["commands"]
    ]
    assert ran == module.page_commands(), "run python benchmarks/train_first_run.py --json ... again"


def test_habit_fix_power_rows_of_a_re_evaluation_still_going(tmp_path, monkeypatch):
    """The re-evaluation table: a finished SFT, a GRPO with one chunk of two; each of the two
    habit-fix tables reads its own files of the results folder."""
    d = {
        "habit": "searches",
        "args": {"seed": 0},
        "settings": {"n_eval": 500},
        "seconds": {"sft": 3000.0, "grpo": 700.0},
        "fingerprints": {"grpo": [{"sha256": "0123456789abcdef" * 4, "from_question": 0}]},
        "summary": {
            "sft": {"questions": 500, "em": 0.15, "redundant_searches_per_episode": 2.8, "first_n": 100,
                    "first_n_agree": 100},
            "grpo": {"questions": 100, "em": 0.2, "redundant_searches_per_episode": 0.3, "first_n": 100,
                     "first_n_agree": 99, "gained": 14, "lost": 4, "p_value": 0.031, "holds": True},
        },
    }  # fmt: skip
    rows = [r for r in results.habit_fix_power({"x": d}).splitlines() if r.startswith("| searches")]
    assert rows == [
        "| searches | 0 | SFT | 500 of 500 | 0.150 | 2.80 | – | – | – | 100 of 100 | not recorded | 3,000 |",
        "| searches | 0 | GRPO | 100 of 500 | 0.200 | 0.30 | +14 / −4 | 0.031 | **yes: a gain** "
        "| 99 of 100 | `0123456789ab` | 700 |",
    ]  # no right-source column: the searches habit has no such rate
    assert "no re-evaluation yet" in results.habit_fix_power({})
    assert results._holds({"gained": 4, "lost": 14}) == "**yes: a loss**"
    # Weights made again: from which question, checked on how many; and a checked SFT.
    again = [{"sha256": "ab" * 32, "from_question": 400, "same_outcomes_on": 100}]
    assert results._weights(again, 500) == "1–400: not recorded; 401–500: `abababab`, alike on the first 100"
    assert (
        results._weights(again, 400) == "1–400: not recorded; made again: `abababab`, alike on the first 100"
    )
    both = [{"sha256": "cd" * 32, "from_question": 0}, *again]
    assert results._weights(both, 500) == "1–400: `cdcdcdcd`; 401–500: `abababab`, alike on the first 100"
    assert (results._p_value(0.00012), results._p_value(0.0312)) == ("< 0.001", "0.031")
    # Checkpoint C's runs: no habit (nor its columns), the runs named by seed and sampling.
    c = {**d, "habit": None, "summary": {"grpo_dynamic_seed3": d["summary"]["grpo"]}}
    table = results.smollm2_power({"c": c}).splitlines()
    assert table[0].startswith("| seed | checkpoint | questions | held-out EM | gained / lost vs SFT |")
    assert table[2].startswith("| 0 | GRPO, dynamic sampling, seed 3 | 100 of 500 | 0.200 | +14 / −4 |")
    assert "no re-evaluation yet" in results.smollm2_power({})
    # C's runs made again, beside the table's: one line per phase, steps alike, how each trained.
    fp32 = {"bf16": False, "gradient_checkpointing": False}
    steps = {
        "table_steps": 20,
        "made_steps": 20,
        "same_steps": 19,
        "max_difference": {"env/reward": 0.0625, "policy/kl_ref": 7.3e-7, "policy/entropy": 3.1e-6},
    }
    remake = {
        "same_to": 1e-4,
        "runs": {"grpo": {"test_questions": [100, 100], "threads": [2, 1], "phases": {
            "sft": {"em": [0.28, 0.28], "final_loss": [0.2669405, 0.2669398], "cpu_seconds": [2136.1, 1376.2],
                    "train_fields": [fp32, fp32]},
            "grpo": {"em": [0.32, 0.31], "final_loss": [None, None], "cpu_seconds": [12430.1, None],
                     "train_fields": [{**fp32, "gradient_checkpointing": True}, None], "steps": steps},
        }}},
        "to_make": ["grpo_dynamic", "grpo_dynamic_seed3"],
    }  # fmt: skip
    out = results.smollm2_remake(remake)
    assert out.startswith(
        "1 of 3 runs made again so far (to make: GRPO, dynamic sampling; GRPO, dynamic sampling, seed 3); "
        "their training took 1,376 CPU s here. "
        "Not all repeat the table's: GRPO, seed 2, after C's SFT, GRPO phase."
    )
    assert "agree with the table's to 0.0001" in out
    assert out.splitlines()[-2:] == [
        "| GRPO, seed 2, after C's SFT | SFT | 0.280 → 0.280 (100 questions) | 0.266941 / 0.266940 "
        "| no per-step log | – | fp32 / fp32 | 2,136 (2 threads) / 1,376 (1 thread) |",
        "| GRPO, seed 2, after C's SFT | GRPO | 0.320 → 0.310 (100 questions) | – | 19 of 20 "
        "| 7.3e-07 / 3.1e-06 | fp32, checkpointing / not recorded | 12,430 (2 threads) / – |",
    ]
    steps.update(same_steps=20)  # both differences mended: every phase repeats
    remake["runs"]["grpo"]["phases"]["grpo"]["em"][1] = 0.32
    assert "Each phase repeated the table's: the same held-out EM" in results.smollm2_remake(remake)
    assert results.smollm2_remake({"runs": {}, "to_make": ["grpo"], "same_to": 1e-4}).startswith(
        "No run of C"
    )
    # A results folder with a run file and its re-evaluation: each table reads only its own.
    run = results.RESULTS / "habit_fix_routing_seed0.json"
    (tmp_path / run.name).write_text(run.read_text())
    (tmp_path / "habit_fix_routing_seed0_eval500.json").write_text(json.dumps(d))
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    notes = [line for line in results.habit_fix().splitlines() if line.startswith("- `")]
    assert [line.split("`")[1] for line in notes] == ["habit_fix_routing_seed0.json"]
    power = [r for r in results.habit_fix_power().splitlines() if r.startswith("| searches")]
    assert power == rows


def test_habit_fix_rows_of_a_run_still_going(monkeypatch):
    """The habit-fix table from a results file with the SFT and GRPO done: their rows, the goal
    computed from the file, the phases still to run, and the per-step curves."""
    qs = [f"q{i}" for i in range(10)]
    d = {
        "habit": "routing",
        "args": {
            "seed": 1,
            "model": "m",
            "env": "hopgym/SyntheticRouting-v1",
            "env_kw": {"local_coverage": 0.8},
            "teacher": {"random_route": 1.0},
            "costs": {"search_cost": {"weight": 0.1}},
            "max_length": 1536,
        },
        "test_questions": 10,
        "sft_budget": {"examples": 96, "cut_examples": 2},
        "phases": {"sft": {"cpu_seconds": 100.0}, "grpo": {"cpu_seconds": 2500.0}},
        "sft": {"em": 0.5, "reward_terms/search_cost": -0.1, "right_source_rate": 0.5},
        "em_sft": 0.5,
        "sft_right": qs[:5],
        "grpo": {"em": 0.6, "reward_terms/search_cost": -0.05, "right_source_rate": 0.8},
        "em_grpo": 0.6,
        "grpo_right": qs[1:7],
        # Five curves: two rows of panels.
        "grpo_history": [
            dict.fromkeys(
                ("env/reward", "env/em", "env/right_source_rate", "policy/kl_ref", "policy/entropy"), r
            )
            | {"step": k}
            for k, r in ((1, 0.2), (2, 0.4))
        ],
    }
    out = results.habit_fix({"habit_fix_routing_seed1": d})
    rows = [line for line in out.splitlines() if line.startswith("| routing")]
    assert rows[0] == "| routing | 1 | SFT | 1.00 | 0.500 | 0.500 | – | – | 100 | – |"
    assert (
        rows[1] == "| routing | 1 | GRPO | 0.50 (−50%) | 0.800 | 0.600 | +2 / −1 | 1.000 | 2,500 | **met** |"
    )
    assert [r.split(" | ")[2:4] for r in rows[2:]] == [
        ["RFT", "not run yet"],
        ["continue-SFT", "not run yet"],
    ]
    assert "1536 tokens a trajectory (2 of 96 SFT examples longer), RFT keeping the right episodes" in out
    assert "still to run: RFT, continue-SFT." in out
    assert "10 held-out questions, precision not recorded;" in out
    # How each phase trained, where the file records it.
    fields = {"bf16": False, "gradient_checkpointing": False}
    d["phases"]["sft"]["train_fields"] = fields
    d["phases"]["grpo"]["train_fields"] = {**fields, "gradient_checkpointing": True}
    assert "10 held-out questions, trained in fp32;" in results.habit_fix({"x": d})
    d["phases"]["grpo"]["train_fields"]["bf16"] = True
    assert "trained in fp32 (SFT), bf16 autocast (GRPO);" in results.habit_fix({"x": d})
    for p in d["phases"].values():
        del p["train_fields"]
    pytest.importorskip("matplotlib")
    assert "data:image" not in out  # the curves are habit_fix_curves'
    curves = results.habit_fix_curves({"habit_fix_routing_seed1": d})
    assert curves.startswith("![Per-step curves of the routing runs (GRPO, RFT)](data:image/png;base64,")
    # One picture per habit: the unanswered-priced GRPO beside the plain one, named so.
    drawn = []
    monkeypatch.setattr(results, "_curves_png", lambda runs, title: drawn.append((list(runs), title)))
    priced = {**d, "habit": "routing_unanswered", "args": {**d["args"], "seed": 4}}
    results.habit_fix_curves({"a": d, "b": priced, "c": {**d, "habit": "searches"}})
    assert drawn == [
        (["GRPO, seed 1"], "searches: per-step curves of GRPO and RFT after the SFT"),
        (
            ["GRPO, seed 1", "GRPO, unanswered priced, seed 4"],
            "routing: per-step curves of GRPO and RFT after the SFT",
        ),
    ]
    # A phase that went on from a checkpoint after a stop: its CPU seconds marked, the note says so.
    d["phases"]["grpo"]["resumed_from"] = "grpo/checkpoint-3"
    out = results.habit_fix({"habit_fix_routing_seed1": d})
    assert "| 1.000 | 2,500 (resumed) | **met** |" in out
    assert "its GRPO went on from `grpo/checkpoint-3` after a stop, and its CPU seconds count only" in out
    # An SFT that never searched the web: the goal undefined, and the note says why.
    d["sft"] = {"em": 0.5, "reward_terms/search_cost": 0.0, "right_source_rate": 0.7}
    out = results.habit_fix({"habit_fix_routing_seed1": d})
    grpo = next(line for line in out.splitlines() if line.startswith("| routing | 1 | GRPO"))
    assert grpo.endswith("| 2,500 (resumed) | undefined: no habit to fix |")
    assert "its SFT did not learn the habit (its routing cost / episode (web searches) is 0)" in out


def _sft_and_grpo(qs: list[str]) -> dict:
    """An over-searching run's SFT and GRPO evaluations (``qs``: its held-out questions): the
    repeats cut from 2.5 to 0.5 an episode (at 0.2 a repeat), one question right, then two."""
    return {
        "sft": {"em": 0.1, "reward_terms/redundant_query": -0.5},
        "em_sft": 0.1,
        "sft_right": qs[:1],
        "grpo": {"em": 0.2, "reward_terms/redundant_query": -0.1},
        "em_grpo": 0.2,
        "grpo_right": qs[:2],
    }


def test_habit_fix_goals_on_the_runs_questions_and_on_more():
    """The goals table: each method's goal on its run's questions (the run's summary) and on 500
    (its re-evaluation's rows, judged by the same ``habit_fix.goal_met``): an unanswered-priced
    GRPO beside its habit's, a re-evaluation still going, and one not begun."""
    qs = [f"q{i}" for i in range(10)]
    args = {"seed": 1, "costs": {"redundancy": {"query_penalty": 0.2}}}
    searches = {
        "habit": "searches",
        "args": args,
        "test_questions": 10,
        **_sft_and_grpo(qs),
        "rft": {"em": 0.1, "reward_terms/redundant_query": -0.4},
        "em_rft": 0.1,
        "rft_right": qs[:1],
    }
    unanswered = {
        **{k: v for k, v in searches.items() if not k.startswith(("grpo", "em_grpo", "rft", "em_rft"))},
        "habit": "searches_unanswered",
        "grpo": {"em": 0.1, "reward_terms/redundant_query": -0.2},
        "em_grpo": 0.1,
        "grpo_right": qs[1:2],
    }
    sft500 = {"questions": 500, "em": 0.116, "redundant_searches_per_episode": 2.5}
    pair = {"gained": 18, "lost": 41, "p_value": 0.0038}
    ev = {
        "summary": {
            "sft": sft500,
            "grpo": {"questions": 200, "em": 0.1, "redundant_searches_per_episode": 0.5, **pair},
            "grpo_unanswered": {"questions": 500, "em": 0.07, "redundant_searches_per_episode": 0.72, **pair},
        }
    }
    files = {
        "habit_fix_searches_seed1": searches,
        "habit_fix_searches_unanswered_seed1": unanswered,
        "habit_fix_searches_seed1_eval500": ev,
    }
    out = results.habit_fix_goals(files)
    assert "| habit measure: SFT → method (10 q) |" in out.splitlines()[0]
    rows = [line.split(" | ")[2:] for line in out.splitlines() if line.startswith("| searches")]
    assert rows == [
        [
            "GRPO",
            "2.50 → 0.50 (−80%)",
            "0.100 → 0.200, +1 / −0 (1.000)",
            "**met**",
            "–",
            "–",
            "evaluating: 200 of 500 |",
        ],
        [
            "GRPO, unanswered priced",
            "2.50 → 1.00 (−60%)",
            "0.100 → 0.100, +1 / −1 (1.000)",
            "**met**",
            "2.50 → 0.72 (−71%)",
            "0.116 → 0.070, +18 / −41 (0.004)",
            "not met |",
        ],
        [
            "RFT",
            "2.50 → 2.00 (−20%)",
            "0.100 → 0.100, +0 / −0 (1.000)",
            "not met",
            "–",
            "–",
            "not evaluated yet |",
        ],
    ]
    # The same rows with the loss not significant: the goal holds at 500.
    ev["summary"]["grpo_unanswered"]["p_value"] = 0.2
    row = next(r for r in results.habit_fix_goals(files).splitlines() if "unanswered priced" in r)
    assert row.endswith("| 0.116 → 0.070, +18 / −41 (0.200) | **met** |")
    # The committed files: every run's methods, each with its goal on 500 questions or why not.
    committed = results.habit_fix_goals().splitlines()[2:]
    assert committed and all(
        r.split(" | ")[-1].strip(" |")
        in {"**met**", "not met", "undefined: no habit to fix", "not evaluated yet"}
        or r.split(" | ")[-1].startswith("evaluating: ")
        for r in committed
    )


def test_habit_fix_rows_of_a_run_from_another_habits_sft():
    """``searches_unanswered`` trains GRPO only, from the ``searches`` run's SFT: its SFT row is
    that checkpoint's evaluation, no RFT or continue-SFT row is owed, and the note names the SFT."""
    qs = [f"q{i}" for i in range(10)]
    d = {
        "habit": "searches_unanswered",
        "args": {
            "seed": 1,
            "model": "m",
            "env": "hopgym/Synthetic-v1",
            "env_kw": {"top_k": 2},
            "teacher": {"extra_searches": 1},
            "costs": {"redundancy": {"query_penalty": 0.2}, "unanswered": {"value": -1.0}},
            "max_length": 1536,
        },
        "test_questions": 10,
        "sft_checkpoint": "runs/habit_fix/cpu_seed1/sft/checkpoint",
        "phases": {
            "sft": {"cpu_seconds": 600.0, "resumed_from": "runs/habit_fix/cpu_seed1/sft/checkpoint"},
            "grpo": {"cpu_seconds": 2000.0},
        },
        **_sft_and_grpo(qs),
    }
    out = results.habit_fix({"habit_fix_searches_unanswered_seed1": d})
    rows = [line for line in out.splitlines() if line.startswith("| searches_unanswered")]
    assert rows == [
        "| searches_unanswered | 1 | SFT | 2.50 | – | 0.100 | – | – | 600 (evaluation only) | – |",
        "| searches_unanswered | 1 | GRPO | 0.50 (−80%) | – | 0.200 | +1 / −0 | 1.000 | 2,000 | **met** |",
    ]
    assert "every phase done" in out and "went on from" not in out and "RFT keeping" not in out
    assert "its SFT is the searches run's (`runs/habit_fix/cpu_seed1/sft/checkpoint`)" in out
