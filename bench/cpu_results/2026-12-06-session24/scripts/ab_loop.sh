#!/usr/bin/env bash
# Interleaved old (worktree /tmp/old) / new (/work/main) runs of ab_handoff.py; one JSON line per run.
# Usage: ab_loop.sh N OUT.jsonl
S=/work/main/bench/cpu_results/2026-12-06-session24/scripts/ab_handoff.py
for i in $(seq "$1"); do
  for v in old new; do
    d=/work/main; [ $v = old ] && d=/tmp/old
    echo "{\"v\": \"$v\", \"i\": $i, \"load\": \"$(cut -d' ' -f1 /proc/loadavg)\", \"r\": $(cd $d && PYTHONPATH=$d /work/main/.venv/bin/python $S 2>/dev/null | tail -1)}" >> "$2"
  done
done
