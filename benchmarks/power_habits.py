"""A habit-fixing run's checkpoints made again where they are gone, then re-evaluated on 500
held-out questions, each paired with the SFT (``benchmarks/paired_eval.py``).

``benchmarks/habit_fix.py`` keeps its checkpoints in its run folder (``runs/habit_fix/...``), not
in the repository; the 500-question evaluation of a run needs them. For ``--habit`` and
``--seed`` this script reads the run's committed results file
(``benchmarks/results/habit_fix_<habit>_seed<seed>.json``), and for each of ``--methods`` (the
run's own by default) whose checkpoint is missing runs ``habit_fix.py`` again with the run's
command: the same preset, habit and seed into the same run folder, training only (its own
evaluation cut to one question; the re-evaluation below covers the run's questions and more).
Then ``paired_eval`` evaluates the SFT and those methods into
``benchmarks/results/habit_fix_<habit>_seed<seed>_eval500.json``.

A habit that trains from another habit's SFT (``searches_unanswered``, from ``searches``) is
evaluated into that habit's file, each method named with the difference
(``grpo_unanswered``), so it is paired with the SFT evaluated once.

A checkpoint made again need not be the same bit for bit (float arithmetic differs between
CPUs); ``paired_eval`` records the weights each row's questions came from and lets weights it
has no record of add questions only if they answer the file's first chunk exactly as recorded,
else it refuses them. Every step resumes: training from its newest checkpoint, the evaluation
from its last chunk::

    OMP_NUM_THREADS=1 nohup python benchmarks/power_habits.py --habit searches --seed 0 \\
        > /tmp/power_searches0.log 2>&1 &
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import habit_fix  # noqa: E402
from paired_eval import checkpoints, evaluate  # noqa: E402

from hopgym._atomic import check_writable  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def results_file(habit: str, seed: int, root: Path = RESULTS) -> Path:
    """A habit-fixing run's committed results file (``habit_fix.py --json``'s name for it)."""
    return root / f"habit_fix_{habit}_seed{seed}.json"


def missing(run: dict[str, Any], methods: list[str]) -> list[str]:
    """The phases (``"sft"`` and of ``methods``) whose final checkpoint is not in the run folder."""
    gone = []
    for name in ["sft", *methods]:
        try:
            spec = checkpoints(run, [name])[name]
        except SystemExit:  # a method's last checkpoint is not there
            gone.append(name)
            continue
        if not (Path(spec["model"]) / "config.json").is_file():
            gone.append(name)
    return gone


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--habit", default="searches", choices=sorted(habit_fix.HABITS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--methods",
        nargs="*",
        default=None,
        choices=habit_fix.METHODS,
        help="Default: the run's; none: the SFT only.",
    )
    p.add_argument("--preset", default="cpu", choices=sorted(habit_fix.PRESETS), help="The run's preset.")
    p.add_argument("--results", default=str(RESULTS), help="Where the run's results files are.")
    p.add_argument("--model", default=None, help="The base model folder (default: the preset's).")
    p.add_argument("--n-eval", type=int, default=500)
    p.add_argument("--n-questions", type=int, default=2500)
    p.add_argument("--batch-size", type=int, default=32)
    habit_fix.add_set_option(p, "Settings over the run's, for making it again (tests: a smaller budget).")
    ns = p.parse_args(argv)
    habit = habit_fix.HABITS[ns.habit]
    source = results_file(ns.habit, ns.seed, Path(ns.results))
    if not source.is_file():
        raise SystemExit(
            f"{source}: no results of the {ns.habit} habit with seed {ns.seed}; run habit_fix.py first"
        )
    run = json.loads(source.read_text())
    methods = [m for m in habit_fix.METHODS if f"em_{m}" in run] if ns.methods is None else ns.methods
    if untrained := [m for m in methods if f"em_{m}" not in run]:
        raise SystemExit(f"{source}: the run has no {', '.join(untrained)}; run habit_fix.py for it first")
    into = source if habit.sft_of is None else results_file(habit.sft_of, ns.seed, Path(ns.results))
    target = check_writable(into.with_name(f"{into.stem}_eval{ns.n_eval}.json"))  # before any training
    gone = missing(run, methods)
    if habit.sft_of is not None and "sft" in gone:
        # The SFT is the other habit's run's: make it there (SFT only).
        remake(habit.sft_of, [], ns, results_file(habit.sft_of, ns.seed, Path(ns.results)))
        gone.remove("sft")
    if gone:  # this run's own SFT, where it is gone, is made again first by habit_fix.py
        remake(ns.habit, [m for m in gone if m != "sft"], ns, source)
    specs = checkpoints(run, methods)
    if habit.sft_of is not None:
        suffix = ns.habit.removeprefix(f"{habit.sft_of}_")
        specs = {"sft": specs["sft"], **{f"{m}_{suffix}": specs[m] for m in methods}}
        run = {**json.loads(into.read_text()), **{f"{m}_{suffix}_right": run[f"{m}_right"] for m in methods}}
    return evaluate(
        run,
        specs,
        target,
        ns.n_eval,
        ns.n_questions,
        source=os.path.relpath(into),
        batch_size=ns.batch_size,
    )


def remake(habit: str, methods: list[str], ns: argparse.Namespace, source: Path) -> None:
    """Run ``habit_fix.py`` again for ``habit`` (and ``ns``' seed and preset), its SFT where it is
    gone and ``methods``, into the run folder of the committed ``source``, training only: its
    results go to ``runs/power_habits``. Its settings must be the committed run's (but the
    evaluation's ``n_eval``)."""
    from hopgym.cli import parse_kwargs

    run = json.loads(source.read_text())
    base = ["--habit", habit, "--seed", str(ns.seed), "--preset", ns.preset, "--methods", *methods]
    sets = ["n_eval=1", *ns.sets]
    example = habit_fix.load_example()
    now = asdict(
        habit_fix.run_args(
            example,
            habit,
            ns.preset,
            ns.seed,
            Path(run["args"]["out"]),
            parse_kwargs(sets, "--set"),
            ns.model,
        )
    )
    then = json.loads(json.dumps(run["args"]))
    differ = sorted(k for k in then if k != "n_eval" and json.loads(json.dumps(now.get(k))) != then[k])
    if differ:
        raise SystemExit(
            f"{source}: habit_fix.py's settings now differ from the run's in {', '.join(differ)} "
            f"(e.g. {differ[0]}: {now.get(differ[0])!r}, then {then[differ[0]]!r}); it cannot make "
            "that run again"
        )
    scratch = Path("runs/power_habits") / source.name
    model = ["--model", ns.model] if ns.model else []
    print(
        f"[power_habits] making again: habit_fix.py {' '.join(base)} (into {run['args']['out']})", flush=True
    )
    habit_fix.main([*base, *model, "--out", run["args"]["out"], "--json", str(scratch), "--set", *sets])


if __name__ == "__main__":
    main()
