"""Fix a flawed teacher's habit by reward: over-searching, on SmolLM2-135M-Instruct (or a tiny model).

1. **SFT** on :class:`~hopgym.agents.teachers.ImperfectTeacher` episodes with
   ``extra_searches=1`` (every search repeated): the student learns the habit.
2. From that checkpoint, each of ``--methods`` on the same budget of sampled episodes:

   - ``grpo``: GRPO with the outcome reward plus
     :class:`~hopgym.rewards.cost_reward.RedundancyReward` (a repeated query costs) and
     :class:`~hopgym.rewards.cost_reward.SearchCostReward` (every search costs);
   - ``rft``: rejection-sampling fine-tuning with the same reward (the highest-reward episodes);
   - ``continue_sft``: more SFT on the same flawed teacher, as many episodes as GRPO sampled.

3. After each: greedy held-out EM, searches and redundant (repeated-query) searches per episode
   on the first ``n_eval`` test questions, and each method against the SFT question by question
   (gained, lost, exact McNemar p). The goal (issue 40): redundant searches down by at least
   half from the SFT at held-out EM no lower.

Each phase is a run of ``examples/grpo_smollm2.py`` (its :func:`run`, with ``teacher`` and
``costs`` set): the SFT one saves ``<out>/sft/checkpoint``; each method then starts from it. The
results file is written after every phase, and a phase whose results it already has is skipped,
so the same command resumes a stopped run at its first unfinished phase (an SFT that finished
training only evaluates its saved checkpoint). SFT, GRPO and continue-SFT save a TRL checkpoint
after every step, and a phase stopped midway resumes from the newest one (TRL's
``resume_from_checkpoint="last"``, which hopgym's trainers act on); an RFT phase stopped midway
starts over::

    OMP_NUM_THREADS=1 nohup python benchmarks/habit_fix.py --preset cpu --seed 0 \\
        --json benchmarks/results/habit_fix_searches_seed0.json > /tmp/habit_fix_seed0.log 2>&1 &

``--preset smoke`` runs every phase in seconds on a small model folder (``--model DIR``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_smollm2.py"

#: TRL checkpoints of a phase's every step (the newest only), and resuming from the newest one.
CHECKPOINTS: dict[str, Any] = {
    "save_strategy": "steps",
    "save_steps": 1,
    "save_total_limit": 1,
    "resume_from_checkpoint": "last",
}

#: The habit and the reward that prices it (both presets); SFT, continue-SFT and GRPO save a
#: TRL checkpoint after every step and resume from the newest one there is.
HABIT: dict[str, Any] = {
    "teacher": {"extra_searches": 1},
    # The teacher's repeat is the query with "again" added: 0.6 of the words in common counts.
    "costs": {
        "redundancy": {"query_penalty": 0.2, "query_similarity": 0.6},
        "search_cost": {"per_search": 0.02},
    },
    "reward": "default",
    "trl": CHECKPOINTS,
    "sft_trl": CHECKPOINTS,
}

#: Settings over the same-named preset of examples/grpo_smollm2.py (its ``cpu``: a 24-step SFT,
#: then 6 steps x 4 questions x 4 episodes = 96 sampled episodes per method, 100 held-out
#: questions; its ``smoke``: seconds on a small model). Here: fp32 (this experiment's CPUs have no
#: fast bf16) with checkpointing (a fp32 SFT batch of 4 without it took over 11 GB), GRPO's loss
#: one episode a pass, and turns enough for the teacher's 2 x 2 searches and its answer.
PRESETS: dict[str, dict[str, Any]] = {
    "cpu": dict(model="runs/smollm2-135m-instruct", micro_batch=1, gradient_checkpointing=True, bf16=False),
    "smoke": dict(bf16=False),
}
ENV_KW: dict[str, Any] = {"max_turns": 6}

METHODS = ("grpo", "rft", "continue_sft")


def load_example() -> Any:
    """``examples/grpo_smollm2.py`` as a module."""
    spec = importlib.util.spec_from_file_location("grpo_smollm2_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def redundant(stats: dict[str, Any]) -> float:
    return stats["redundant_searches_per_episode"]


def summary(res: dict[str, Any], example: Any) -> dict[str, Any]:
    """Per method: redundant searches against the SFT's, and EM against it question by question."""
    out: dict[str, Any] = {}
    if "sft" not in res:
        return out
    base = redundant(res["sft"])
    for m in METHODS:
        if m not in res:
            continue
        pair = example.paired(res["sft_right"], res[f"{m}_right"])
        drop = (base - redundant(res[m])) / base if base else None
        out[m] = {
            "redundant_sft": base,
            "redundant": redundant(res[m]),
            "redundant_drop": drop,
            "em_sft": res["em_sft"],
            "em": res[f"em_{m}"],
            **pair,
            # The goal: at least half the repeats gone, and EM not lower (no significant loss).
            "goal_met": drop is not None
            and drop >= 0.5
            and not (pair["lost"] > pair["gained"] and pair["p_value"] < 0.05),
        }
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    p.add_argument("--model", default=None, help="A transformers folder (default: the preset's).")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    p.add_argument("--out", default=None, help="Run folder (default: runs/habit_fix/<preset>_seed<seed>).")
    p.add_argument("--json", required=True, help="The results file (read back to resume).")
    ns = p.parse_args(argv)
    example = load_example()
    out = Path(ns.out or f"runs/habit_fix/{ns.preset}_seed{ns.seed}")
    env_kw = {**example.make_args(ns.preset, {}).env_kw, **ENV_KW}
    sets = {**PRESETS[ns.preset], **HABIT, "env_kw": env_kw, "seed": ns.seed, "out": str(out)}
    if ns.model:
        sets["model"] = ns.model
    base = example.make_args(ns.preset, sets)
    path = Path(ns.json)
    res: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if res and res.get("args", {}).get("seed") != ns.seed:
        raise SystemExit(f"{path} holds a run of seed {res['args'].get('seed')}, not {ns.seed}")
    res.setdefault("phases", {})

    def save() -> None:
        res["args"] = asdict(base)
        res["summary"] = summary(res, example)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(res, indent=1, default=str))
        tmp.replace(path)

    def phase(name: str, a: Any) -> None:
        t0, c0 = time.perf_counter(), time.process_time()
        got = example.run(a)
        res.update({k: v for k, v in got.items() if k not in ("train_fields",)})
        res["phases"][name] = {
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
            "threads": int(os.environ["OMP_NUM_THREADS"]),
        }
        save()
        print(f"[habit_fix] {name} done: {json.dumps(res['summary'].get(name, {}))}", flush=True)

    checkpoint = out / "sft" / "checkpoint"
    if "sft" not in res["phases"] and (checkpoint / "sft_budget.json").exists():
        # SFT trained before the run stopped, its evaluation unfinished: evaluate the checkpoint.
        res["sft_budget"] = json.loads((checkpoint / "sft_budget.json").read_text())
        phase("sft", replace(base, model=str(checkpoint), sft_steps=0, methods=()))
    elif "sft" not in res["phases"]:
        phase("sft", replace(base, methods=()))
    for m in ns.methods:
        if m not in res["phases"]:
            after_sft = dict(sft_steps=0, skip_draws=base.sft_steps * base.sft_batch, eval_start=False)
            phase(m, replace(base, model=str(checkpoint), methods=(m,), **after_sft))
    save()
    return res


if __name__ == "__main__":
    main()
