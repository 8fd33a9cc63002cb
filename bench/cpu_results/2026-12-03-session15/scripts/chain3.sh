#!/usr/bin/env bash
# Session 15, third pass (host a little faster: probe 1.8 ms): the deep pair's optimizer step, tiny, then the near-ties
cd /work/main
OUT=bench/cpu_results/2026-12-03-session15-exec2
REPEATS=7 bash bench/quiet_suite.sh $OUT warm exec_deep_opt exec_tiny
.venv/bin/python bench/cpu_results/2026-12-03-session15/scripts/ab_ties.py $OUT/autotune_T0/autotune.json 7 $OUT/ab_ties.json > $OUT/ab_ties.txt 2>&1
echo "rc=$? ab_ties" >> $OUT/load.log
echo CHAIN-DONE >> $OUT/load.log
