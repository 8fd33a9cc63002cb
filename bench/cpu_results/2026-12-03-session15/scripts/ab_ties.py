"""Deep pair b1 T0, interleaved: the optimizer's choice against its near-ties (simulated within TOL of it, smaller
budget) and SD at K 3-5; tokens/s medians, paired ratios vs the best SD, per-round phases.
Usage: ab_ties.py AUTOTUNE_JSON REPEATS OUT_JSON"""
import json, statistics as st, sys
sys.path.insert(0, '.')
from saguaro_exec import RunConfig, run
from saguaro_sim.config import SpecConfig
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
TOL = 0.015
at, R, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
top = json.load(open(at))["optimizer"]["top"]
keys = ("mode", "k", "fanout", "fanout_miss", "budget", "sampler_c", "backup", "temperature", "batch_size")
best = top[0]
ties = [r for r in top if r["mode"] == "ssd" and r["tokens_per_s_per_seq"] >= (1 - TOL) * best["tokens_per_s_per_seq"]]
pick = sorted(ties, key=lambda r: (r["budget"], r["k"]))
chosen = {f"ssd rank{best['rank']} b{best['budget']}": best}
for r in pick[:2]:
    chosen.setdefault(f"ssd rank{r['rank']} b{r['budget']}", r)
DEEP = "saguaro_exec/assets/tiny/target-deep"
prompts = list(BUILTIN_PROMPTS[:4])
def spec(r):
    d = {k: r[k] for k in keys}
    d["fanout"], d["fanout_miss"] = tuple(d["fanout"]), tuple(d["fanout_miss"])
    return SpecConfig(**d)
specs = {f"sd@{k}": SpecConfig(mode="sd", k=k) for k in (3, 4, 5)}
specs.update({m: spec(r) for m, r in chosen.items()})
cfgs = {m: RunConfig(spec=s, prompts=prompts, max_new_tokens=128, target=DEEP, threads=1, seed=0) for m, s in specs.items()}
for c in cfgs.values():
    run(RunConfig(spec=c.spec, prompts=prompts[:1], max_new_tokens=8, target=DEEP, threads=1))
res = {m: [] for m in cfgs}
for i in range(R):
    for m, c in cfgs.items():
        rep = run(c)
        rows = rep.measurements.rounds
        ph = {p: 1e3 * st.mean(r.get(p, 0.0) for r in rows) for p in ("verify_s", "wait_s", "tree_s")}
        res[m].append(dict(tps=rep.tokens_per_s, **ph))
best_sd = max((m for m in res if m.startswith("sd@")), key=lambda m: st.median(x["tps"] for x in res[m]))
out = {"tol": TOL, "configs": {m: {k: chosen[m][k] for k in keys + ("rank", "tokens_per_s_per_seq")} for m in chosen}}
for m in res:
    tps = [x["tps"] for x in res[m]]
    paired = st.median(a["tps"] / b["tps"] for a, b in zip(res[m], res[best_sd]))
    med = lambda k: st.median(x[k] for x in res[m])
    out[m] = dict(tps=st.median(tps), vs_sd=st.median(tps) / st.median(x["tps"] for x in res[best_sd]), paired=paired,
                  verify_ms=med("verify_s"), wait_ms=med("wait_s"), tree_ms=med("tree_s"), all=tps)
    print(f"{m:18} {out[m]['tps']:7.1f} tok/s x{out[m]['vs_sd']:.2f} {best_sd} (paired x{paired:.2f}) verify {out[m]['verify_ms']:.2f} wait {out[m]['wait_ms']:.2f} tree {out[m]['tree_ms']:.2f}; all " + " ".join(f"{x:.0f}" for x in tps))
json.dump(out, open(out_path, "w"), indent=1)
