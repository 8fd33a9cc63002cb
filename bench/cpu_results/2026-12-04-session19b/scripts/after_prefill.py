"""Do load-mode rounds right after a prefill run slower than the others (same width)? AR/SD, light and knee
traces of the session-19 pass, the session's refit profile; each round measured / charged by the load
simulator's cost model, grouped by rounds since the last prefill (0 = a prefill just before it) and idle gaps."""
import json, sys, types
from collections import defaultdict
from pathlib import Path
import numpy as np
sys.path.insert(0, ".")
from bench.bench_load import _prompt_ids, _specs
from bench.load_calibrate import run_once
from calibration.profile import Profile
from saguaro_sim.load.costs import round_cost

S19 = Path("bench/cpu_results/2026-12-03-session19")
prof = Profile.from_json(str(S19 / "refit-profiles/cpu-tinypair.json"))
ids = _prompt_ids()
lens = [len(p) for p in ids]
specs = _specs(prof, ["ar", "sd"], 3, 4, 32, round(float(np.mean(lens))))
args = types.SimpleNamespace(protocol="reply", threads=1, seed=0)
modes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["ar", "sd"]
levels = sys.argv[2].split(",") if len(sys.argv) > 2 else ["light", "knee"]
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
out = defaultdict(list)
for rep in range(reps):
    for lvl in levels:
        for m in modes:
            r = run_once(specs[m], prof, ids, 32, args, S19 / "bench_load-traces" / f"{lvl}.jsonl")
            rounds = r.measurements.rounds
            since = 99
            prev_t1 = None
            for a in rounds:
                idle = prev_t1 is not None and a["t0"] - prev_t1 - float(a.get("prefill_s", 0.0)) > 0.002
                since = 0 if a.get("refill") else since + 1
                if idle:
                    since = 99   # idle gaps apart
                ctx = float(np.mean(a["context"])) if a["context"] else 50.0
                c = round_cost(prof, specs[m], int(a["width"]), ctx, False)
                ratio = (a["t1"] - a["t0"]) / (c.base_s - c.loop_s)
                key = (m, lvl, "idle" if since == 99 else min(since, 4))
                out[key].append(ratio)
                prev_t1 = a["t1"]
            print(m, lvl, rep, "done", flush=True)
res = {}
for key in sorted(out, key=str):
    v = np.array(out[key])
    res[" ".join(map(str, key))] = {"n": len(v), "median": float(np.median(v)), "mean": float(v.mean())}
    print(f"{key!s:30} n={len(v):5d} median {np.median(v):.3f} mean {v.mean():.3f}")
json.dump(res, open(sys.argv[4] if len(sys.argv) > 4 else "/tmp/after_prefill.json", "w"), indent=1)
