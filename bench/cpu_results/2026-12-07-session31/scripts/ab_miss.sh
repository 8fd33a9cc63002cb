#!/bin/bash
# Session 31: the miss-path change (old = HEAD before it, in the worktree /tmp/old) vs this checkout, interleaved
# old new old new over seeds, at T = 0.7 and T = 0; one JSON line per run.
OUT=${1:?out.jsonl}; : > $OUT
uptime >> ${OUT%.jsonl}.load; S=/work/main/bench/cpu_results/2026-12-07-session31/scripts/miss_path.py
for seed in 0 1 2 3 4 5; do for T in 0.7 0; do for side in old new; do
  dir=$([ $side = old ] && echo /tmp/old || echo /work/main)
  (cd $dir && PYTHONPATH=$dir /work/main/.venv/bin/python $S $T $seed 2>/dev/null | sed "s/^{/{\"side\": \"$side\", \"T\": $T, \"seed\": $seed, /") >> $OUT
done; done; done
uptime >> ${OUT%.jsonl}.load
