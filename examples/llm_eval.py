"""Evaluate a language model as a hopgym agent, with batched acting over several envs.

    # a local transformers model (id, directory, or .gguf file with the gguf package installed)
    python examples/llm_eval.py --env hopgym/Synthetic-v1 --model Qwen/Qwen2.5-0.5B-Instruct \\
        --episodes 100 --num-envs 16
    # an OpenAI-compatible server (vllm serve / SGLang / llama-server)
    python examples/llm_eval.py --env hopgym/Tiny-v1 --backend openai \\
        --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-0.5B-Instruct --num-envs 8
    # the closed-book baseline: the bare question, answered at once
    python examples/llm_eval.py --env hopgym/Synthetic-v1 --model M --closed-book

``--num-envs`` envs run side by side (``hopgym.agents.evaluate(..., num_envs=N)``); each turn the
agent generates for all unfinished episodes with one batched call (``LLMAgent.act_batch``), and an
env that finishes takes the next question. Questions are a seeded permutation of the task's, the
same for any ``--num-envs``. Prints EM, F1, answered, invalid and truncated turns, searches per
episode and speed; ``--json PATH`` writes them, ``--trajectories PATH.jsonl`` every episode, in
the format of ``hopgym eval --trajectories`` (``hopgym view PATH.jsonl`` shows it);
``--time-limit S`` stops after S seconds and keeps what finished.
"""

# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[train]"]
# ///

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

import hopgym  # noqa: F401  (registers the ids)
from hopgym._atomic import check_writable, write_json
from hopgym.agents.evaluation import evaluate
from hopgym.agents.llm import make_llm_agent


def _kw(items: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--kw takes key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default="hopgym/Synthetic-v1", help="env id")
    p.add_argument("--kw", nargs="*", default=[], help="env arguments as key=value (JSON values)")
    p.add_argument("--model", required=True, help="model id/path, or the served model name")
    p.add_argument("--backend", default="transformers", choices=["transformers", "vllm", "openai"])
    p.add_argument("--base-url", default=None, help="API root for --backend openai")
    p.add_argument("--protocol", default="tags", choices=["tags", "r3"])
    p.add_argument("--mode", default="auto", choices=["auto", "chat", "continuation"])
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--num-envs", type=int, default=8, help="episodes acted on per batch")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument(
        "--closed-book",
        action="store_true",
        help="the closed-book baseline: answer at once, without searching",
    )
    p.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the metrics here")
    p.add_argument("--trajectories", default=None, help="write every episode here (.jsonl)")
    args = p.parse_args(argv)
    if args.json:
        check_writable(args.json)  # before the episodes, not after them
    kwargs = {"protocol": args.protocol, **_kw(args.kw)}
    env = gym.make(args.env, **kwargs)
    agent = make_llm_agent(
        args.model,
        backend=args.backend,
        protocol=args.protocol,
        base_url=args.base_url,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        mode=args.mode,
        closed_book=args.closed_book,
    )
    metrics = evaluate(
        env,
        agent,
        episodes=args.episodes,
        seed=args.seed,
        trajectories=args.trajectories,
        time_limit=args.time_limit,
        num_envs=max(1, min(args.num_envs, args.episodes)),
    )
    for key in (
        "em",
        "f1",
        "support_recall",
        "answered",
        "invalid_rate",
        "truncated_rate",
        "avg_steps",
        "avg_searches",
        "episodes",
        "stopped",
        "episodes_per_s",
    ):
        value = metrics[key]
        print(f"{key:>16}: {value:.3f}" if isinstance(value, float) else f"{key:>16}: {value}")
    if args.json:
        write_json(args.json, metrics)
    return metrics


if __name__ == "__main__":
    main()
