"""Interleaved: AR fixed batch 4, AR fixed batch 1, AR light load; rounds measured/charged (refit profile), light by position."""
import sys, statistics as st, dataclasses
import numpy as np
sys.path.insert(0, '.')
from saguaro_exec import RunConfig, run
from saguaro_sim.load.costs import round_cost
from bench.bench_load import _prompt_ids, _specs, _profile
mode = sys.argv[1] if len(sys.argv) > 1 else "ar"
R = int(sys.argv[2]) if len(sys.argv) > 2 else 5
prof = _profile("bench/cpu_results/2026-12-02-session11/refit-profiles/cpu-tinypair.json")
ids = _prompt_ids(); plen = float(np.mean([len(p) for p in ids]))
spec4 = _specs(prof, [mode], 3, 4, 32, round(plen))[mode]
spec1 = dataclasses.replace(spec4, batch_size=1)
trace = "bench/cpu_results/2026-12-02-session11/bench_load-traces/light.jsonl"
def ratios(rounds, spec):
    out = []; prev = None; pos = 0
    for rd in rounds:
        idle = prev is None or not (set(prev["seq"]) & set(rd["seq"]))
        pos = 0 if idle else pos + 1
        ctx = float(np.mean(rd["context"])) if rd["context"] else plen
        c = round_cost(prof, spec, int(rd["width"]), ctx, spec.backup == "fast")
        out.append((pos, int(rd["width"]), (rd["t1"] - rd["t0"]) / (c.base_s - c.loop_s)))
        prev = rd
    return out
res = {"fixed b4": [], "fixed b1": [], "light w1 pos>=8": [], "light w1 pos0-4": [], "light all": []}
for i in range(R):
    r4 = ratios(run(RunConfig(spec=spec4, prompts=ids[:8], max_new_tokens=32, profile=prof, threads=1)).measurements.rounds, spec4)
    r1 = ratios(run(RunConfig(spec=spec1, prompts=ids[:4], max_new_tokens=32, profile=prof, threads=1)).measurements.rounds, spec1)
    rl = ratios(run(RunConfig(spec=spec4, prompts=ids, max_new_tokens=32, profile=prof, threads=1, arrivals={"trace": trace})).measurements.rounds, spec4)
    res["fixed b4"].append(st.median(x[2] for x in r4 if x[1] == 4) if any(x[1] == 4 for x in r4) else st.median(x[2] for x in r4))
    res["fixed b1"].append(st.median(x[2] for x in r1))
    res["light w1 pos>=8"].append(st.median(x[2] for x in rl if x[1] == 1 and x[0] >= 8))
    res["light w1 pos0-4"].append(st.median(x[2] for x in rl if x[1] == 1 and x[0] <= 4))
    res["light all"].append(sum(x[2] for x in rl) / len(rl))
for k, v in res.items():
    print(f"{k:18} median {st.median(v):.3f}  repeats " + " ".join(f"{x:.2f}" for x in v))
print("paired light w1 steady / fixed b1:", round(st.median(a / b for a, b in zip(res["light w1 pos>=8"], res["fixed b1"])), 3),
      " fixed b1 / fixed b4:", round(st.median(a / b for a, b in zip(res["fixed b1"], res["fixed b4"])), 3))
