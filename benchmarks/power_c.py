"""Checkpoint C and its runs, made again, then each re-evaluated on 500 held-out questions.

The SmolLM2 table of ``docs/experiments.md`` (#smollm2-grpo-table) compares, from one SFT
checkpoint (C: the ``cpu`` preset's SFT with seed 2), two 20-step GRPO runs (seeds 2 and 3), RFT
and continue-SFT on the same budget, and two GRPO runs with dynamic sampling, each on 100 held-out
questions: its gains of 0.04-0.05 were about one standard error. C's checkpoint and its runs are
gone, so this script runs their committed commands again (:data:`RUNS`, the table's own
settings; the run folders move under ``--root``, every phase keeps its last checkpoint, training
is pinned to fp32 as the table's was, and GRPO's loss runs one episode a pass: ``_SAME_STEP``),
then evaluates the SFT and every run's final checkpoint greedily on the same 500 held-out
questions with ``benchmarks/paired_eval.py``, each paired with the SFT (gained, lost, exact
McNemar p).

Every step resumes: a run whose results file has its method's EM is skipped, a stopped run goes
on from its newest checkpoint, and the evaluation from its last saved chunk. The SFT is not
reproducible bit for bit on this machine (the table's checkpoints A and B, one command, scored
0.270 and 0.310), so this C is a new draw of the same recipe::

    OMP_NUM_THREADS=1 nohup python benchmarks/power_c.py > /tmp/power_c.log 2>&1 &

About 13 CPU hours of training at one thread, and 7 evaluations of 500 questions. The runs after
the first only start from C's SFT, so a second command can make some of them beside the first
once that SFT is trained (``--runs``: those runs only, no evaluation); each run is made under a
lock on its results file, so two commands never make one run::

    OMP_NUM_THREADS=1 nohup python benchmarks/power_c.py --runs grpo_seed3 rft > /tmp/c2.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from habit_fix import CHECKPOINTS, add_set_option, load_example  # noqa: E402
from paired_eval import checkpoints, evaluate  # noqa: E402

from hopgym._atomic import check_writable, sole_writer  # noqa: E402

#: The table's C-runs as committed: (name in the evaluation, method, run folder, settings).
#: The first makes C and its seed-2 GRPO in one run; the others start from C's SFT checkpoint.
#: Two settings are pinned that the table's runs got from their machine or that change only
#: float rounding (:data:`_SAME_STEP`).
_LONG = "questions_per_step=2 group_size=8"
#: - ``bf16=False``: the table's runs trained in fp32 (their CPU had no bf16 instructions, and
#:   ``bf16=None`` follows the CPU: their results files' ``train_fields``); on a CPU with bf16
#:   the same command would train under bf16 autocast.
#: - ``micro_batch=1 gradient_checkpointing=False``: GRPO's loss one episode a pass, activations
#:   kept (``benchmarks/grpo_step_profile.py``'s ``after``): the same update up to float
#:   rounding in 0.72x the CPU time and under half the memory of the table's one pass of 16
#:   episodes with checkpointing, so that two runs fit the machine side by side.
_SAME_STEP = "bf16=False micro_batch=1 gradient_checkpointing=False"
RUNS: tuple[tuple[str, str, str, str], ...] = (
    ("grpo", "grpo", "long", f"seed=2 grpo_steps=20 {_LONG} grpo_lr=1e-5"),
    (
        "grpo_seed3",
        "grpo",
        "long3",
        f"sft_steps=0 seed=3 eval_start=False grpo_steps=20 {_LONG} grpo_lr=1e-5",
    ),
    ("rft", "rft", "rftC", f"sft_steps=0 seed=2 eval_start=False grpo_steps=20 {_LONG} grpo_lr=1e-5"),
    (
        "continue_sft",
        "continue_sft",
        "csftC",
        f"sft_steps=0 seed=2 eval_start=False grpo_steps=20 {_LONG} grpo_lr=1e-5 sft_lr=2e-5",
    ),
    (
        "grpo_dynamic",
        "grpo",
        "dsC",
        f"sft_steps=0 seed=2 eval_start=False grpo_steps=9 {_LONG} grpo_lr=2e-5 resample_rounds=2",
    ),
    (
        "grpo_dynamic_seed3",
        "grpo",
        "dsC3",
        f"sft_steps=0 seed=3 eval_start=False grpo_steps=9 {_LONG} grpo_lr=2e-5 resample_rounds=2",
    ),
)

#: Each phase keeps its last checkpoint (TRL's for SFT, GRPO and continue-SFT; RFT's last round)
#: and resumes from it.
KEEP_CHECKPOINTS: dict[str, Any] = {
    **{f"trl.{k}": v for k, v in CHECKPOINTS.items()},
    **{f"sft_trl.{k}": v for k, v in CHECKPOINTS.items()},
    "rft.save_rounds": True,
    "rft.resume_from_checkpoint": "last",
}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default="runs/power_c", help="Where the runs' folders and results go.")
    p.add_argument("--preset", default="cpu", help="examples/grpo_smollm2.py's preset (the table's: cpu).")
    p.add_argument("--model", default="runs/smollm2-135m-instruct", help="The base model folder.")
    p.add_argument("--json", default="benchmarks/results/grpo_smollm2_c_eval500.json")
    p.add_argument("--n-eval", type=int, default=500)
    p.add_argument("--n-questions", type=int, default=2500)
    add_set_option(p, "Settings over every run's (tests: a smaller budget).")
    p.add_argument(
        "--runs",
        nargs="+",
        default=None,
        choices=[name for name, *_ in RUNS],
        help="Make these runs only (those after the first once C's SFT is trained), and no "
        "evaluation. Default: every run not made yet, then the evaluation.",
    )
    ns = p.parse_args(argv)
    if ns.runs is None:
        check_writable(ns.json)  # before hours of training, not at the evaluation after them
    example = load_example()
    root = Path(ns.root)
    c_sft = root / RUNS[0][2] / "sft" / "checkpoint"
    runs: dict[str, dict[str, Any]] = {}
    for name, method, folder, sets in RUNS:
        if ns.runs is not None and name not in ns.runs:
            continue
        results = root / f"{folder}.json"
        if folder != RUNS[0][2] and not (c_sft / "sft_budget.json").exists():
            raise SystemExit(
                f"{c_sft}: C's SFT is not trained yet, and the {name} run starts from it; "
                f"run `python benchmarks/power_c.py --runs {RUNS[0][0]}` first (it trains C, then its GRPO)"
            )
        with sole_writer(check_writable(results)):  # two commands never make one run
            run = json.loads(results.read_text()) if results.exists() else {}
            if f"em_{method}" not in run:
                model = ns.model if folder == RUNS[0][2] else str(c_sft)
                keep = [f"{k}={v!r}" for k, v in KEEP_CHECKPOINTS.items()]
                kv = [*sets.split(), *_SAME_STEP.split(), *keep, *ns.sets]
                argv_run = ["--preset", ns.preset, "--model", model, "--methods", method]
                print(f"[power_c] {name}: {' '.join(kv)}", flush=True)
                example.main([*argv_run, "--out", str(root / folder), "--json", str(results), "--set", *kv])
                run = json.loads(results.read_text())
        runs[name] = {"run": run, "method": method}
    if ns.runs is not None:
        return {"made": {name: r["run"].get(f"em_{r['method']}") for name, r in runs.items()}}
    specs = {"sft": checkpoints(runs["grpo"]["run"])["sft"]}
    for name, r in runs.items():
        specs[name] = checkpoints(r["run"])[r["method"]]
    first = root / f"{RUNS[0][2]}.json"
    return evaluate(runs["grpo"]["run"], specs, Path(ns.json), ns.n_eval, ns.n_questions, source=str(first))


if __name__ == "__main__":
    main()
