"""The log-prob pass of GRPO's and RFT's KL log: memory and time, packed against one pass.

    OMP_NUM_THREADS=1 python benchmarks/logprob_memory.py --json benchmarks/results/logprob_memory.json

:func:`hopgym.agents.rollout.sequence_logprobs` computes every completion token's log-prob under a
model (``track_kl``'s reference pass over a GRPO step's episodes). Its logits take positions x
vocabulary x 4 bytes, so it packs trajectories under ``LOGPROB_PASS_POSITIONS`` positions per
forward pass. This script runs ``--episodes`` trajectories of SmolLM2's length in a GRPO step of
the ``cpu`` preset (a prompt of ``--prompt`` tokens, then ``--completion`` tokens) both ways, each
side in its own process so that each peak RSS is its own:

- **packed**: the default bound;
- **one pass**: every trajectory in one forward pass (``max_positions`` unbounded), as the pass
  was before the bound (it also projected the prompt's positions then, so it took more still).

Printed per side: RSS before the pass, peak RSS (``ru_maxrss``), the peak's rise over the RSS
before, and wall seconds. The model is a Llama of SmolLM2-135M's shape built from a config (random
weights: memory depends on the shape, not on the values), or ``--model DIR``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _model(path: str) -> object:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    if path != "config":
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    torch.manual_seed(0)
    cfg = LlamaConfig(  # SmolLM2-135M's shape
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg)


def side(args: argparse.Namespace) -> dict:
    """One side, in this process: ``args.max_positions`` 0 means one pass."""
    import numpy as np
    import torch

    from hopgym.agents.rollout import LOGPROB_PASS_POSITIONS, Trajectory, sequence_logprobs

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    model = _model(args.model)
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    trajs = []
    for i in range(args.episodes):
        n = args.completion - int(rng.integers(0, args.completion // 4))  # episodes differ in length
        trajs.append(
            Trajectory(
                f"q{i}",
                rng.integers(1, vocab, size=args.prompt).tolist(),
                completion_ids=rng.integers(1, vocab, size=n).tolist(),
                logprobs=[0.0] * n,
                mask=[1] * n,
            )
        )
    bound = args.max_positions or 10**12
    before = _rss_mib()
    t0 = time.perf_counter()
    out = sequence_logprobs(model, trajs, 1.0, max_positions=bound)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert [len(x) for x in out] == [len(t.completion_ids) for t in trajs]
    return {
        "side": "one pass" if not args.max_positions else f"packed ({bound} positions)",
        "max_positions": args.max_positions or None,
        "default_bound": LOGPROB_PASS_POSITIONS,
        "rss_before_mib": round(before, 1),
        "peak_rss_mib": round(peak, 1),
        "rise_mib": round(peak - before, 1),
        "seconds": round(seconds, 2),
        "tokens": sum(len(t.prompt_ids) + len(t.completion_ids) for t in trajs),
    }


def main() -> None:
    from hopgym.agents.rollout import LOGPROB_PASS_POSITIONS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="config", help="A transformers causal LM folder, or config.")
    p.add_argument("--episodes", type=int, default=16, help="Trajectories (the cpu preset's B x G).")
    p.add_argument("--prompt", type=int, default=300, help="Prompt tokens of each.")
    p.add_argument("--completion", type=int, default=700, help="Most completion tokens of each.")
    p.add_argument("--json", default=None, help="Write both sides here.")
    p.add_argument("--max-positions", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.max_positions is not None:
        print(json.dumps(side(args)))
        return
    from hopgym._atomic import check_writable, write_json

    if args.json:
        check_writable(args.json)  # before the two sides' runs, not after them
    rows = []
    for bound in (LOGPROB_PASS_POSITIONS, 0):
        cmd = [sys.executable, __file__, "--model", args.model, "--episodes", str(args.episodes)]
        cmd += ["--prompt", str(args.prompt), "--completion", str(args.completion)]
        cmd += ["--max-positions", str(bound)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    packed, whole = rows
    result = {
        "model": Path(args.model).name,
        "threads": int(os.environ["OMP_NUM_THREADS"]),
        "episodes": args.episodes,
        "rows": rows,
        "rise_ratio": round(packed["rise_mib"] / whole["rise_mib"], 3),
        "time_ratio": round(packed["seconds"] / whole["seconds"], 3),
    }
    print(f"{'':26}{'before MiB':>11}{'peak MiB':>10}{'rise MiB':>10}{'s':>8}")
    for r in rows:
        print(
            f"{r['side']:26}{r['rss_before_mib']:>11}{r['peak_rss_mib']:>10}{r['rise_mib']:>10}{r['seconds']:>8}"
        )
    print(f"packed / one pass: memory rise x{result['rise_ratio']}, time x{result['time_ratio']}")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
