"""A turn's prefill in one pass padded to its longest row, against passes by the rows' lengths.

Each model turn after the first prefills the env's observation of every episode in flight, and
the observations of one turn differ by hundreds of tokens (documents of different lengths), so a
single pass padded to the longest feeds many padding tokens through the model. The collector
splits the rows into up to :data:`~hopgym.agents.rollout.PREFILL_BUCKETS` passes of similar
lengths (:func:`~hopgym.agents.rollout._prefill_buckets`). This script runs the same greedy
evaluation both ways, a habit-fix run's SFT checkpoint on its held-out questions (the evaluation
``benchmarks/paired_eval.py`` makes), and prints per side the CPU seconds, the prefill tokens
fed (padding included) and the real ones, the ratios, and whether both sides sampled the same
tokens::

    OMP_NUM_THREADS=1 python benchmarks/prefill_buckets.py \\
        --run benchmarks/results/habit_fix_searches_seed0.json --questions 32 \\
        --json benchmarks/results/prefill_buckets_smollm2.json

Each side runs in a process of its own, so that its peak RSS is its own. CPU seconds of that
process (``time.process_time``): other jobs on the machine count less than in wall seconds,
though they still share its caches. The sides run in turn, ``--repeats`` times each, and the
faster of each side's runs is kept.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))


def side(run: dict[str, Any], questions: int, buckets: int) -> dict[str, Any]:
    """One greedy evaluation with ``PREFILL_BUCKETS = buckets``: its CPU seconds, the tokens
    its prefills fed and the real ones, and the sampled ids."""
    from paired_eval import checkpoints, load, load_example, run_settings

    import hopgym.agents.rollout as rollout

    args, env_fn = run_settings(run, load_example())
    model, tok = load(checkpoints(run)["sft"], env_fn(), args)
    fed = {"padded": 0, "real": 0, "passes": 0}

    def count(module: Any, a: Any, kwargs: dict[str, Any]) -> None:
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        if ids.shape[1] > 1:  # a prefill (a decoding step feeds one token a row)
            fed["padded"] += ids.numel()
            fed["real"] += int(mask[:, -ids.shape[1] :].sum())
            fed["passes"] += 1

    handle = model.register_forward_pre_hook(count, with_kwargs=True)
    old = rollout.PREFILL_BUCKETS
    rollout.PREFILL_BUCKETS = buckets
    try:
        cfg = rollout.RolloutConfig(
            temperature=0.0, max_new_tokens=args.max_new_tokens, max_completion_tokens=args.max_length
        )
        col = rollout.RolloutCollector(model, tok, env_fn, cfg)
        qs = [s.id for s in env_fn().unwrapped.task.samples][:questions]
        c0 = time.process_time()
        trajs = col.collect(qs, 1, seed=0)
        cpu = time.process_time() - c0
        col.close()
    finally:
        rollout.PREFILL_BUCKETS = old
        handle.remove()
    return {
        "buckets": buckets,
        "cpu_s": round(cpu, 2),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        **fed,
        "em": sum(t.em for t in trajs) / len(trajs),
        "ids": [t.completion_ids for t in trajs],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from paired_eval import checkpoints

    import hopgym.agents.rollout as rollout

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", required=True, help="A habit_fix results file (its SFT checkpoint and settings).")
    p.add_argument("--questions", type=int, default=32, help="Held-out questions, one batch.")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", default=None, help="Write the results here.")
    ns = p.parse_args(argv)
    from hopgym._atomic import check_writable, write_json

    out = check_writable(ns.json) if ns.json else None
    run = json.loads(Path(ns.run).read_text())
    best: dict[int, dict[str, Any]] = {}
    for _ in range(ns.repeats):
        for buckets in (1, rollout.PREFILL_BUCKETS):
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                got = pool.apply(side, (run, ns.questions, buckets))
            if buckets not in best or got["cpu_s"] < best[buckets]["cpu_s"]:
                best[buckets] = got
            print(f"[prefill_buckets] {buckets} pass(es) at most: {got['cpu_s']} CPU s", flush=True)
    one, split = best[1], best[rollout.PREFILL_BUCKETS]
    res = {
        "run": ns.run,
        "model": checkpoints(run)["sft"]["model"],
        "questions": ns.questions,
        "threads": int(os.environ["OMP_NUM_THREADS"]),
        "sides": {
            name: {k: v for k, v in s.items() if k != "ids"}
            for name, s in (("one_pass", one), ("buckets", split))
        },
        "same_tokens": one["ids"] == split["ids"],
        "padded_tokens_ratio": round(split["padded"] / one["padded"], 3),
        "cpu_speedup": round(one["cpu_s"] / split["cpu_s"], 3),
    }
    print(
        f"[prefill_buckets] prefill tokens fed {one['padded']} -> {split['padded']} (real {one['real']}); "
        f"CPU s {one['cpu_s']} -> {split['cpu_s']} ({res['cpu_speedup']}x); "
        f"same tokens sampled: {res['same_tokens']}"
    )
    if out is not None:
        write_json(out, res, indent=1)
    return res


if __name__ == "__main__":
    main()
