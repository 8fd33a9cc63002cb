#!/usr/bin/env bash
# Session 17, third pass (code at 58a5bb4, the same model as passes 1-2): fidelity -> refit ->
# load (issue 16), then the deep pair's optimizer choices and the tiny pair (issue 13).
cd /work/main
OUT=bench/cpu_results/2026-12-03-session17c
REPEATS=7 bash bench/quiet_suite.sh $OUT warm fidelity
D=$OUT/fidelity-runs
.venv/bin/saguaro calibrate $D/grid*.json $D/calib_*_p*.json --name cpu-tinypair -o $OUT/refit-profiles/cpu-tinypair.json > $OUT/refit.txt 2>&1
echo "refit rc=$?" >> $OUT/load.log
LOAD_PROFILE=$OUT/refit-profiles/cpu-tinypair.json REPEATS=7 bash bench/quiet_suite.sh $OUT load
REPEATS=7 bash bench/quiet_suite.sh $OUT exec_deep4_opt exec_deep_opt
echo CHAIN-DONE >> $OUT/load.log
