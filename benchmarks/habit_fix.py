"""Fix a flawed teacher's habit by reward, on SmolLM2-135M-Instruct (or a tiny model).

``--habit`` (:data:`HABITS`) picks the habit and the reward that prices it:

- ``searches`` (over-searching): an :class:`~hopgym.agents.teachers.ImperfectTeacher` with
  ``extra_searches=1`` (every search repeated) on ``hopgym/Synthetic-v1``; the reward adds
  :class:`~hopgym.rewards.cost_reward.RedundancyReward` (a repeated query costs) and
  :class:`~hopgym.rewards.cost_reward.SearchCostReward` (every search costs). Goal: redundant
  searches per episode down by at least half.
- ``routing``: a teacher that routes at random (``random_route=1.0``: before its first search it
  picks the local or the web source by a coin, whatever the question needs) on
  ``hopgym/SyntheticRouting-v1``; the reward adds ``SearchCostReward`` at each source's own cost
  (a web search costs 1, a local one 0). Goal: routing cost per episode (web searches) down by
  at least 30% and the right-source rate up (searches made where the oracle would search next:
  :attr:`~hopgym.agents.rollout.Trajectory.right_source_searches`).
- ``searches_unanswered``: over-searching again, GRPO only, from the ``searches`` run's SFT
  checkpoint (same preset and seed; that run must have trained it), with one more term: an
  episode that ends without an answer costs 1 (the outcome preset scores it 0, as a wrong answer,
  and one GRPO run learned to search once and never answer).
- ``routing_unanswered``: the same for routing, from the ``routing`` run's SFT checkpoint (one
  routing GRPO learned to search the free local source and never answer).

1. **SFT** on the teacher's episodes: the student learns the habit.
2. From that checkpoint, each of ``--methods`` on the same budget of sampled episodes:

   - ``grpo``: GRPO with the outcome reward plus the habit's cost terms;
   - ``rft``: rejection-sampling fine-tuning with the same reward (of each question's right
     episodes, the highest-reward ones: ``keep="best"``);
   - ``continue_sft``: more SFT on the same flawed teacher, as many episodes as GRPO sampled.

3. After each: greedy held-out EM and the habit's measures on the first ``n_eval`` test
   questions, and each method against the SFT question by question (gained, lost, exact McNemar
   p). Every goal (issue 40) also asks for held-out EM no lower: no significant loss against the
   SFT.

Each phase is a run of ``examples/grpo_smollm2.py`` (its :func:`run`, with ``teacher`` and
``costs`` set): the SFT one saves ``<out>/sft/checkpoint``; each method then starts from it. The
results file is written after every phase, and a phase whose results it already has is skipped,
so the same command resumes a stopped run at its first unfinished phase (an SFT that finished
training only evaluates its saved checkpoint). SFT, GRPO and continue-SFT save a TRL checkpoint
after every step, and RFT after every round; a phase stopped midway resumes from the newest
one (TRL's ``resume_from_checkpoint="last"``, which hopgym's trainers act on). One command at a
time writes a results file (``hopgym._atomic.sole_writer``): a second on the same ``--json`` is
refused, naming the first one's process. Methods of one run may still be made side by side,
each into its own ``--json``::

    OMP_NUM_THREADS=1 nohup python benchmarks/habit_fix.py --preset cpu --seed 0 \\
        --json benchmarks/results/habit_fix_searches_seed0.json > /tmp/habit_fix_seed0.log 2>&1 &

The routing experiment, the same way (its run folder ``runs/habit_fix/routing_cpu_seed0``)::

    OMP_NUM_THREADS=1 nohup python benchmarks/habit_fix.py --habit routing --preset cpu --seed 0 \\
        --json benchmarks/results/habit_fix_routing_seed0.json > /tmp/habit_fix_routing0.log 2>&1 &

``--preset smoke`` runs every phase in seconds on a small model folder (``--model DIR``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from hopgym._atomic import check_writable, sole_writer, write_json  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_smollm2.py"

#: TRL checkpoints of a phase's every step (the newest only), and resuming from the newest one.
CHECKPOINTS: dict[str, Any] = {
    "save_strategy": "steps",
    "save_steps": 1,
    "save_total_limit": 1,
    "resume_from_checkpoint": "last",
}


#: The methods that start from the SFT checkpoint.
METHODS = ("grpo", "rft", "continue_sft")


@dataclass(frozen=True)
class Habit:
    """A flawed teacher's habit, the reward that prices it, and the goal of fixing it."""

    #: Settings of examples/grpo_smollm2.py's ``Args`` (over the preset's; ``env_kw`` entries
    #: are added to the preset's env keywords).
    settings: dict[str, Any]
    #: The evaluation's measure of the habit (lower is better), its name in the summary, and in words.
    measure: str
    short: str
    label: str
    #: The goal: the measure down by at least this share of the SFT's.
    min_drop: float
    #: A measure that must also rise from the SFT's (its evaluation key, its summary name, in words).
    rises: tuple[str, str, str] | None = None
    #: The run folder's name before ``<preset>_seed<seed>``.
    folder: str = ""
    #: Another habit whose run (same preset and seed, its default folder) trained this one's SFT:
    #: this run only evaluates that checkpoint under its own reward, then trains from it.
    sft_of: str | None = None
    #: The methods a run trains after the SFT (``--methods``' default).
    methods: tuple[str, ...] = METHODS

    @property
    def goal(self) -> str:
        """The goal in words (:func:`summary`'s ``goal_met``)."""
        also = f" and the {self.rises[2]} up" if self.rises else ""
        return (
            f"{self.label} down by at least {self.min_drop:.0%} from the SFT's{also}, at held-out "
            "EM no lower (no significant loss: not more questions lost than gained at McNemar p < 0.05)"
        )


#: The settings of every habit: the outcome reward under the cost terms, and the checkpoints.
#: RFT keeps of each question's right episodes the highest-return ones (the cheapest: the same
#: reward as GRPO's decides, not correctness alone), saves its state after every round and
#: resumes from the newest.
COMMON: dict[str, Any] = {
    "reward": "default",
    "trl": CHECKPOINTS,
    "sft_trl": CHECKPOINTS,
    "rft": {"keep": "best", "save_rounds": True, "resume_from_checkpoint": "last"},
}


#: The over-searching habit's cost terms. The teacher's repeat is the query with "again"
#: added: 0.6 of the words in common counts.
SEARCH_COSTS: dict[str, dict[str, Any]] = {
    "redundancy": {"query_penalty": 0.2, "query_similarity": 0.6},
    "search_cost": {"per_search": 0.02},
}

#: The habits (both presets).
HABITS: dict[str, Habit] = {
    "searches": Habit(
        settings={
            "teacher": {"extra_searches": 1},
            "costs": SEARCH_COSTS,
            # Two documents a search: the teacher's SFT examples in SmolLM2's tokens end by token
            # 1259 (median 954; 48 train questions), against 1672 (median 1282) at the default 3,
            # where a 1024-token SFT cut every example before its answer (held-out EM 0.000).
            "env_kw": {"top_k": 2},
            "max_length": 1536,
        },
        measure="redundant_searches_per_episode",
        short="redundant",
        label="redundant searches / episode",
        min_drop=0.5,
    ),
    "routing": Habit(
        settings={
            "env": "hopgym/SyntheticRouting-v1",
            # 80% of the documents local (the world's default is 50%, where a coin-flip router's
            # web searches cost as much as the oracle's: 0.94 against 1.00 per episode on 300
            # train questions, so no saving is there to find); here the oracle's 0.44 against
            # the coin's 0.90, and the coin's EM 0.83 (it misses web-only documents).
            "env_kw": {"local_coverage": 0.8},
            "teacher": {"random_route": 1.0},
            # Each source at its own cost (web 1, local 0), at 0.1: five web searches (a
            # 6-turn episode's most) cost half a right answer, so a right answer always pays.
            "costs": {"search_cost": {"weight": 0.1}},
            # The teacher's SFT examples in SmolLM2's tokens: 2% of 96 over 1024 (the longest
            # 1058), cut there by SFT; its episodes after the prompt at most 808.
            "max_length": 1536,
        },
        measure="search_cost_per_episode",
        short="cost",
        label="routing cost / episode (web searches)",
        min_drop=0.3,
        rises=("right_source_rate", "right_source", "right-source rate"),
        folder="routing_",
    ),
}


# Each habit again, from the same SFT, with an episode that ends without an answer priced below
# every answered one: the outcome preset scores no answer 0, as a wrong one, so a policy that
# searches once and never answers pays only that search (over-searching: 0.02, less than the
# SFT's repeats cost; routing: nothing on the local source), and GRPO found that (searches seed
# 1, routing seed 4). At -1, silence costs more than a 6-turn episode's most (5 searches, 4 of
# them repeats: 0.9; 5 web searches: 0.5). RFT keeps right episodes only and continue-SFT
# imitates the teacher, so neither depends on the term: GRPO only.
def _unanswered(of: str) -> Habit:
    """Habit ``of`` with an unanswered episode costing 1 (an ``OutcomeReward`` of weight 0 whose
    ``no_answer`` is -1), GRPO only, from ``of``'s SFT checkpoint."""
    habit = HABITS[of]
    costs = {**habit.settings["costs"], "unanswered": {"value": -1.0}}
    return replace(
        habit,
        settings={**habit.settings, "costs": costs},
        folder=f"{of}_unanswered_",
        sft_of=of,
        methods=("grpo",),
    )


for _of in ("searches", "routing"):
    HABITS[f"{_of}_unanswered"] = _unanswered(_of)

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


def load_example() -> Any:
    """``examples/grpo_smollm2.py`` as a module."""
    spec = importlib.util.spec_from_file_location("grpo_smollm2_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def add_set_option(p: argparse.ArgumentParser, help: str) -> None:
    """``--set KEY=VALUE ...`` on ``p`` (into ``sets``; read with ``hopgym.cli.parse_kwargs``)."""
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", dest="sets", help=help)


def run_folder(habit: Habit, preset: str, seed: int) -> Path:
    """A habit's default run folder."""
    return Path(f"runs/habit_fix/{habit.folder}{preset}_seed{seed}")


def resumes_from(out: Path, phase: str) -> str | None:
    """The saved state that ``phase`` (in the run folder ``out``) goes on from, relative to
    ``out``: its newest TRL checkpoint, RFT's newest round, or the trained SFT checkpoint that
    the SFT phase only evaluates; ``None`` when it starts afresh."""
    from hopgym.agents.rft import round_to_resume
    from hopgym.agents.sft import checkpoint_to_resume

    if phase == "sft" and (out / "sft" / "checkpoint" / "sft_budget.json").exists():
        found: Path | None = out / "sft" / "checkpoint"
    elif phase == "rft":
        found = round_to_resume("last", out / "rft")
    else:
        found = checkpoint_to_resume("last", out / phase)
    return str(found.relative_to(out)) if found else None


def measures(res: dict[str, Any], phase: str, example: Any) -> dict[str, Any]:
    """A phase's evaluation with its cost counts taken again from its reward terms (a results
    file of an earlier version of the example has a wrong ``redundant_searches_per_episode``)."""
    stats = res[phase]
    return {**stats, **example.cost_counts(stats, res["args"]["costs"])}


def summary(res: dict[str, Any], example: Any, habit: Habit) -> dict[str, Any]:
    """Per method: the habit's measure against the SFT's (and the one that must rise), EM against
    the SFT's question by question, and whether the goal is met (``None``: the SFT did not learn
    the habit, its measure is 0, so the goal is undefined)."""
    out: dict[str, Any] = {}
    if "sft" not in res:
        return out
    sft = measures(res, "sft", example)
    base, short = sft[habit.measure], habit.short
    for m in METHODS:
        if m not in res:
            continue
        got = measures(res, m, example)
        pair = example.paired(res["sft_right"], res[f"{m}_right"])
        drop = (base - got[habit.measure]) / base if base else None
        row = {f"{short}_sft": base, short: got[habit.measure], f"{short}_drop": drop}
        if habit.rises is not None:
            key, name, _ = habit.rises
            row.update({f"{name}_sft": sft.get(key), name: got.get(key)})
        out[m] = {
            **row,
            "em_sft": res["em_sft"],
            "em": res[f"em_{m}"],
            **pair,
            "goal_met": goal_met(habit, sft, got, pair),
        }
    return out


def goal_met(habit: Habit, sft: dict[str, Any], got: dict[str, Any], pair: dict[str, Any]) -> bool | None:
    """Whether a method's evaluation ``got`` meets ``habit``'s goal against the SFT's ``sft`` (each
    holding the habit's measures), ``pair`` their EM question by question (``gained``, ``lost``,
    ``p_value``): the measure down by ``min_drop`` of the SFT's (and the other up), EM not lower
    (no significant loss). ``None`` where the SFT has none of the habit (its measure 0): no share
    of it to cut. The run's own evaluation and ``paired_eval``'s on more questions both use this."""
    base = sft[habit.measure]
    if not base:
        return None
    rises = True
    if habit.rises is not None:
        key = habit.rises[0]
        rises = got.get(key) is not None and sft.get(key) is not None and got[key] > sft[key]
    lost = pair["lost"] > pair["gained"] and pair["p_value"] < 0.05
    return (base - got[habit.measure]) / base >= habit.min_drop and rises and not lost


def run_args(
    example: Any,
    habit: str,
    preset: str,
    seed: int,
    out: Path,
    sets: dict[str, Any] | None = None,
    model: str | None = None,
) -> Any:
    """A run's ``Args`` of examples/grpo_smollm2.py: the preset's, the habit's settings over them,
    then ``sets`` (``--set``) and ``model`` (``--model``)."""
    settings = {**COMMON, **HABITS[habit].settings}
    env_kw = {**example.make_args(preset, {}).env_kw, **ENV_KW, **settings.pop("env_kw", {})}
    over = {**PRESETS[preset], **settings, "env_kw": env_kw, "seed": seed, "out": str(out)}
    over.update(sets or {})
    if model:
        over["model"] = model
    return example.make_args(preset, over)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--habit", default="searches", choices=sorted(HABITS), help="The habit to fix.")
    p.add_argument("--preset", default="cpu", choices=sorted(PRESETS))
    p.add_argument("--model", default=None, help="A transformers folder (default: the preset's).")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--methods",
        nargs="*",
        default=None,
        choices=METHODS,
        help="Default: the habit's (Habit.methods); none: the SFT only.",
    )
    p.add_argument(
        "--out",
        default=None,
        help="Run folder (default: runs/habit_fix/<habit folder><preset>_seed<seed>: "
        "<preset>_seed<seed> for the searches habit, routing_<preset>_seed<seed> for routing).",
    )
    p.add_argument("--json", required=True, help="The results file (read back to resume).")
    add_set_option(p, "Override settings of examples/grpo_smollm2.py's Args (over the preset and the habit).")
    ns = p.parse_args(argv)
    from hopgym.cli import parse_kwargs

    example = load_example()
    habit = HABITS[ns.habit]
    out = Path(ns.out or run_folder(habit, ns.preset, ns.seed))
    base = run_args(example, ns.habit, ns.preset, ns.seed, out, parse_kwargs(ns.sets, "--set"), ns.model)
    path = check_writable(ns.json)
    with sole_writer(path):  # another command on the same file would save over this one's rows
        return train(ns, example, habit, out, base, path)


def train(
    ns: argparse.Namespace, example: Any, habit: Habit, out: Path, base: Any, path: Path
) -> dict[str, Any]:
    """The run of :func:`main`'s options into the results file ``path`` (resumed where it stops)."""
    res: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if res and res.get("args", {}).get("seed") != ns.seed:
        raise SystemExit(f"{path} holds a run of seed {res['args'].get('seed')}, not {ns.seed}")
    if res and res.get("habit", "searches") != ns.habit:  # files before --habit: searches
        raise SystemExit(f"{path} holds a run of the {res.get('habit', 'searches')} habit, not {ns.habit}")
    res.setdefault("phases", {})

    checkpoint = out / "sft" / "checkpoint"
    if habit.sft_of is not None:
        checkpoint = run_folder(HABITS[habit.sft_of], ns.preset, ns.seed) / "sft" / "checkpoint"
        if not (checkpoint / "sft_budget.json").exists():
            raise SystemExit(
                f"{checkpoint}: no trained SFT of the {habit.sft_of} habit (seed {ns.seed}), which "
                f"the {ns.habit} habit starts from; run `python benchmarks/habit_fix.py --habit "
                f"{habit.sft_of} --preset {ns.preset} --seed {ns.seed} ...` first"
            )

    def save() -> None:
        res["args"] = asdict(base)
        res["habit"] = ns.habit
        res["sft_checkpoint"] = str(checkpoint)
        res["summary"] = summary(res, example, habit)
        write_json(path, res, indent=1, default=str)

    def phase(name: str, a: Any) -> None:
        start = str(checkpoint) if name == "sft" and habit.sft_of else resumes_from(out, name)
        t0, c0 = time.perf_counter(), time.process_time()
        got = example.run(a)
        res.update({k: v for k, v in got.items() if k not in ("train_fields",)})
        res["phases"][name] = {
            "seconds": time.perf_counter() - t0,
            "cpu_seconds": time.process_time() - c0,
            "threads": int(os.environ["OMP_NUM_THREADS"]),
            # The phase's bf16 autocast or fp32 (bf16=None follows the machine's CPU) and
            # gradient checkpointing: SFT's fields for SFT, RFT's rounds and continue-SFT.
            "train_fields": got["train_fields"]["grpo" if name == "grpo" else "sft"],
            # The checkpoint a stopped phase went on from: its seconds count this process only.
            **({"resumed_from": start} if start else {}),
        }
        save()
        print(f"[habit_fix] {name} done: {json.dumps(res['summary'].get(name, {}))}", flush=True)

    if "sft" not in res["phases"] and (checkpoint / "sft_budget.json").exists():
        # SFT trained before the run stopped, its evaluation unfinished (or another habit's run
        # trained it): evaluate the checkpoint.
        res["sft_budget"] = json.loads((checkpoint / "sft_budget.json").read_text())
        phase("sft", replace(base, model=str(checkpoint), sft_steps=0, methods=()))
    elif "sft" not in res["phases"]:
        phase("sft", replace(base, methods=()))
    for m in habit.methods if ns.methods is None else ns.methods:
        if m not in res["phases"]:
            after_sft = dict(sft_steps=0, skip_draws=base.sft_steps * base.sft_batch, eval_start=False)
            phase(m, replace(base, model=str(checkpoint), methods=(m,), **after_sft))
    save()
    return res


if __name__ == "__main__":
    main()
