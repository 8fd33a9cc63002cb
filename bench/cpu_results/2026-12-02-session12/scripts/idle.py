"""Light-load run: round time measured / charged by position after an idle gap (no live row before it)."""
import sys, statistics as st
import numpy as np
sys.path.insert(0, '.')
from saguaro_exec import RunConfig, run
from saguaro_sim.load.costs import round_cost
from bench.bench_load import _prompt_ids, _specs, _profile
mode = sys.argv[1]; trace = sys.argv[2]; reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
prof = _profile("bench/cpu_results/2026-12-02-session12/refit-profiles/cpu-tinypair.json")
ids = _prompt_ids()
spec = _specs(prof, [mode], 3, 4, 32, round(float(np.mean([len(p) for p in ids]))))[mode]
by_pos = {}; by_gap = {}
for r in range(reps):
    rep = run(RunConfig(spec=spec, prompts=ids, max_new_tokens=32, arrivals={"trace": trace}, profile=prof, threads=1, seed=0))
    rounds = rep.measurements.rounds
    pos = 0; prev = None
    for rd in rounds:
        gap = None if prev is None else rd["t0"] - prev["t1"] - float(rd.get("prefill_s", 0.0))
        idle = prev is None or not (set(prev["seq"]) & set(rd["seq"]))
        pos = 0 if idle else pos + 1
        if idle and gap is not None:
            g = 1e3 * gap; b = '<2ms' if g < 2 else '2-10ms' if g < 10 else '10-30ms' if g < 30 else '>30ms'
            by_gap.setdefault(b, []).append(None)
            cur = b
        if pos < 3 and gap is not None and 'cur' in dir():
            by_gap.setdefault((cur, pos), []).append(None)
        ctx = float(np.mean(rd["context"])) if rd["context"] else 30.0
        c = round_cost(prof, spec, int(rd["width"]), ctx, spec.backup == "fast")
        ratio = (rd["t1"] - rd["t0"]) / (c.base_s - c.loop_s)
        if 'cur' in dir() and pos < 3: by_gap[(cur, pos)][-1] = ratio
        if int(rd["width"]) == 1:
            by_pos.setdefault(min(pos, 8), []).append(ratio)
        prev = rd
    print("rep", r, "rounds", len(rounds))
for k in sorted(by_pos):
    print(f"pos {k}{'+' if k == 8 else ''}: n {len(by_pos[k])} measured/charged median {st.median(by_pos[k]):.3f}")

for k in sorted(x for x in by_gap if isinstance(x, tuple)):
    v=[r for r in by_gap[k] if r is not None]
    print(k, len(v), round(st.median(v),3) if v else None)
