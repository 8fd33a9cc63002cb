#!/usr/bin/env bash
# GPU check for issue 7, run once on the lent H200 through the device tool:
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=480)
# The machine has PyTorch but not simpy: the pure-Python wheel travels in .whl/ (git-ignored), made here with
#   .venv/bin/pip download --no-deps --only-binary=:all: -d .whl simpy==4.1.1
set -uo pipefail
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1
OUT=${OUT:-out/gpu_check}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$OUT/nvidia-smi.csv" 2>&1 || true
timeout 420 python3 bench/gpu_check.py --out "$OUT" 2>&1 | tee "$OUT/log.txt"
