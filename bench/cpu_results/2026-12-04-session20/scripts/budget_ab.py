"""Interleaved: SD@5 vs SSD K5 at exact budgets (the optimizer's profile), deep pair b1 T0, bench_exec's workload."""
import json, statistics, sys
from calibration import Profile
from saguaro_exec import RunConfig, run
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
from saguaro_sim import SpecConfig
from saguaro_sim.search import exact_schedules, memoized
prof = memoized(Profile.from_json(sys.argv[1]))
k = int(sys.argv[2]); budgets = [int(x) for x in sys.argv[3].split(",")]; R = int(sys.argv[4])
T = "saguaro_exec/assets/tiny/target-deep"
P = list(BUILTIN_PROMPTS[:4])
sch = exact_schedules(prof, k, budgets, 0.0, 1.0, "neural")
cfgs = {"sd@5": SpecConfig(mode="sd", k=5, batch_size=1)}
for b in budgets:
    f, fm = sch[b]
    cfgs[f"ssd k{k} B{b}"] = SpecConfig(mode="ssd", k=k, budget=b, fanout=f, fanout_miss=fm, backup="neural", batch_size=1)
rc = {n: RunConfig(spec=s, target=T, prompts=P, max_new_tokens=128) for n, s in cfgs.items()}
for n, c in rc.items():
    run(RunConfig(spec=c.spec, target=T, prompts=P[:1], max_new_tokens=8))
res = {n: [] for n in rc}
for i in range(R):
    for n, c in rc.items():
        r = run(c)
        s = r.summary()
        res[n].append({"tok_s": r.tokens_per_s, "hit": s.get("hit_rate"), "tpr": s.get("mean_tokens_per_round")})
out = {}
for n in rc:
    ts = [x["tok_s"] for x in res[n]]
    paired = statistics.median(a["tok_s"] / b["tok_s"] for a, b in zip(res[n], res["sd@5"]))
    out[n] = {"median": statistics.median(ts), "all": ts, "paired_vs_sd": paired,
              "hit": statistics.median([x["hit"] or 0 for x in res[n]]), "fanout": list(cfgs[n].fanout or [])}
    print(f"{n:14s} {statistics.median(ts):7.1f} tok/s  xSD {statistics.median(ts)/statistics.median(res['sd@5'] and [x['tok_s'] for x in res['sd@5']]):.3f} paired {paired:.3f} hit {out[n]['hit']:.3f} F={out[n]['fanout']}")
json.dump(out, open(sys.argv[5], "w"), indent=1)
