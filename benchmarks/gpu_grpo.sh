#!/usr/bin/env bash
# GRPO on the synthetic world on one GPU: the cpu-small question at a larger size. SFT cold start on
# an imperfect teacher, then GRPO with the env's reward, and continue-SFT for the same wall-clock
# time; prints held-out EM (untrained / SFT / GRPO / continue-SFT), rollout tokens/s (model tokens
# sampled per second of rollout), training tokens/s and the GPU memory used.
#
#   bash benchmarks/gpu_grpo.sh [DEST]               # GPU: --preset gpu-small, sized for < 7 min
#   PRESET=smoke bash benchmarks/gpu_grpo.sh [DEST]  # CPU check of the script itself (a minute)
#
# DEST defaults to $OUT (the device machine's output folder) or runs/gpu_grpo. Everything is
# written under /tmp while it runs; the small results (result.json, summary.txt, curves.png,
# the log's tail) are copied to DEST only at the end. Wheels carried in .device/*.whl (TRL,
# datasets, gymnasium, bm25s ... for a machine without them) are installed into /tmp/site first.
# Settings: PRESET, SEEDS, METHODS (default "grpo continue_sft"), BUDGET_S (the time this script
# is given, default 420 s; the run is stopped by an internal timeout one minute earlier). CPU
# work counted in it: the world, tokenizer and renamer (~10 s), 25,600 teacher episodes (~21 s),
# evaluation episodes (one core). Never run on a GPU yet: the 7 minutes are an estimate.
set -uo pipefail
DEST=${1:-${OUT:-runs/gpu_grpo}}
PRESET=${PRESET:-gpu-small}
SEEDS=${SEEDS:-0}
METHODS=${METHODS:-grpo continue_sft}
BUDGET_S=${BUDGET_S:-420}
WORK=$(mktemp -d /tmp/gpu_grpo.XXXXXX)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} TRL_EXPERIMENTAL_SILENCE=1 PYTHONWARNINGS=ignore
export HF_DATASETS_DISABLE_PROGRESS_BARS=1 PYTHONUNBUFFERED=1
if compgen -G ".device/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/*.whl \
        || { echo "installing .device/*.whl failed"; exit 3; }
    export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
python3 - <<'PY' || exit 3
import importlib, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, end="")
for name in ("transformers", "trl", "datasets", "gymnasium", "bm25s"):
    try:
        print(f" | {name}", importlib.import_module(name).__version__, end="")
    except ImportError:
        print(f" | {name} MISSING", end="")
cuda = torch.cuda.is_available()
print(f"\nCUDA available: {cuda}", end="")
if cuda:
    print(f" | {torch.cuda.get_device_name(0)} | bf16 supported: {torch.cuda.is_bf16_supported()}",
          end="")
print(flush=True)
PY
start=$(date +%s)
# One minute under the budget, so that the summary and the copy below always run.
timeout $(( BUDGET_S - 60 )) python3 examples/grpo_synthetic.py --preset "$PRESET" \
    --seeds $SEEDS --methods $METHODS --out "$WORK/run" --json "$WORK/result.json" \
    --set clock=wall > "$WORK/run.log" 2>&1 &
pid=$!
# Progress: the example's own lines (SFT losses, GRPO steps, each method's EM) as they come.
tail -n +1 -f "$WORK/run.log" --pid=$pid | grep --line-buffered -E "^\[seed|^EM|^targets|'loss'|Error|Traceback"
wait $pid
rc=$?
echo "wall: $(( $(date +%s) - start )) s (exit $rc$([ $rc = 124 ] && echo ': internal timeout'))"
[ $rc = 0 ] || tail -25 "$WORK/run.log"
if [ -f "$WORK/result.json" ]; then
    python3 - "$WORK/result.json" > "$WORK/summary.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
run = r["runs"][0]
print(f"preset {r['preset']}: {run['parameters']:,} parameters, {run['test_questions']} held-out "
      f"questions, wall {r['seconds']:.0f} s")
for k, s in r["summary"].items():
    print(f"held-out EM {k:>13}: {s['mean']:.3f} ± {s['std']:.3f}")
for run in r["runs"]:
    mem = run.get("gpu_max_memory_allocated_mb")
    print(f"seed {run['seed']}: rollout {run.get('rollout_model_tokens_per_s', 0):.0f} model tok/s, "
          f"GRPO train {run.get('grpo_train_tokens_per_s', 0):.0f} tok/s, "
          f"SFT train {run.get('sft_train_tokens_per_s') or 0:.0f} tok/s, GRPO "
          f"{run.get('grpo_budget', {}).get('seconds', 0):.0f} s, SFT {run['sft_seconds']:.0f} s, "
          f"GPU memory " + (f"{mem:.0f} MiB (max allocated)" if mem is not None else "n/a (CPU)"))
PY
    cat "$WORK/summary.txt"
fi
# The small results go to DEST only now, at the very end.
mkdir -p "$DEST"
for f in result.json summary.txt; do [ -f "$WORK/$f" ] && cp "$WORK/$f" "$DEST/"; done
[ -f "$WORK/run/seed${SEEDS%% *}/curves.png" ] && cp "$WORK/run/seed${SEEDS%% *}/curves.png" "$DEST/"
tail -200 "$WORK/run.log" > "$DEST/run_tail.log"
exit $rc
