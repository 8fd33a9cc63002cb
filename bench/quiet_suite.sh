#!/usr/bin/env bash
# The executor/planner measurements of one session, in the order they decide things, on a quiet box.
# Usage: bash bench/quiet_suite.sh OUT_DIR [steps...]   (steps: warm exec_deep exec_deep_opt exec_deep07_opt exec_deep4_opt exec_tiny_opt exec_deep07_wide exec_deep_fast07 exec_deep4 exec_tiny handoff peers fidelity refit load sim demo)
# Each step logs the load average and CPU steal (/proc/stat over 3 s) before it starts into OUT_DIR/load.log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?OUT_DIR}; shift
mkdir -p "$OUT"
PY=${PY:-.venv/bin/python}
R=${REPEATS:-5}     # repeats of every executor and load step (more on a host whose speed swings)
# LOAD_PROFILE: the profile bench_load predicts with (default the shipped cpu-tinypair); the refit step (after
# fidelity, same OUT_DIR) fits cpu-tinypair on the fidelity runs and sets it for the steps after it: the same-day
# calibration, so one call runs a pass: warm fidelity refit load exec_...
export PYTHONPATH=$PWD
steps=("$@"); [ ${#steps[@]} -gt 0 ] || steps=(warm exec_deep exec_deep4 exec_tiny handoff peers fidelity load sim demo)
SETTLE=${SETTLE:-90}   # seconds a step waits at most for the 1-minute load average to fall below 1: it lags the
                       # previous step's two processes by a minute, and bench_peers refuses a start at load >= 1
settle() {
  local waited=0
  while awk -v l="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN{exit !(l >= 1.0)}' && [ $waited -lt "$SETTLE" ]; do
    sleep 5; waited=$((waited + 5))
  done
  [ $waited -eq 0 ] || echo "$(date -u +%FT%TZ) waited ${waited}s for load < 1" | tee -a "$OUT/load.log"
}
quiet() {
  settle
  local _ u n sy i io irq sirq st; read -r _ u n sy i io irq sirq st _ < /proc/stat; local t1=$((u+n+sy+i+io+irq+sirq+st)) s1=$st; sleep 3
  read -r _ u n sy i io irq sirq st _ < /proc/stat; local t2=$((u+n+sy+i+io+irq+sirq+st))
  echo "$(date -u +%FT%TZ) $1 load $(cut -d' ' -f1-3 /proc/loadavg) steal $(awk -v a=$((st-s1)) -v b=$((t2-t1)) 'BEGIN{printf "%.2f%%", 100*a/b}')" | tee -a "$OUT/load.log"
}
DEEP=saguaro_exec/assets/tiny/target-deep
TINY=saguaro_exec/assets/tiny/target
# The optimizer's own SSD choice at temperature $1 and batch $3 (default 1) (autotune on the pair $4, default the
# deep one: fresh profile, simulated best SSD), measured beside AR and SD at K 3-6 (the lean draft step moved its
# best K to 5-6; $5: other SD rows), medians of $R interleaved repeats; $2 names the outputs. The autotune runs
# bench_exec's workload (its 4 prompts x 128 tokens): the contexts set the verification's cost, so the budget the
# build can hide (until session 19 it tuned for 8 x 96, where the verification ran 0.6 ms shorter).
opt_step() {
  local b=${3:-1} tgt=${4:-$DEEP} sd=${5:-sd@3,sd@4,sd@5,sd@6} at="$OUT/autotune_T$1${3:+_b$3}${4:+_tiny}"
  $PY -c "import json, sys; from saguaro_exec.io.prompts import BUILTIN_PROMPTS as P; json.dump(P[:4], open(sys.argv[1], 'w'))" "$OUT/bench_prompts.json"
  $PY -m saguaro autotune --target "$tgt" --temperature "$1" --batch-size "$b" --prompt-file "$OUT/bench_prompts.json" \
    --max-new-tokens 128 --out "$at" > "$at.txt" 2>&1
  read -r K F FM B C < <($PY -c "import json,sys; d=json.load(open(sys.argv[1])); c=d.get('ssd_choice_spec') or next(x['spec'] for x in d['configs'] if x['spec']['mode']=='ssd'); print(c['k'], ','.join(map(str,c['fanout'])), ','.join(map(str,c.get('fanout_miss') or c['fanout'])), c['backup'], c['sampler_c'])" "$at/autotune.json")
  echo "optimizer's SSD choice at T=$1 b=$b: k=$K fanout=$F fanout_miss=$FM backup=$B C=$C" | tee -a "$OUT/load.log"
  $PY bench/bench_exec.py --target "$tgt" --batches "$b" --temps "$1" --repeats $R \
    --modes "ar,$sd,ssd" --k "$K" --fanout "$F" --fanout-miss "$FM" --backup "$B" --c "$C" --out "$OUT/$2.json" > "$OUT/$2.txt" 2>&1
}
for s in "${steps[@]}"; do
  quiet "start $s"
  case $s in
    warm)      $PY bench/warm_host.py > "$OUT/warm.txt" 2>&1 ;;   # a host woken from a long idle runs slow for minutes
    exec_deep) $PY bench/bench_exec.py --target $DEEP --batches 1 --temps 0 0.7 --repeats $R \
                 --modes ar,sd@2,sd@3,sd@4,ssd,ssd@4 --out "$OUT/bench_exec_deep.json" > "$OUT/bench_exec_deep.txt" 2>&1 ;;
    exec_deep_opt)   opt_step 0 bench_exec_deep_optimizer ;;
    exec_deep07_opt) opt_step 0.7 bench_exec_deep07_optimizer ;;
    exec_deep4_opt)  opt_step 0 bench_exec_deep4_optimizer 4 ;;
    exec_tiny_opt)   opt_step 0 bench_exec_tiny_optimizer 1 "$TINY" sd@2,sd@3,sd@4 ;;   # the tiny pair's SD peaks at K 2-3
    exec_deep07_wide) $PY bench/bench_exec.py --target $DEEP --batches 1 --temps 0.7 --repeats $R \
                 --modes ar,sd@4,sd@5,ssd@4,ssd@5 --budget 32 --backup neural \
                 --out "$OUT/bench_exec_deep07_wide.json" > "$OUT/bench_exec_deep07_wide.txt" 2>&1 ;;
    exec_deep_fast07) $PY bench/bench_exec.py --target $DEEP --batches 1 --temps 0.7 --repeats $R \
                 --modes ar,sd@3,sd@4,ssd,ssd@4 --backup fast \
                 --out "$OUT/bench_exec_deep_fast07.json" > "$OUT/bench_exec_deep_fast07.txt" 2>&1 ;;
    exec_deep4) $PY bench/bench_exec.py --target $DEEP --batches 4 --temps 0 --repeats $R \
                 --modes ar,sd@3,sd@4,ssd --out "$OUT/bench_exec_deep4.json" > "$OUT/bench_exec_deep4.txt" 2>&1 ;;
    exec_tiny) $PY bench/bench_exec.py --batches 1 --temps 0 --repeats $R --modes ar,sd@2,sd@3,ssd \
                 --out "$OUT/bench_exec_tiny.json" > "$OUT/bench_exec_tiny.txt" 2>&1 ;;
    handoff)   $PY bench/bench_handoff.py --repeats 3 --gc on,freeze --out "$OUT/bench_handoff.json" > "$OUT/bench_handoff.txt" 2>&1 ;;
    peers)     $PY bench/bench_peers.py --no-progress --out "$OUT/bench_peers.json" > "$OUT/bench_peers.txt" 2>&1 ;;
    fidelity)  $PY bench/bench_fidelity.py --repeats 5 --save "$OUT/fidelity-runs" --out "$OUT/fidelity.json" > "$OUT/fidelity.txt" 2>&1 ;;
    refit)     $PY -m saguaro calibrate "$OUT"/fidelity-runs/grid*.json "$OUT"/fidelity-runs/calib_*_p*.json --name cpu-tinypair \
                 -o "$OUT/refit-profiles/cpu-tinypair.json" > "$OUT/refit.txt" 2>&1 \
                 && export LOAD_PROFILE="$OUT/refit-profiles/cpu-tinypair.json" ;;
    load)      $PY bench/bench_load.py ${LOAD_PROFILE:+--profile "$LOAD_PROFILE"} --repeats $R --no-progress --out "$OUT/bench_load.json" > "$OUT/bench_load.txt" 2>&1 ;;
    demo)      make demo > "$OUT/demo.txt" 2>&1 ;;
    sim)       $PY bench/bench_sim.py --out "$OUT/bench_sim.json" > "$OUT/bench_sim.txt" 2>&1 ;;
  esac
  echo "rc=$? $s" | tee -a "$OUT/load.log"
done
quiet end
