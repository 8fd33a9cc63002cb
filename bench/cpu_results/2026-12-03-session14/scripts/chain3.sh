#!/usr/bin/env bash
cd /work/main
OUT=bench/cpu_results/2026-12-03-session14-exec
REPEATS=9 bash bench/quiet_suite.sh $OUT warm exec_deep_opt exec_deep07_opt exec_deep4_opt exec_tiny
echo CHAIN-DONE >> $OUT/load.log
