#!/usr/bin/env bash
# Session 16: warm, issue 13's deep b1 T0 step and tiny first (they decide most), then fidelity -> refit -> load
# (issue 16) on the same host, then T0.7, b4 and the hand-offs.
cd /work/main
OUT=bench/cpu_results/2026-12-03-session16
REPEATS=7 bash bench/quiet_suite.sh $OUT warm exec_deep_opt exec_tiny fidelity
D=$OUT/fidelity-runs
.venv/bin/saguaro calibrate $D/grid*.json $D/calib_*_p*.json --name cpu-tinypair -o $OUT/refit-profiles/cpu-tinypair.json > $OUT/refit.txt 2>&1
echo "refit rc=$?" >> $OUT/load.log
LOAD_PROFILE=$OUT/refit-profiles/cpu-tinypair.json REPEATS=7 bash bench/quiet_suite.sh $OUT load
REPEATS=7 bash bench/quiet_suite.sh $OUT exec_deep07_opt exec_deep4_opt handoff
echo CHAIN-DONE >> $OUT/load.log
