#!/usr/bin/env bash
# Dense retrieval on one GPU: the encoder (float16) and the torch flat index (float16) on CUDA,
# FAISS's GPU index beside it when a FAISS with GPU support is installed; queries/s at batch 1,
# 64 and 1,024 over 100k and 1M passages, recall@10 against exact float32 search.
#
#   bash benchmarks/gpu_retrieval.sh                   # on the GPU machine, from the repo root
#   DEVICE=cpu SIZES=3000 BATCHES="1 8" MIN_TIME=0.2 bash benchmarks/gpu_retrieval.sh   # a CPU check
#
# Prints versions first, then each table as it is measured; logs and results go to /tmp/gpu_retrieval,
# and only at the very end are dense.json and run.log copied to $OUT (when set). The benchmark runs
# under `timeout $LIMIT` (default 480 s: give the run 540 s or more). Estimated, not yet measured:
# a few minutes on an H200, most of it generating 1M random vectors and the float32 reference on
# the CPU; each figure takes MIN_TIME seconds of calls.
#
# On a machine without network, carry what it lacks in .device/ (ignored by git) and name
# `.device` in the run's carry:
#   - wheels, installed with --no-deps into /tmp/site: gymnasium, farama-notifications and bm25s
#     (`import hopgym` needs them; shared/device/wheels/ has them for the GPU machine);
#   - the encoder, optional: a sentence-transformers model directory at .device/minilm, e.g. the
#     packaged MiniLM in float16 (~45 MB):
#       python -c "from sentence_transformers import SentenceTransformer as S; \
#         from hopgym.retrieval.dense import default_model_path as p; \
#         m = S(p()); m.half(); m.save('.device/minilm')"
#     Without sentence-transformers there, the benchmark runs the same model and pooling on
#     transformers alone (labelled so). Without a model, the encoder rows are skipped.
# FAISS is optional: faiss-gpu-cu12 wheels are larger than a run can carry, so without it only
# the torch index is measured and the table says why the FAISS row is missing.
set -uo pipefail
DEVICE=${DEVICE:-cuda}
SIZES=${SIZES:-100000 1000000}
BATCHES=${BATCHES:-1 64 1024}
MIN_TIME=${MIN_TIME:-2}
LIMIT=${LIMIT:-480}
RES=/tmp/gpu_retrieval
mkdir -p "$RES"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-8}
if compgen -G ".device/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .device/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit 3
fi
MODEL=${MODEL:-}
if [ -z "$MODEL" ]; then
  if [ -d .device/minilm ]; then MODEL=.device/minilm; else MODEL=default; fi
fi

python3 - <<'PY' 2>&1 | tee "$RES/versions.txt"
import importlib, platform
print("python", platform.python_version())
for name in ("numpy", "torch", "transformers", "sentence_transformers", "faiss", "gymnasium", "bm25s"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as exc:  # noqa: BLE001
        print(name, "not available:", type(exc).__name__)
import torch
print("CUDA available:", torch.cuda.is_available(), "| built for CUDA", torch.version.cuda)
if torch.cuda.is_available():
    print("GPU:", torch.cuda.get_device_name(0), "| bf16 supported:", torch.cuda.is_bf16_supported())
try:
    import faiss
    print("faiss GPUs:", faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0)
except ImportError:
    pass
PY

start=$(date +%s)
# shellcheck disable=SC2086 # the lists are word-split on purpose
timeout "$LIMIT" python3 benchmarks/retrieval.py --only dense --device "$DEVICE" --sizes $SIZES \
  --batches $BATCHES --min-time "$MIN_TIME" --model "$MODEL" --json "$RES/dense.json" \
  2>&1 | tee "$RES/run.log"
rc=${PIPESTATUS[0]}
echo "benchmark exit status $rc after $(( $(date +%s) - start )) s (124: it ran past ${LIMIT} s)"
if [ -n "${OUT:-}" ]; then
  cp "$RES/versions.txt" "$RES/run.log" "$OUT/" 2>/dev/null
  [ -f "$RES/dense.json" ] && cp "$RES/dense.json" "$OUT/"
fi
exit "$rc"
