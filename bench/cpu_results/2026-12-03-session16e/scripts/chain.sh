#!/usr/bin/env bash
# Session 16, fifth pass (code at da01425; probe back to 1.5 ms): issue 13's deep b1 T0 and T0.7 optimizer steps and tiny.
cd /work/main
OUT=bench/cpu_results/2026-12-03-session16e
REPEATS=7 bash bench/quiet_suite.sh $OUT warm exec_deep_opt exec_deep07_opt exec_tiny
echo CHAIN-DONE >> $OUT/load.log
