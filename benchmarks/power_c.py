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
on from its newest checkpoint, and the evaluation from its last saved chunk. SFT did not repeat
bit for bit between the table's checkpoints A and B (one command, 0.270 and 0.310), so after
the runs every run made so far is set beside the table's results file (``--compare-json``:
held-out EM, final loss, the per-step log step by step; a run compared there by an earlier
command whose folder is gone stays), and the docs say from it whether the remade C is the
table's::

    OMP_NUM_THREADS=1 nohup python benchmarks/power_c.py > /tmp/power_c.log 2>&1 &

Hours of training at one thread (``--compare-json`` records each run's CPU seconds), then 7
evaluations of 500 questions. The runs after the first only start from C's SFT, so a second
command can make some of them beside the first once that SFT is trained (``--runs``: those
runs only, no evaluation); each run is made under a lock on its results file, so two commands
never make one run::

    OMP_NUM_THREADS=1 nohup python benchmarks/power_c.py --runs grpo_seed3 rft > /tmp/c2.log 2>&1 &

``--runs ... --evaluate`` then evaluates C's SFT and those runs, so the evaluation can begin
before every run is made (the file takes the rest later), and a second such command evaluates
beside it (each checkpoint by one of them: ``benchmarks/paired_eval.py``).
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

from hopgym._atomic import check_writable, sole_writer, write_json  # noqa: E402

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

#: Each run's results file in the table (``benchmarks/results/<name>.json``), the logs a remade run
#: is compared with (:func:`compare_with_table`).
TABLE: dict[str, str] = {
    "grpo": "grpo_smollm2_cpu_seed2_long",
    "grpo_seed3": "grpo_smollm2_cpu_seed2_long_seed3",
    "rft": "grpo_smollm2_cpu_seed2_long_rft",
    "continue_sft": "grpo_smollm2_cpu_seed2_long_continue_sft",
    "grpo_dynamic": "grpo_smollm2_cpu_seed2_dynamic",
    "grpo_dynamic_seed3": "grpo_smollm2_cpu_seed2_dynamic_seed3",
}
#: The per-step log's entries compared (the step's sampled reward and EM, searches, KL to the start
#: and entropy), and the difference below which two float logs count as the same.
STEP_KEYS = ("env/reward", "env/em", "env/searches_per_episode", "policy/kl_ref", "policy/entropy")
SAME_TO = 1e-4

#: Each phase keeps its last checkpoint (TRL's for SFT, GRPO and continue-SFT; RFT's last round)
#: and resumes from it.
KEEP_CHECKPOINTS: dict[str, Any] = {
    **{f"trl.{k}": v for k, v in CHECKPOINTS.items()},
    **{f"sft_trl.{k}": v for k, v in CHECKPOINTS.items()},
    "rft.save_rounds": True,
    "rft.resume_from_checkpoint": "last",
}


def compare_with_table(root: Path, table_dir: Path) -> dict[str, Any]:
    """Each run made under ``root`` beside the table's (:data:`TABLE`): per phase, held-out EM on
    the run's own questions, the final training loss, how it trained, CPU seconds and threads,
    and the per-step log step by step (:data:`STEP_KEYS`: how many steps agree to
    :data:`SAME_TO`, the largest difference per entry, and both logs, so the file shows the
    remake's without ``runs/``). Runs not made yet are left out."""
    runs: dict[str, Any] = {}
    for name, method, folder, _ in RUNS:
        path = root / f"{folder}.json"
        if not path.exists():
            continue
        made, table = (
            json.loads(path.read_text()),
            json.loads((table_dir / f"{TABLE[name]}.json").read_text()),
        )
        phases = {}
        for phase in ("sft", method) if name == RUNS[0][0] else (method,):
            if f"em_{phase}" not in made:
                continue
            budgets = table.get(f"{phase}_budget", {}), made.get(f"{phase}_budget", {})
            entry: dict[str, Any] = {
                "em": [table.get(f"em_{phase}"), made[f"em_{phase}"]],
                "final_loss": [b.get("final_loss") for b in budgets],
                "cpu_seconds": [b.get("cpu_seconds") for b in budgets],
                "train_fields": [d.get("train_fields", {}).get(phase) for d in (table, made)],
            }
            logs = table.get(f"{phase}_history"), made.get(f"{phase}_history")
            if logs[0] and logs[1]:
                entry["steps"] = _compare_logs(*logs)
            phases[phase] = entry
        runs[name] = {
            "table_file": TABLE[name],
            "test_questions": [table.get("test_questions"), made.get("test_questions")],
            "threads": [table.get("threads"), made.get("threads")],
            "phases": phases,
        }
    return {
        "same_to": SAME_TO,
        "step_keys": list(STEP_KEYS),
        "runs": runs,
        "to_make": [n for n, *_ in RUNS if n not in runs],
    }


def _compare_logs(table: list[dict[str, Any]], made: list[dict[str, Any]]) -> dict[str, Any]:
    """Two per-step logs step by step (:func:`compare_with_table`)."""
    pairs = list(zip(table, made, strict=False))
    keys = [k for k in STEP_KEYS if all(k in a and k in b for a, b in pairs)]
    diff = {k: max(abs(a[k] - b[k]) for a, b in pairs) for k in keys}
    same = sum(all(abs(a[k] - b[k]) <= SAME_TO for k in keys) for a, b in pairs)
    return {
        "table_steps": len(table),
        "made_steps": len(made),
        "same_steps": same,
        "max_difference": diff,
        "table": [{k: a[k] for k in ("step", *keys) if k in a} for a in table],
        "made": [{k: b[k] for k in ("step", *keys) if k in b} for b in made],
    }


def save_comparison(path: Path, made: dict[str, Any]) -> dict[str, Any]:
    """Save :func:`compare_with_table`'s ``made`` into ``path`` as another command may have left
    it: under a short lock, the runs compared there and not made under this ``--root`` (an earlier
    machine's, whose run folders are gone) are kept, in :data:`RUNS`' order; returns the file."""
    with sole_writer(path, wait=True):
        runs = {**_read(path).get("runs", {}), **made["runs"]}
        saved = {
            **made,
            "runs": {n: runs[n] for n, *_ in RUNS if n in runs},
            "to_make": [n for n, *_ in RUNS if n not in runs],
        }
        write_json(path, saved)
    return saved


def _read(results: Path) -> dict[str, Any]:
    """A run's results file, or nothing yet."""
    return json.loads(results.read_text()) if results.exists() else {}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default="runs/power_c", help="Where the runs' folders and results go.")
    p.add_argument("--preset", default="cpu", help="examples/grpo_smollm2.py's preset (the table's: cpu).")
    p.add_argument("--model", default="runs/smollm2-135m-instruct", help="The base model folder.")
    p.add_argument("--json", default="benchmarks/results/grpo_smollm2_c_eval500.json")
    p.add_argument(
        "--compare-json",
        default="benchmarks/results/grpo_smollm2_c_remake.json",
        help="Where each made run's comparison with the table's logs goes (written after the runs).",
    )
    p.add_argument("--table-dir", default="benchmarks/results", help="The table's results files.")
    p.add_argument("--n-eval", type=int, default=500)
    p.add_argument("--n-questions", type=int, default=2500)
    add_set_option(p, "Settings over every run's (tests: a smaller budget).")
    p.add_argument(
        "--runs",
        nargs="+",
        default=None,
        choices=[name for name, *_ in RUNS],
        help="Make these runs only (those after the first once C's SFT is trained), and no "
        "evaluation unless --evaluate. Default: every run not made yet, then the evaluation.",
    )
    p.add_argument(
        "--evaluate",
        action="store_true",
        help="With --runs: then evaluate C's SFT and these runs (the command without --runs adds the rest).",
    )
    ns = p.parse_args(argv)
    if ns.evaluate and ns.runs is None:
        p.error("--evaluate goes with --runs (without --runs every run is evaluated)")
    evaluating = ns.runs is None or ns.evaluate
    check_writable(ns.compare_json)  # before hours of training, not after them
    if evaluating:
        check_writable(ns.json)
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

        # A made run's file is only read (it is written whole), so two commands that evaluate
        # the same made runs do not contend for it; making a run takes its lock.
        run = _read(results)
        if f"em_{method}" not in run:
            with sole_writer(check_writable(results)):  # two commands never make one run
                run = _read(results)
                if f"em_{method}" not in run:
                    model = ns.model if folder == RUNS[0][2] else str(c_sft)
                    keep = [f"{k}={v!r}" for k, v in KEEP_CHECKPOINTS.items()]
                    kv = [*sets.split(), *_SAME_STEP.split(), *keep, *ns.sets]
                    argv_run = ["--preset", ns.preset, "--model", model, "--methods", method]
                    print(f"[power_c] {name}: {' '.join(kv)}", flush=True)
                    out = ["--out", str(root / folder), "--json", str(results)]
                    example.main([*argv_run, *out, "--set", *kv])
                    run = _read(results)
        runs[name] = {"run": run, "method": method}
    save_comparison(Path(ns.compare_json), compare_with_table(root, Path(ns.table_dir)))
    if not evaluating:
        return {"made": {name: r["run"].get(f"em_{r['method']}") for name, r in runs.items()}}
    first = root / f"{RUNS[0][2]}.json"
    if not first.exists():  # C's SFT and the run settings every evaluation uses
        raise SystemExit(
            f"{first}: C's first run is not made yet; "
            f"run `python benchmarks/power_c.py --runs {RUNS[0][0]}` first"
        )
    c_run = json.loads(first.read_text())
    specs = {"sft": checkpoints(c_run)["sft"]}
    for name, r in runs.items():
        specs[name] = checkpoints(r["run"])[r["method"]]
        # The questions each run's own evaluation answered right (its first test questions, as
        # C's), so that each checkpoint is checked to answer them again as it did there.
        if f"{r['method']}_right" in r["run"]:
            c_run = {**c_run, f"{name}_right": r["run"][f"{r['method']}_right"]}
    return evaluate(c_run, specs, Path(ns.json), ns.n_eval, ns.n_questions, source=str(first))


if __name__ == "__main__":
    main()
