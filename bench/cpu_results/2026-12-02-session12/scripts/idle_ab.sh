# AR / SD after-idle ratios with sleep vs spin idle waits, interleaved
T=bench/cpu_results/2026-12-02-session12/bench_load-traces/light.jsonl
for i in 1 2; do for m in ar sd; do
 echo "== $m sleep $i"; .venv/bin/python bench/cpu_results/2026-12-02-session12/scripts/idle.py $m $T 1 | grep "^pos"
 echo "== $m spin $i"; SAGUARO_IDLE_SPIN=1 .venv/bin/python bench/cpu_results/2026-12-02-session12/scripts/idle.py $m $T 1 | grep "^pos"
done; done
