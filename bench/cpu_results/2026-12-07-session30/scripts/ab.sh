#!/bin/bash
# A/B of session 30's hit-fit change: the old checkout (eabbe37, /tmp/old) vs this one, interleaved
OUT=/work/main/bench/cpu_results/2026-12-07-session30/ab
mkdir -p $OUT
(cd /work/main && PY=/work/main/.venv/bin/python bash bench/quiet_suite.sh $OUT/warm warm)
for i in 1 2; do
  for step in exec_deep07_opt exec_deep_opt; do
    for side in old new; do
      dir=$([ $side = old ] && echo /tmp/old || echo /work/main)
      (cd $dir && PY=/work/main/.venv/bin/python REPEATS=7 bash bench/quiet_suite.sh $OUT/$side$i $step)
    done
  done
done
echo ALLDONE
