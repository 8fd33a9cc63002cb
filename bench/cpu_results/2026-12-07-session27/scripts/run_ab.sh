#!/usr/bin/env bash
# Session 27: autotune (the new fit) on the deep pair at T = 0, batch B; both ways' choices on its measurements
# (tile_choice.py); then the interleaved A/B (ab_tile.py), each step logged with load and steal.
set -u
cd "$(dirname "$0")/../../../.."
S=bench/cpu_results/2026-12-07-session27; OUT=${1:-$S/ab}; B=${2:-1}; R=${3:-7}; mkdir -p "$OUT"
steal() { read -r _ u n sy i io irq sirq st _ < /proc/stat; t1=$((u+n+sy+i+io+irq+sirq+st)); s1=$st; sleep 3
  read -r _ u n sy i io irq sirq st _ < /proc/stat; t2=$((u+n+sy+i+io+irq+sirq+st))
  awk -v a=$((st-s1)) -v b=$((t2-t1)) 'BEGIN{printf "%.2f%%", 100*a/b}'; }
log() { echo "$(date -u +%FT%TZ) $1 load $(cut -d' ' -f1-3 /proc/loadavg) steal $(steal)" | tee -a "$OUT/load.log"; }
log "start autotune b$B"
.venv/bin/python -c "import json, sys; from saguaro_exec.io.prompts import BUILTIN_PROMPTS as P; json.dump(P[:4], open(sys.argv[1], 'w'))" "$OUT/bench_prompts.json"
.venv/bin/saguaro autotune --target saguaro_exec/assets/tiny/target-deep --batch-size "$B" --temperature 0 \
  --prompt-file "$OUT/bench_prompts.json" --max-new-tokens 128 --out "$OUT/autotune" > "$OUT/autotune.txt" 2>&1; echo "rc=$? autotune" | tee -a "$OUT/load.log"
log "start tile_choice"
.venv/bin/python $S/scripts/tile_choice.py "$OUT/autotune" "$B" "$OUT/choices.json" | tee "$OUT/choices.txt"
log "start ab"
.venv/bin/python $S/scripts/ab_tile.py "$OUT/choices.json" "$B" "$R" "$OUT/ab.json" | tee "$OUT/ab.txt"
log "end"
