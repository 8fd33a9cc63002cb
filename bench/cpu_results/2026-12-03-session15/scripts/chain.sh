#!/usr/bin/env bash
# Session 15: warm the host, then fidelity -> refit -> load on the same quiet host
cd /work/main
OUT=bench/cpu_results/2026-12-03-session15
mkdir -p $OUT/refit-profiles
bash bench/quiet_suite.sh $OUT warm fidelity
D=$OUT/fidelity-runs
.venv/bin/saguaro calibrate $D/grid*.json $D/calib_*_p*.json --name cpu-tinypair -o $OUT/refit-profiles/cpu-tinypair.json > $OUT/refit.txt 2>&1
echo "refit rc=$?" >> $OUT/load.log
LOAD_PROFILE=$OUT/refit-profiles/cpu-tinypair.json REPEATS=7 bash bench/quiet_suite.sh $OUT load
echo CHAIN-DONE >> $OUT/load.log
