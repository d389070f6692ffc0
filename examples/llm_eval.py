"""Evaluate a language model as a hopgym agent, with batched acting over several envs.

    # a local transformers model (id, directory, or .gguf file with the gguf package installed)
    python examples/llm_eval.py --env hopgym/Synthetic-v0 --model Qwen/Qwen2.5-0.5B-Instruct \\
        --episodes 100 --num-envs 16
    # an OpenAI-compatible server (vllm serve / SGLang / llama-server)
    python examples/llm_eval.py --env hopgym/Tiny-v0 --backend openai \\
        --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-0.5B-Instruct --num-envs 8

``--num-envs`` envs run side by side; each turn the agent generates for all unfinished episodes with
one batched call (``LLMAgent.act_batch``), and an env that finishes takes the next question.
Questions are a seeded permutation of the task's, as in ``hopgym.agents.evaluate``. Prints EM,
F1, the share of valid turns, searches per episode and speed; ``--json PATH`` writes them,
``--trajectories PATH.jsonl`` every episode, in the format of ``hopgym eval --trajectories``
(``hopgym view PATH.jsonl`` shows it).
"""

# /// script
# requires-python = ">=3.10"
# dependencies = ["hopgym[train]"]
# ///

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np

import hopgym  # noqa: F401  (registers the ids)
from hopgym.agents.llm import LLMAgent, make_llm_agent
from hopgym.agents.trajectories import EpisodeRecorder, TrajectoryWriter, trajectory_header


def evaluate_batched(envs: Sequence[gym.Env], agent: LLMAgent, episodes: int,
                     seed: int = 0, trajectories: str | None = None) -> dict[str, Any]:
    """Run ``episodes`` episodes over ``envs`` (same task), acting for all of them in batches."""
    n_questions = len(envs[0].unwrapped.task.samples)
    order = [int(i) for i in np.random.default_rng(seed).permutation(n_questions)]
    queue = list(range(episodes))
    results: list[dict[str, Any]] = []
    slots: list[EpisodeRecorder | None] = [None] * len(envs)
    obs: list[str] = [""] * len(envs)
    infos: list[dict[str, Any]] = [{} for _ in envs]
    agent.reset()
    # The file `hopgym eval --trajectories` writes, so `hopgym view` reads it.
    out = (TrajectoryWriter(trajectories, trajectory_header(envs[0], agent, seed=seed))
           if trajectories else None)
    start = time.perf_counter()

    def start_episode(i: int) -> None:
        if not queue:
            slots[i] = None
            return
        k = queue.pop(0)
        obs[i], infos[i] = envs[i].reset(seed=seed + k,
                                         options={"index": order[k % n_questions]})
        slots[i] = EpisodeRecorder(envs[i], turns=out is not None)
        slots[i].start(infos[i], seed=seed + k)

    for i in range(len(envs)):
        start_episode(i)
    try:
        while any(s is not None for s in slots):
            active = [s is not None for s in slots]
            actions = agent.act_batch(obs, infos, active=active)
            for i, env in enumerate(envs):
                slot = slots[i]
                if slot is None:
                    continue
                obs[i], reward, term, trunc, infos[i] = env.step(actions[i])
                slot.step(obs[i], reward, term, trunc, infos[i])
                if term or trunc:
                    res = slot.result()
                    if out is not None:
                        out.write(res)
                    results.append(res)
                    start_episode(i)
    finally:
        if out is not None:
            out.close()
    elapsed = max(time.perf_counter() - start, 1e-9)
    steps = sum(r["steps"] for r in results)
    return {
        "em": float(np.mean([r["em"] for r in results])),
        "f1": float(np.mean([r["f1"] for r in results])),
        "valid_turns": 1 - sum(r["invalid"] for r in results) / max(steps, 1),
        "answered": float(np.mean([r["prediction"] is not None for r in results])),
        "avg_steps": steps / len(results),
        "avg_searches": float(np.mean([r["searches"] for r in results])),
        "episodes": len(results),
        "episodes_per_s": len(results) / elapsed,
    }


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
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="hopgym/Synthetic-v0", help="env id")
    p.add_argument("--kw", nargs="*", default=[], help="env arguments as key=value (JSON values)")
    p.add_argument("--model", required=True, help="model id/path, or the served model name")
    p.add_argument("--backend", default="transformers", choices=["transformers", "vllm", "openai"])
    p.add_argument("--base-url", default=None, help="API root for --backend openai")
    p.add_argument("--protocol", default="tags", choices=["tags", "r3"])
    p.add_argument("--mode", default="auto", choices=["auto", "chat", "continuation"])
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--num-envs", type=int, default=8, help="episodes acted on per batch")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the metrics here")
    p.add_argument("--trajectories", default=None, help="write every episode here (.jsonl)")
    args = p.parse_args(argv)
    kwargs = {"protocol": args.protocol, **_kw(args.kw)}
    envs = [gym.make(args.env, **kwargs) for _ in range(max(1, min(args.num_envs, args.episodes)))]
    agent = make_llm_agent(args.model, backend=args.backend, protocol=args.protocol,
                           base_url=args.base_url, temperature=args.temperature,
                           max_new_tokens=args.max_new_tokens, seed=args.seed, mode=args.mode)
    metrics = evaluate_batched(envs, agent, args.episodes, args.seed, args.trajectories)
    for key, value in metrics.items():
        print(f"{key:>14}: {value:.3f}" if isinstance(value, float) else f"{key:>14}: {value}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=2)
    return metrics


if __name__ == "__main__":
    main()
