"""Interleaved: SD@5 vs SSD at (K, budget) pairs with the profile's exact fan-outs; deep pair b1 T0, bench_exec's
workload (4 builtin prompts x 128 tokens). Usage: kb_scan.py PROFILE "5:24,5:36,7:32" REPEATS OUT.json"""
import json, statistics, sys
from calibration import Profile
from saguaro_exec import RunConfig, run
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
from saguaro_sim import SpecConfig
from saguaro_sim.search import exact_schedules, memoized
prof = memoized(Profile.from_json(sys.argv[1]))
pairs = [tuple(int(v) for v in p.split(":")) for p in sys.argv[2].split(",")]
R = int(sys.argv[3])
T = "saguaro_exec/assets/tiny/target-deep"
P = list(BUILTIN_PROMPTS[:4])
cfgs = {"sd@5": SpecConfig(mode="sd", k=5, batch_size=1)}
for k, b in pairs:
    f, fm = exact_schedules(prof, k, [b], 0.0, 1.0, "neural")[b]
    cfgs[f"ssd k{k} B{b}"] = SpecConfig(mode="ssd", k=k, budget=b, fanout=f, fanout_miss=fm, backup="neural", batch_size=1)
rc = {n: RunConfig(spec=s, target=T, prompts=P, max_new_tokens=128) for n, s in cfgs.items()}
for n, c in rc.items():
    run(RunConfig(spec=c.spec, target=T, prompts=P[:1], max_new_tokens=8))
res = {n: [] for n in rc}
for i in range(R):
    for n, c in rc.items():
        r = run(c)
        s = r.summary()
        res[n].append({"tok_s": r.tokens_per_s, "hit": s.get("hit_rate"), "tpr": s.get("mean_tokens_per_round"),
                       "phases": {p: s.get(p) for p in ("verify_ms", "wait_ms", "backup_ms", "tree_ms") if p in s}})
out = {}
sd = statistics.median(x["tok_s"] for x in res["sd@5"])
for n in rc:
    ts = [x["tok_s"] for x in res[n]]
    paired = statistics.median(a["tok_s"] / b["tok_s"] for a, b in zip(res[n], res["sd@5"]))
    out[n] = {"median": statistics.median(ts), "all": ts, "paired_vs_sd": paired,
              "hit": statistics.median([x["hit"] or 0 for x in res[n]]),
              "tok_per_round": statistics.median([x["tpr"] or 0 for x in res[n]]), "fanout": list(cfgs[n].fanout or [])}
    print(f"{n:14s} {out[n]['median']:7.1f} tok/s  xSD {out[n]['median']/sd:.3f} paired {paired:.3f} "
          f"hit {out[n]['hit']:.3f} tpr {out[n]['tok_per_round']:.2f} F={out[n]['fanout']}", flush=True)
json.dump(out, open(sys.argv[4], "w"), indent=1)
