"""Greedy held-out re-evaluation of a run's checkpoints on many questions, each paired with its SFT.

A run of ``examples/grpo_smollm2.py`` or ``benchmarks/habit_fix.py`` evaluates each method on its
``n_eval`` first held-out questions (100 in the ``cpu`` presets): too few to tell a gain of a few
points from chance. This script reads such a run's results file (``--run``: its settings, its
run folder and the methods it finished), finds each method's final checkpoint in the run folder,
and evaluates it greedily on ``--n-eval`` held-out questions (500 by default), batched
(:class:`~hopgym.agents.rollout.RolloutCollector`, ``--batch-size`` episodes a pass: 32, where
64 took 11 GB of memory for SmolLM2 at 1,536 tokens a trajectory). Then
each method against the SFT, question by question: gained, lost and the exact McNemar p, and
whether a difference holds at p < 0.05.

Checkpoints (in the run's ``out`` folder; ``--checkpoint NAME=PATH`` names others):

- ``sft``: ``sft/checkpoint`` (or the one the results file names: ``sft_checkpoint``);
- ``grpo``, ``continue_sft``: the newest TRL ``checkpoint-N`` of ``grpo/``, ``continue_sft/``
  (N must be the phase's last step, as its results record);
- ``rft``: the SFT checkpoint with the weights of RFT's newest ``rft/round-N`` (RFT's
  ``save_rounds``; N must be its last round).

More questions: the synthetic world's test split holds about 210-230 two-hop questions at its
default 1,000 questions, so the evaluation's world has ``--n-questions`` (2,500: 555 test
questions for ``hopgym/Synthetic-v1``, 550 for ``hopgym/SyntheticRouting-v1``). The world's
corpus does not depend on the number of questions, and a bigger world's questions begin with the
default one's, so the run's own held-out questions are the first ones here (``first_n_agree``
counts how many of them each checkpoint answers as the run's evaluation did).

Questions are evaluated in chunks of ``--chunk``; the results file is written after every chunk,
and the same command resumes at the first chunk it lacks. Two commands can evaluate into one
file at once, e.g. one a core: each checkpoint is evaluated by one command at a time (a lock per
checkpoint, ``hopgym._atomic.sole_writer``), a command leaves a checkpoint another one holds to
it and goes on to the next, and each save merges its own checkpoint's rows into the file as it
is then, under a short lock. The file records the weights each checkpoint's questions came from
(a sha256, :func:`fingerprint`, and the question they started at). Weights it has no record of
(a run folder made again after its checkpoints were lost, on a CPU whose float arithmetic
differs in the last bits; or a file from before the fingerprints) go on only if they answer the
file's first chunk again exactly as its episodes say (every outcome: EM, F1, reward and its
terms, searches, steps, tokens); otherwise they are refused. A row's figures thus come from one
checkpoint, or from weights shown to act alike on its first chunk. ``--only NAME ...`` evaluates
some of the run's checkpoints (those that exist; the SFT, which the others are paired with, is
always checked)::

    OMP_NUM_THREADS=1 nohup python benchmarks/paired_eval.py \\
        --run benchmarks/results/habit_fix_searches_seed0.json \\
        --json benchmarks/results/habit_fix_searches_seed0_eval500.json > /tmp/eval500.log 2>&1 &
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from habit_fix import load_example  # noqa: E402

#: What the results file keeps of each evaluated episode (enough for ``summarize``).
RECORD = ("em", "f1", "reward", "searches", "invalid", "steps", "right_source_searches", "reward_terms")


def record(t: Any) -> dict[str, Any]:
    """An episode's outcome, small enough to keep per question."""
    return {
        "q": t.question_id,
        **{k: getattr(t, k) for k in RECORD},
        "answered": t.answer is not None,
        "model_tokens": sum(t.mask),
        "completion_tokens": len(t.completion_ids),
    }


def summary_of(records: list[dict[str, Any]], costs: dict[str, Any], example: Any) -> dict[str, Any]:
    """``summarize``'s means (and the cost counts) over kept episode records."""
    from hopgym.agents.rollout import Trajectory, summarize

    trajs = [
        Trajectory(
            r["q"],
            [],
            completion_ids=[0] * r["completion_tokens"],
            mask=[1] * r["model_tokens"],
            answer="" if r["answered"] else None,
            **{k: r[k] for k in RECORD},
        )
        for r in records
    ]
    stats = summarize(trajs)
    return {**stats, **example.cost_counts(stats, costs)}


def checkpoints(run: dict[str, Any], only: Collection[str] | None = None) -> dict[str, dict[str, Any]]:
    """Each finished method's final checkpoint in the run's folder: ``{"model": folder}`` and, for
    RFT, ``"weights"`` (its last round's ``model.pt``); with ``only``, the SFT and those methods."""
    from hopgym.agents.rft import round_to_resume
    from hopgym.agents.sft import checkpoint_to_resume

    out = Path(run["args"]["out"])
    # A habit-fix run names its SFT checkpoint (another habit's run may have trained it); a run
    # from another run's SFT checkpoint (sft_steps=0) started from its --model.
    if "sft_checkpoint" in run:
        sft = Path(run["sft_checkpoint"])
    else:
        sft = out / "sft" / "checkpoint" if run["args"]["sft_steps"] else Path(run["args"]["model"])
    found: dict[str, dict[str, Any]] = {"sft": {"model": str(sft)}}
    for name in ("grpo", "continue_sft"):
        if f"em_{name}" not in run or (only is not None and name not in only):
            continue
        ckpt = checkpoint_to_resume("last", out / name)
        steps = run[f"{name}_budget"]["steps"]
        got = json.loads((ckpt / "trainer_state.json").read_text())["global_step"] if ckpt else None
        if got != steps:
            raise SystemExit(f"{out / name}: no checkpoint of step {steps}, the run's last (newest: {ckpt})")
        found[name] = {"model": str(ckpt)}
    if "em_rft" in run and (only is None or "rft" in only):
        rnd = round_to_resume("last", out / "rft")
        rounds = run["rft_budget"]["rounds"]
        if rnd is None or rnd.name != f"round-{rounds}":
            raise SystemExit(
                f"{out / 'rft'}: no saved round {rounds}, RFT's last (newest: {rnd}); "
                "RFT saves its rounds with rft.save_rounds=True"
            )
        found["rft"] = {"model": str(sft), "weights": str(rnd / "model.pt")}
    return found


def named_checkpoint(item: str, sft: str) -> tuple[str, dict[str, Any]]:
    """``NAME=PATH`` of ``--checkpoint``: a transformers folder, or an RFT ``round-N`` folder (the
    weights over the SFT checkpoint ``sft``)."""
    name, sep, path = item.partition("=")
    if not sep or not name:
        raise SystemExit(f"--checkpoint expects NAME=PATH, got {item!r}")
    if (Path(path) / "model.pt").is_file():
        return name, {"model": sft, "weights": str(Path(path) / "model.pt")}
    if not (Path(path) / "config.json").is_file():
        raise SystemExit(f"--checkpoint {item}: neither a transformers folder nor an RFT round")
    return name, {"model": path}


def load(spec: dict[str, Any], env: Any, args: Any) -> tuple[Any, Any]:
    """A checkpoint's model (fp32, for generation) and tokenizer."""
    import torch

    from hopgym.cli.train_jobs import load_policy

    model, tok = load_policy(spec["model"], env, args.tiny, args.seed)
    if "weights" in spec:
        state = torch.load(spec["weights"], map_location="cpu")
        if any(k.startswith("base_model.model.") for k in state):
            raise SystemExit(f"{spec['weights']}: a LoRA RFT round; re-evaluation takes full weights only")
        model.load_state_dict(state)
    model.train(False)
    return model, tok


def rss_mib() -> int:
    """This process's resident memory now, in MiB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 2**20


def release_memory() -> tuple[int, int]:
    """Return freed heap to the system between chunks (the C allocator keeps freed KV caches'
    pages otherwise, and a long evaluation grew to 12 GB): RSS before and after, in MiB."""
    import ctypes
    import gc

    before = rss_mib()
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass
    return before, rss_mib()


def fingerprint(model: Any) -> str:
    """A sha256 of a model's weights (every tensor of its state dict, in order, with its name)."""
    import torch

    h = hashlib.sha256()
    for key, tensor in model.state_dict().items():
        h.update(key.encode())
        h.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="The run's results file (habit_fix or grpo_smollm2).")
    p.add_argument("--json", required=True, help="The results file (read back to resume).")
    p.add_argument("--n-eval", type=int, default=500, help="Held-out questions (the split's first N).")
    p.add_argument(
        "--n-questions",
        type=int,
        default=2500,
        help="The world's questions (train and test): enough for --n-eval test questions.",
    )
    p.add_argument("--chunk", type=int, default=100, help="Questions evaluated between saves.")
    p.add_argument(
        "--batch-size",
        type=int,
        default=32,
        help="Episodes sampled in one batch (memory grows with it: their KV caches).",
    )
    p.add_argument(
        "--only",
        nargs="+",
        default=None,
        metavar="NAME",
        help="Evaluate these of the run's checkpoints only (grpo, rft, continue_sft; the SFT always).",
    )
    p.add_argument(
        "--checkpoint",
        nargs="*",
        default=[],
        metavar="NAME=PATH",
        help="Evaluate PATH (a transformers folder, or an RFT round-N folder over the run's SFT) as "
        "NAME, beside the run's own checkpoints.",
    )
    ns = p.parse_args(argv)
    run = json.loads(Path(ns.run).read_text())
    specs = checkpoints(run, ns.only)
    specs.update(named_checkpoint(item, specs["sft"]["model"]) for item in ns.checkpoint)
    return evaluate(
        run,
        specs,
        Path(ns.json),
        ns.n_eval,
        ns.n_questions,
        ns.chunk,
        source=ns.run,
        batch_size=ns.batch_size,
    )


def run_settings(run: dict[str, Any], example: Any, **env_kw: Any) -> tuple[Any, Callable[[], Any]]:
    """A run's ``Args`` (from its results file, ``env_kw`` added to its env keywords) and a
    factory of its held-out env under the run's reward and cost terms."""
    import gymnasium as gym

    import hopgym  # noqa: F401

    known = {f.name for f in fields(example.Args)}
    args = example.Args(**{k: v for k, v in run["args"].items() if k in known})
    args = replace(args, env_kw={**args.env_kw, **env_kw})

    def env_fn() -> Any:
        return example.with_costs(
            gym.make(args.env, split="test", reward="default", **args.env_kw), args.costs
        )

    return args, env_fn


def evaluate(
    run: dict[str, Any],
    specs: dict[str, dict[str, Any]],
    path: Path,
    n_eval: int = 500,
    n_questions: int = 2500,
    chunk: int = 100,
    source: str = "",
    batch_size: int = 32,
) -> dict[str, Any]:
    """Evaluate the checkpoints ``specs`` (name -> :func:`checkpoints`' entries; ``"sft"`` is the
    one the others are paired with) with the settings of the run ``run`` (a results file's
    contents, ``source`` its path), into the results file ``path`` (resumed where it stops).

    Other commands may evaluate into the same file at once: each checkpoint is evaluated by one
    command at a time (a lock per checkpoint, :func:`checkpoint_lock`; one held by another
    command is left to it), and each save merges this command's checkpoint into the file as it
    is then (:func:`merge_save`)."""
    if n_eval < 1 or chunk < 1:
        raise SystemExit("--n-eval and --chunk must be >= 1")
    from hopgym._atomic import check_writable

    check_writable(path)
    return _evaluate(run, specs, path, n_eval, n_questions, chunk, source, batch_size)


def checkpoint_lock(path: Path, name: str) -> Path:
    """The path whose :func:`~hopgym._atomic.sole_writer` lock one command holds while it
    evaluates checkpoint ``name`` into the results file ``path`` (the lock file is
    ``.<file>.<name>.lock`` beside it)."""
    return path.with_name(f"{path.name}.{name}")


def merge_save(
    path: Path, res: dict[str, Any], names: Collection[str], summarize: Callable[[dict], Any]
) -> None:
    """Save ``res`` into ``path`` as another command may have left it: under a short lock, the
    file is read again and takes from ``res`` its settings and the rows of the checkpoints
    ``names`` (those this command evaluates: their episodes, seconds, weights and memory) and
    keeps every other checkpoint's as the file has them, in the order of the checkpoints; the
    summary is made again over all of them (``summarize``), and ``res`` becomes the merged file."""
    from hopgym._atomic import sole_writer, write_json

    with sole_writer(path, wait=True):
        cur: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        for key in ("settings", "args", "habit", "run_test_questions"):
            cur[key] = res[key]
        for key in ("checkpoints", "run_right"):
            cur[key] = {**cur.get(key, {}), **res.get(key, {})}
        order = {n: i for i, n in enumerate(cur["checkpoints"])}  # rows in the checkpoints' order
        for key in _PER_CHECKPOINT:
            rows = {**cur.get(key, {}), **{n: res[key][n] for n in names if n in res.get(key, {})}}
            cur[key] = {n: rows[n] for n in sorted(rows, key=lambda n: order.get(n, len(order)))}
        cur["summary"] = summarize(cur)
        write_json(path, cur, indent=1)
    res.clear()
    res.update(cur)


#: A results file's sections with one entry per checkpoint, written by the command evaluating it.
_PER_CHECKPOINT = ("episodes", "seconds", "fingerprints", "rss_mib")


def _evaluate(
    run: dict[str, Any],
    specs: dict[str, dict[str, Any]],
    path: Path,
    n_eval: int,
    n_questions: int,
    chunk: int,
    source: str,
    batch_size: int,
) -> dict[str, Any]:

    import hopgym  # noqa: F401
    from hopgym._atomic import OutputFileHeldError, sole_writer

    example = load_example()
    args, env_fn = run_settings(run, example, n_questions=n_questions)
    env_kw = args.env_kw

    questions = [s.id for s in env_fn().unwrapped.task.samples]
    if len(questions) < n_eval:
        raise SystemExit(
            f"{args.env} holds {len(questions)} test questions at --n-questions {n_questions}, "
            f"fewer than --n-eval {n_eval}: raise --n-questions"
        )
    questions = questions[:n_eval]
    settings = {"run": source, "n_eval": n_eval, "n_questions": n_questions, "env_kw": env_kw}

    def load_file() -> dict[str, Any]:
        res: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        if res and res["settings"] != settings:
            raise SystemExit(f"{path} holds another evaluation: {res['settings']}, not {settings}")
        res.update(settings=settings, args=run["args"], habit=run.get("habit"))
        res["checkpoints"] = {**res.get("checkpoints", {}), **specs}
        for key in _PER_CHECKPOINT:
            res.setdefault(key, {})
        # The questions each checkpoint answered right in its run's own evaluation (the run's
        # first test questions), kept: a file that pairs checkpoints of two runs
        # (``power_habits``' ``grpo_unanswered``) is saved again by each, and only one of them
        # holds each list.
        own = {k.removesuffix("_right"): v for k, v in run.items() if k.endswith("_right")}
        res["run_right"] = {**res.get("run_right", {}), **own}
        res["run_test_questions"] = run["test_questions"]
        return res

    def todo_in(res: dict[str, Any]) -> list[str]:
        # The checkpoints with questions left or weights not yet recorded, and the SFT they are
        # paired with (its weights checked even when its own evaluation is complete).
        todo = [
            n
            for n in specs
            if len(res["episodes"].get(n, [])) < n_eval
            or (res["episodes"].get(n) and n not in res["fingerprints"])
        ]
        if todo and "sft" in specs and "sft" not in todo and res["episodes"].get("sft"):
            todo.insert(0, "sft")
        return todo

    res = load_file()
    mine: list[str] = []  # the checkpoints this command evaluated (its rows in the file)

    def save() -> None:
        merge_save(path, res, mine, lambda r: summarize_all(r, run, example))

    for name in todo_in(res):
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(sole_writer(checkpoint_lock(path, name)))
            except OutputFileHeldError as exc:  # an unwritable lock file is raised, not skipped
                print(
                    f"[paired_eval] {name}: another command is evaluating it "
                    f"(process {exc.holder}, {exc.lock}); left to it",
                    flush=True,
                )
                continue
            res = load_file()  # as the other commands have left it
            if name not in todo_in(res):
                continue
            mine.append(name)
            _evaluate_one(
                name, specs[name], res, path, questions, chunk, source, env_fn, args, batch_size, save
            )
    save()
    for name, row in res["summary"].items():
        print(f"[paired_eval] {name}: {json.dumps(row)}")
    return res


def _evaluate_one(
    name: str,
    spec: dict[str, Any],
    res: dict[str, Any],
    path: Path,
    questions: list[str],
    chunk: int,
    source: str,
    env_fn: Callable[[], Any],
    args: Any,
    batch_size: int,
    save: Callable[[], None],
) -> None:
    """Checkpoint ``name``'s questions not yet in ``res``, a chunk at a time, each chunk saved."""
    from hopgym.agents.rollout import RolloutCollector, RolloutConfig

    n_eval = len(questions)
    done = res["episodes"].setdefault(name, [])
    if not (Path(spec["model"]) / "config.json").is_file():
        raise SystemExit(
            f"{spec['model']}: no checkpoint there ({name} of {source or 'the run'}); make it "
            "again with the run's command, then evaluate"
        )
    model, tok = load(spec, env_fn(), args)
    sha = fingerprint(model)
    weights = res["fingerprints"].setdefault(name, [])
    cfg = RolloutConfig(
        temperature=0.0,
        max_new_tokens=args.max_new_tokens,
        max_completion_tokens=args.max_length,
        batch_size=batch_size,
    )
    col = RolloutCollector(model, tok, env_fn, cfg)
    if done and not any(w["sha256"] == sha for w in weights):
        # Weights the file has no record of (made again, or a file from before fingerprints):
        # they must answer the file's first chunk exactly as its episodes say.
        n = min(chunk, len(done))
        again = [record(t) for t in col.collect(questions[:n], 1, seed=0)]
        differ = [b["q"] for a, b in zip(again, done[:n], strict=True) if a != b]
        if differ:
            raise SystemExit(
                f"{path}: {spec} (sha256 {sha[:16]}...) are not the weights its {len(done)} "
                f"questions of {name} came from, nor answer as they did: evaluated again, "
                f"{len(differ)} of the first {n} differ (the first: {differ[0]}); evaluate "
                "them into another file"
            )
        print(f"[paired_eval] {name}: other weights, the first {n} questions answered as before", flush=True)
        weights.append({"sha256": sha, "from_question": len(done), "same_outcomes_on": n})
        release_memory()
    elif not weights:
        weights.append({"sha256": sha, "from_question": 0})
    save()
    done = res["episodes"][name]  # the save made ``res`` the merged file, with this same list
    while len(done) < n_eval:  # to the end of the chunk it is in (one cut short goes on)
        qs = questions[len(done) : (len(done) // chunk + 1) * chunk]
        c0 = time.process_time()
        done.extend(record(t) for t in col.collect(qs, 1, seed=0))
        res["seconds"][name] = res["seconds"].get(name, 0.0) + time.process_time() - c0
        rss = release_memory()
        res["rss_mib"].setdefault(name, []).append(rss)
        save()
        em = sum(r["em"] for r in done) / len(done)
        print(
            f"[paired_eval] {name}: {len(done)}/{n_eval} questions, EM {em:.3f}, "
            f"RSS {rss[0]} -> {rss[1]} MiB (freed to the system)",
            flush=True,
        )
    del model, tok, col


def summarize_all(res: dict[str, Any], run: dict[str, Any], example: Any) -> dict[str, Any]:
    """Per checkpoint: its means, EM, and (against the SFT, on the questions both answered) gained,
    lost, McNemar p and whether the difference holds at p < 0.05; and how many of the run's own
    held-out questions it answered as the run's evaluation did."""
    out: dict[str, Any] = {}
    sft = res["episodes"].get("sft", [])
    for name, eps in res["episodes"].items():
        if not eps:
            continue
        right = [r["q"] for r in eps if r["em"] >= 1.0]
        row = {"questions": len(eps), **summary_of(eps, run["args"]["costs"], example)}
        if name in res.get("run_right", {}):  # the run's own evaluation: its first test questions
            first = [r["q"] for r in eps[: res["run_test_questions"]]]
            before = set(res["run_right"][name])
            row["first_n"] = len(first)
            row["first_n_agree"] = sum((q in before) == (q in right) for q in first)
        if name != "sft" and sft:
            n = min(len(sft), len(eps))
            pair = example.paired(
                [r["q"] for r in sft[:n] if r["em"] >= 1.0], [r["q"] for r in eps[:n] if r["em"] >= 1.0]
            )
            row.update(vs_sft_questions=n, **pair, holds=pair["p_value"] < 0.05)
        out[name] = row
    return out


if __name__ == "__main__":
    main()
