#!/usr/bin/env bash
# Session 15, second pass: load with the falling prefill line (same-day refit), then the deep pair's optimizer step
cd /work/main
OUT=bench/cpu_results/2026-12-03-session15-load2
mkdir -p $OUT
LOAD_PROFILE=bench/cpu_results/2026-12-03-session15/refit-profiles/cpu-tinypair.json REPEATS=7 bash bench/quiet_suite.sh $OUT warm load
REPEATS=7 bash bench/quiet_suite.sh bench/cpu_results/2026-12-03-session15-exec exec_deep_opt
echo CHAIN-DONE >> $OUT/load.log
