"""bf16 autocast against fp32 on a CPU, for a training step's forward and backward and for a
no-grad forward (a prefill), on a causal LM (SmolLM2-135M-Instruct by default).

    OMP_NUM_THREADS=2 python benchmarks/bf16_cpu.py --model runs/smollm2-135m-instruct \\
        --json benchmarks/results/bf16_cpu_smollm2.json

Each setting runs once to warm up, then ``--repeats`` times; the median wall seconds are kept. The
loss is a mean log-softmax over the vocabulary, as a token-level loss computes it. bf16 pays only on
a CPU with bf16 instructions (AVX-512 BF16 or AMX); the script prints whether this one has them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/smollm2-135m-instruct")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--tokens", type=int, default=600)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    from hopgym._atomic import check_writable, write_json

    if args.json:
        check_writable(args.json)  # before the timings, not after them
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    x = torch.randint(
        0, model.config.vocab_size, (args.batch, args.tokens), generator=torch.Generator().manual_seed(0)
    )

    def train_step(bf16: bool, checkpointing: bool) -> float:
        if checkpointing:
            model.gradient_checkpointing_enable()
        else:
            model.gradient_checkpointing_disable()
        model.train()
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=x).logits.float().log_softmax(-1).mean()
        loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t

    def prefill(bf16: bool) -> float:
        model.eval()
        t = time.perf_counter()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            model(input_ids=x)
        return time.perf_counter() - t

    def median(fn, *a) -> float:
        fn(*a)
        return round(statistics.median(fn(*a) for _ in range(args.repeats)), 2)

    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").exists() else []
    rows = {
        "train_fp32_checkpointing": median(train_step, False, True),
        "train_fp32": median(train_step, False, False),
        "train_bf16": median(train_step, True, False),
        "train_bf16_checkpointing": median(train_step, True, True),
        "prefill_fp32": median(prefill, False),
        "prefill_bf16": median(prefill, True),
    }
    result = {
        "model": Path(args.model).name,
        "threads": torch.get_num_threads(),
        "batch": args.batch,
        "tokens": args.tokens,
        "cpu_bf16_instructions": "avx512_bf16" in flags or "amx_bf16" in flags,
        "seconds": rows,
        "train_speedup": round(rows["train_fp32_checkpointing"] / rows["train_bf16"], 2),
        "prefill_speedup": round(rows["prefill_fp32"] / rows["prefill_bf16"], 2),
    }
    print(json.dumps(result, indent=1))
    if args.json:
        write_json(args.json, result, indent=1)


if __name__ == "__main__":
    main()
