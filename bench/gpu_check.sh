#!/usr/bin/env bash
# GPU check (issues 7 and 14), run once on a lent H200 through the device tool:
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=540)
# The machine has PyTorch but not simpy, scipy's friends or pytest: their pure-Python wheels travel in .whl/
# (git-ignored), made with
#   .venv/bin/pip download --no-deps --only-binary=:all: -d .whl simpy==4.1.1 pytest==9.2.0 pluggy==1.7.0 \
#     iniconfig==2.3.1 packaging==26.4 pygments==2.21.0
# Time budget (<= 8 min in all):
#   1. GPU pytest files (CUDA-graph engines, flash, sync-free rounds, model checks; not the slow 8B test): <= 100 s
#   2. bench/gpu_check.py: CUDA-graph grids for Llama-3.1-8B/3.2-1B and Qwen3-32B/0.6B shapes (~90 s), fits,
#      tiny-pair lossless runs with graphs on/off, AR/SD/SSD at the real shapes with predicted vs measured
#      tokens/s, second-GPU projection: <= 300 s
#   3. bench/gpu_placement.py, draft and target on one GPU (tiny pair, batch 1, lossless): AR, SD, SSD with the
#      draft in a second process and on a side CUDA stream; once plainly (<= 40 s) and, when
#      nvidia-cuda-mps-control exists, once under CUDA MPS (<= 40 s; the daemon is started here and always
#      stopped on exit; its log directory is $OUT/mps-log)
# Each part saves what it has as it goes (results.json after every step), so a timeout loses only the unfinished part.
# `bash bench/gpu_check.sh --dry-run` runs both parts on a CPU (the GPU tests skip, gpu_check.py --quick: tiny shapes).
set -uo pipefail
QUICK=""
PLACE_S=40                      # per placement run on the GPU; a loaded CPU dry run needs longer
if [ "${1:-}" = "--dry-run" ]; then QUICK="--quick"; PLACE_S=150; fi
PY=${PYTHON:-python3}
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.csv" 2>&1 || true
timeout 100 "$PY" -m pytest tests/exec/test_exec_gpu.py tests/exec/test_model_gpu.py -m "not slow" -q \
  -p no:cacheprovider --junitxml="$OUT/pytest_gpu.xml" 2>&1 | tee "$OUT/pytest_gpu.txt"
timeout 300 "$PY" bench/gpu_check.py --out "$OUT" $QUICK 2>&1 | tee "$OUT/log.txt"
rc=${PIPESTATUS[0]}
timeout "$PLACE_S" "$PY" bench/gpu_placement.py --out "$OUT" --label no-mps $QUICK 2>&1 | tee -a "$OUT/log.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
if [ -z "$QUICK" ] && command -v nvidia-cuda-mps-control >/dev/null 2>&1; then
  CUDA_MPS_PIPE_DIRECTORY=$(mktemp -d /tmp/saguaro-mps-pipe.XXXXXX)   # named pipes: not under $OUT
  export CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY="$OUT/mps-log"
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    trap 'echo quit | nvidia-cuda-mps-control' EXIT       # never leave the daemon running
    timeout "$PLACE_S" "$PY" bench/gpu_placement.py --out "$OUT" --label mps 2>&1 | tee -a "$OUT/log.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    echo quit | nvidia-cuda-mps-control && trap - EXIT
  else
    echo "placement: nvidia-cuda-mps-control -d failed: no MPS run" | tee -a "$OUT/log.txt"
  fi
else
  echo "placement: no MPS run (${QUICK:+dry run; }nvidia-cuda-mps-control: $(command -v nvidia-cuda-mps-control || echo absent))" \
    | tee -a "$OUT/log.txt"
fi
exit "$rc"
