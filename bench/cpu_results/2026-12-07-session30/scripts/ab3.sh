#!/bin/bash
OUT=/work/main/bench/cpu_results/2026-12-07-session30/ab
for step in exec_deep4_opt exec_deep07_opt; do
  for side in old new; do
    dir=$([ $side = old ] && echo /tmp/old || echo /work/main)
    (cd $dir && PY=/work/main/.venv/bin/python REPEATS=7 bash bench/quiet_suite.sh $OUT/${side}3 $step)
  done
done
echo ALLDONE
