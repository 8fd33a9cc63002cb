#!/usr/bin/env bash
# Session 16, fourth pass (code at ff48373: the hour series from one run per mode of all 96 requests): the load check with pass 2's refit (the same executor code: 09054d3's
# masks), now also predicted with this hour's drift series beside the calibration hour's.
cd /work/main
OUT=bench/cpu_results/2026-12-03-session16d
LOAD_PROFILE=bench/cpu_results/2026-12-03-session16b/refit-profiles/cpu-tinypair.json REPEATS=7 bash bench/quiet_suite.sh $OUT warm load
echo CHAIN-DONE >> $OUT/load.log
