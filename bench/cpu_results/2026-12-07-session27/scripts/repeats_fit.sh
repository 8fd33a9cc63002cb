#!/usr/bin/env bash
# Session 27: does a longer profile grid (more interleaved passes) make the deep target's fit see its shape?
# Alternates repeats R1 and R2 (default 7 and 15), twice each, at the autotune's contexts for the bench workload;
# prints each grid's wall time and the target / draft fit (held-out error, tile, pair term).
set -u
cd "$(dirname "$0")/../../../.."
S=bench/cpu_results/2026-12-07-session27; OUT=${1:-$S/repeats}; mkdir -p "$OUT"
for i in 1 2; do
  for r in ${R1:-7} ${R2:-15}; do
    echo "$(date -u +%FT%TZ) repeats $r pass $i load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/load.log"
    t0=$(date +%s.%N)
    .venv/bin/saguaro profile --target saguaro_exec/assets/tiny/target-deep --contexts 45,109,173 --repeats "$r" \
      --threads 1 --no-link --no-beside --no-progress -o "$OUT/grid_r${r}_$i.json" > /dev/null 2>&1
    t1=$(date +%s.%N)
    .venv/bin/python - "$OUT/grid_r${r}_$i.json" "$(echo "$t1 - $t0" | bc)" <<'PY' | tee -a "$OUT/fits.txt"
import json, sys
from calibration.fit_latency import fit_latency, pool_repeats
d = json.load(open(sys.argv[1]))
out = [f"{sys.argv[1].split('/')[-1]} {float(sys.argv[2]):.1f} s:"]
for who in ("target", "draft"):
    m, i = fit_latency(pool_repeats([r for r in d["latency"] if r["who"] == who]))
    v = " ".join(f"K{k} {m(1, k + 1, 109) * 1e3:.3f}" for k in range(4, 9)) if who == "target" else ""
    out.append(f"{who} cv {i['cv_mape']:.3f} knots {i['knots']} tile {i['tile']} (p {i['tile_p'] or 1:.1g}) "
               f"pair p {i['pair_p'] or 1:.1g} {v}")
print(" | ".join(out))
PY
  done
done
