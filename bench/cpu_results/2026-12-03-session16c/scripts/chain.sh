#!/usr/bin/env bash
# Session 16, third pass (code at c6411c0): the load check with pass 2's refit (the same executor code: 09054d3's
# masks), now also predicted with this hour's drift series beside the calibration hour's.
cd /work/main
OUT=bench/cpu_results/2026-12-03-session16c
LOAD_PROFILE=bench/cpu_results/2026-12-03-session16b/refit-profiles/cpu-tinypair.json REPEATS=7 bash bench/quiet_suite.sh $OUT warm load
echo CHAIN-DONE >> $OUT/load.log
