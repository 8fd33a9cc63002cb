#!/usr/bin/env bash
# Interleaved A/B before/after the fast-backup calibration at b1 and b4, each case logged with load and steal.
set -u
cd "$(dirname "$0")/../../../.."
S=bench/cpu_results/2026-12-06-session25; OUT=${1:-$S/ab}; R=${2:-7}; mkdir -p "$OUT"
steal() { read -r _ u n sy i io irq sirq st _ < /proc/stat; t1=$((u+n+sy+i+io+irq+sirq+st)); s1=$st; sleep 3
  read -r _ u n sy i io irq sirq st _ < /proc/stat; t2=$((u+n+sy+i+io+irq+sirq+st))
  awk -v a=$((st-s1)) -v b=$((t2-t1)) 'BEGIN{printf "%.2f%%", 100*a/b}'; }
for c in ${CASES:-b1 b4}; do
  echo "$(date -u +%FT%TZ) start $c load $(cut -d' ' -f1-3 /proc/loadavg) steal $(steal)" | tee -a "$OUT/load.log"
  .venv/bin/python $S/scripts/ab_fastcal.py $c "$R" "$OUT/ab_$c.json" | tee "$OUT/ab_$c.txt"
done
echo "$(date -u +%FT%TZ) end load $(cut -d' ' -f1-3 /proc/loadavg) steal $(steal)" | tee -a "$OUT/load.log"
