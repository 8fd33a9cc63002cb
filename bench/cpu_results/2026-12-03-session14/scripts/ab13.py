"""Interleaved configs on the deep pair b1 T0: tokens/s medians, paired ratios vs the best SD, per-round phases."""
import sys, statistics as st, json
sys.path.insert(0, '.')
from saguaro_exec import RunConfig, run
from saguaro_sim.config import SpecConfig
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
R = int(sys.argv[1]) if len(sys.argv) > 1 else 7
T = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
DEEP = "saguaro_exec/assets/tiny/target-deep"
prompts = list(BUILTIN_PROMPTS[:4])
def ssd(k, fan, backup="neural"):
    return SpecConfig(mode="ssd", k=k, fanout=tuple(fan), batch_size=1, backup=backup, temperature=T)
specs = {
  "sd@4": SpecConfig(mode="sd", k=4, batch_size=1, temperature=T),
  "sd@5": SpecConfig(mode="sd", k=5, batch_size=1, temperature=T),
  "sd@3": SpecConfig(mode="sd", k=3, batch_size=1, temperature=T),
  "ssd k4 opt40": ssd(4, [12,3,12,3,10]),
  "ssd k4 F21": ssd(4, [6,2,6,2,5]),
  "ssd k4 F16": ssd(4, [4,2,4,2,4]),
  "ssd k5 F18": ssd(5, [4,2,4,2,3,3]),
  "ssd k3 F16": ssd(3, [4,4,4,4]),
}
cfgs = {m: RunConfig(spec=s, prompts=prompts, max_new_tokens=128, target=DEEP, threads=1, seed=0) for m, s in specs.items()}
for c in cfgs.values():
    run(RunConfig(spec=c.spec, prompts=prompts[:1], max_new_tokens=8, target=DEEP, threads=1))
res = {m: [] for m in cfgs}
import dataclasses
for i in range(R):
    for m, c in cfgs.items():
        rep = run(c if T == 0 else dataclasses.replace(c, seed=i))
        rows = rep.measurements.rounds
        ph = {p: 1e3 * st.mean(r.get(p, 0.0) for r in rows) for p in ("verify_s", "wait_s", "draft_reply_s", "tree_s", "glue_s", "fork_s")}
        tpr = st.mean(sum(a + 1 for a in r["accepted"]) / len(r["accepted"]) for r in rows)
        res[m].append(dict(tps=rep.tokens_per_s, tpr=tpr, round=1e3 * st.mean(r["t1"] - r["t0"] for r in rows), **ph))
best_sd = max(("sd@3", "sd@4", "sd@5"), key=lambda m: st.median(x["tps"] for x in res[m]))
out = {}
for m in res:
    tps = [x["tps"] for x in res[m]]
    paired = st.median(a["tps"] / b["tps"] for a, b in zip(res[m], res[best_sd]))
    med = lambda k: st.median(x[k] for x in res[m])
    out[m] = dict(tps=st.median(tps), vs_sd=st.median(tps) / st.median(x["tps"] for x in res[best_sd]), paired=paired,
                  round_ms=med("round"), verify_ms=med("verify_s"), wait_ms=med("wait_s"), draft_ms=med("draft_reply_s"), tree_ms=med("tree_s"), tok_round=med("tpr"), all=tps)
    print(f"{m:11} {out[m]['tps']:7.1f} tok/s x{out[m]['vs_sd']:.2f} {best_sd} (paired x{paired:.2f}) round {out[m]['round_ms']:.2f} ms = verify {out[m]['verify_ms']:.2f} wait {out[m]['wait_ms']:.2f} draft {out[m]['draft_ms']:.2f} tree {out[m]['tree_ms']:.2f}; tok/round {out[m]['tok_round']:.2f}; all " + " ".join(f"{x:.0f}" for x in tps))
if len(sys.argv) > 3:
    json.dump(out, open(sys.argv[3], "w"), indent=1)
