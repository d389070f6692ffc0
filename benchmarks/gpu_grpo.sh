#!/usr/bin/env bash
# GRPO on the synthetic world on one GPU: SFT cold start on an imperfect teacher, then GRPO with
# the env's reward; prints held-out EM (untrained / SFT / GRPO / continue-SFT at equal wall-clock),
# rollout tokens/s (model tokens sampled per second of rollout) and training tokens/s.
#
#   bash benchmarks/gpu_grpo.sh [OUT]                 # GPU: --preset gpu-small (~4M params), < 8 min
#   PRESET=smoke bash benchmarks/gpu_grpo.sh [OUT]    # CPU check of the script itself (seconds)
#
# Needs torch, transformers, trl==1.16, datasets (TRL's wheels are pure Python; carry them if the
# machine has no network). bf16 is used when CUDA supports it.
set -euo pipefail
OUT=${1:-runs/gpu_grpo}
PRESET=${PRESET:-gpu-small}
SEEDS=${SEEDS:-0}
mkdir -p "$OUT"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TRL_EXPERIMENTAL_SILENCE=1 PYTHONWARNINGS=ignore
export HF_DATASETS_DISABLE_PROGRESS_BARS=1
python - <<'PY'
import torch
print("device:", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu (no CUDA)")
PY
start=$(date +%s)
python examples/grpo_synthetic.py --preset "$PRESET" --seeds $SEEDS --out "$OUT" \
    --json "$OUT/result.json" > "$OUT/run.log" 2>&1 || { tail -40 "$OUT/run.log"; exit 1; }
echo "wall: $(( $(date +%s) - start )) s"
python - "$OUT/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"preset {r['preset']}: {r['runs'][0]['parameters']:,} parameters")
for k in ("untrained", "sft", "grpo", "continue_sft"):
    s = r["summary"][k]
    print(f"held-out EM {k:>13}: {s['mean']:.3f} ± {s['std']:.3f}")
for run in r["runs"]:
    print(f"seed {run['seed']}: rollout {run['rollout_model_tokens_per_s']:.0f} model tok/s, "
          f"GRPO train {run['grpo_train_tokens_per_s']:.0f} tok/s, "
          f"SFT train {run['sft_train_tokens_per_s'] or 0:.0f} tok/s")
PY
