"""LoRA against full fine-tuning: peak memory (RSS) and SFT step time, on the same model and batches.

    OMP_NUM_THREADS=1 python benchmarks/lora_memory.py --model runs/smollm2-135m-instruct \\
        --json benchmarks/results/lora_memory.json
    OMP_NUM_THREADS=1 python benchmarks/lora_memory.py --model config   # a model built from a config

Each side runs in its own process (so that each peak RSS is its own): load the model, build SFT
examples from the oracle on ``hopgym/Synthetic-v1`` (2-hop train questions), and train
``--steps`` steps of TRL's ``SFTTrainer`` (:func:`hopgym.agents.sft.train_sft`), with and without
``lora=LoRAConfig(r=...)``. Printed per side: trainable parameters, RSS after loading, peak RSS
(``ru_maxrss``), and the median wall and CPU seconds of a step after the first. Without
``--model`` (or with ``config``) a Llama of SmolLM2-135M's shape is built from a config with
random weights: memory and speed depend on the shape, not on the values.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402


def _rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _load(model: str) -> tuple:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if model != "config":
        tok = AutoTokenizer.from_pretrained(model)
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        return AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32), tok
    import gymnasium as gym

    from hopgym.agents.tiny_lm import build_tokenizer, task_texts

    env = gym.make("hopgym/Synthetic-v1", seed=0, n_entities=300, n_questions=200, hops=2, reward=None)
    tok = build_tokenizer(task_texts(env.unwrapped.task, ("tags",), env.unwrapped.max_turns))
    torch.manual_seed(0)
    cfg = LlamaConfig(  # SmolLM2-135M's shape, our word-level vocabulary
        vocab_size=max(len(tok), 49152),
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return LlamaForCausalLM(cfg), tok


def side(args: argparse.Namespace) -> dict:
    """One side (``args.lora_r`` 0: full fine-tuning), in this process."""
    import gymnasium as gym
    import torch
    from transformers import TrainerCallback

    import hopgym  # noqa: F401
    from hopgym.agents.lora import LoRAConfig, trainable_parameters
    from hopgym.agents.scripted import OracleAgent
    from hopgym.agents.sft import SFTRunConfig, teacher_examples, train_sft

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    model, tok = _load(args.model)
    rss_loaded = _rss_mib()

    def env_fn() -> gym.Env:
        return gym.make(
            "hopgym/Synthetic-v1", seed=0, n_entities=300, n_questions=200, hops=2, split="train", reward=None
        )

    qids = [s.id for s in env_fn().unwrapped.task.samples][: args.steps * args.batch_size]
    examples = teacher_examples(env_fn, lambda e: OracleAgent(e), qids, tok)
    examples = [e for e in examples if len(e["input_ids"]) <= args.max_length] or examples[:1]
    times: list[tuple[float, float]] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):  # noqa: ANN001, D102
            self.t = (time.perf_counter(), time.process_time())

        def on_step_end(self, a, state, control, **kw):  # noqa: ANN001, D102
            times.append((time.perf_counter() - self.t[0], time.process_time() - self.t[1]))

    lora = LoRAConfig(r=args.lora_r, dropout=0.0) if args.lora_r else None
    cfg = SFTRunConfig(
        output_dir=args.scratch,
        trl={
            "max_steps": args.steps,
            "per_device_train_batch_size": args.batch_size,
            "max_length": args.max_length,
            "learning_rate": 1e-4,
            "warmup_steps": 0,
            "logging_steps": args.steps,
            "report_to": [],
        },
    )
    trainer = train_sft(model, tok, examples, cfg, callbacks=[Clock()], lora=lora)
    trainable, total = trainable_parameters(trainer.model)
    later = times[1:] or times
    tokens = [len(e["input_ids"]) for e in examples]
    return {
        "mode": f"lora r={args.lora_r}" if args.lora_r else "full",
        "trainable_params": trainable,
        "total_params": total,
        "rss_loaded_mib": round(rss_loaded, 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "step_wall_s": round(statistics.median(t[0] for t in later), 3),
        "step_cpu_s": round(statistics.median(t[1] for t in later), 3),
        "steps": len(times),
        "batch_size": args.batch_size,
        "mean_example_tokens": round(sum(tokens) / len(tokens), 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="config", help="A transformers causal LM folder, or config.")
    p.add_argument("--lora-r", type=int, default=16, help="The LoRA side's rank.")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=2)
    p.add_argument("--max-length", type=int, default=512)
    p.add_argument("--json", default=None, help="Write both sides here.")
    p.add_argument("--scratch", default="/tmp/hopgym_lora_memory")
    p.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.side:
        print(json.dumps(side(args)))
        return
    from hopgym._atomic import check_writable, write_json

    if args.json:
        check_writable(args.json)  # before the two sides' runs, not after them
    rows = []
    for r in (0, args.lora_r):
        cmd = [sys.executable, __file__, "--side", "--model", args.model, "--lora-r", str(r)]
        cmd += ["--steps", str(args.steps), "--batch-size", str(args.batch_size)]
        cmd += ["--max-length", str(args.max_length), "--scratch", args.scratch]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    full, lora = rows
    result = {
        "model": Path(args.model).name,
        "threads": int(os.environ["OMP_NUM_THREADS"]),
        "rows": rows,
        "peak_rss_ratio": round(lora["peak_rss_mib"] / full["peak_rss_mib"], 3),
        "step_time_ratio": round(lora["step_wall_s"] / full["step_wall_s"], 3),
    }
    print(f"{'':14}{'trainable':>12}{'loaded MiB':>12}{'peak MiB':>10}{'step s':>8}{'step CPU s':>11}")
    for r in rows:
        print(
            f"{r['mode']:14}{r['trainable_params']:>12,}{r['rss_loaded_mib']:>12}{r['peak_rss_mib']:>10}"
            f"{r['step_wall_s']:>8}{r['step_cpu_s']:>11}"
        )
    print(f"LoRA / full: peak RSS x{result['peak_rss_ratio']}, step time x{result['step_time_ratio']}")
    if args.json:
        write_json(args.json, result)


if __name__ == "__main__":
    main()
