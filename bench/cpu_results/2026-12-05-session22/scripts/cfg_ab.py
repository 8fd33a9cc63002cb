"""Interleaved: SD@5 against SSD configurations given exactly (K, fan-out, fan-out on a miss, backup); deep pair
b1 T0, bench_exec's workload (4 builtin prompts x 128 tokens); per repeat tok/s and the per-round phases.
Usage: cfg_ab.py REPEATS OUT.json NAME=K:F:FM:BACKUP ...   (F, FM comma separated; FM '-' = F)"""
import json, statistics, sys
from saguaro_exec import RunConfig, run
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
from saguaro_sim import SpecConfig
R, OUT = int(sys.argv[1]), sys.argv[2]
T = "saguaro_exec/assets/tiny/target-deep"
P = list(BUILTIN_PROMPTS[:4])
cfgs = {"sd@5": SpecConfig(mode="sd", k=5, batch_size=1)}
for a in sys.argv[3:]:
    name, spec = a.split("=")
    k, f, fm, backup = spec.split(":")
    f = tuple(int(x) for x in f.split(","))
    fm = f if fm == "-" else tuple(int(x) for x in fm.split(","))
    cfgs[name] = SpecConfig(mode="ssd", k=int(k), fanout=f, fanout_miss=fm, backup=backup, batch_size=1)
rc = {n: RunConfig(spec=s, target=T, prompts=P, max_new_tokens=128) for n, s in cfgs.items()}
for n, c in rc.items():
    run(RunConfig(spec=c.spec, target=T, prompts=P[:1], max_new_tokens=8))
res = {n: [] for n in rc}
KEYS = ("verify", "wait", "backup", "glue", "fork", "tree", "round")
for i in range(R):
    for n, c in rc.items():
        rep = run(c)
        s, rows = rep.summary(), rep.measurements.rounds
        ph = {p + "_ms": 1e3 * statistics.fmean(r[p + "_s"] for r in rows) for p in KEYS[:-1] if p + "_s" in rows[0]}
        ph["round_ms"] = 1e3 * statistics.fmean(r["t1"] - r["t0"] for r in rows)
        res[n].append({"tok_s": s["tokens_per_s"], "hit": s.get("hit_rate"), "tpr": s.get("mean_tokens_per_round"), **ph})
sd = [x["tok_s"] for x in res["sd@5"]]
out = {}
for n in rc:
    xs = res[n]
    med = lambda key: statistics.median(x[key] for x in xs if x.get(key) is not None) if any(x.get(key) is not None for x in xs) else None  # noqa: E731
    out[n] = {"median": med("tok_s"), "paired_vs_sd": statistics.median(a["tok_s"] / b for a, b in zip(xs, sd)),
              "repeats": xs, **{k: med(k) for k in ("hit", "tpr") + tuple(p + "_ms" for p in KEYS)}}
    o = out[n]
    print(f"{n:10s} {o['median']:7.1f} tok/s xSD {o['median'] / statistics.median(sd):.3f} paired {o['paired_vs_sd']:.3f} "
          f"hit {o['hit'] or 0:.3f} tpr {o['tpr'] or 0:.2f} verify {o['verify_ms'] or 0:.3f} wait {o['wait_ms'] or 0:.3f} "
          f"round {o['round_ms'] or 0:.3f} build {sum(o[k] or 0 for k in ('glue_ms', 'fork_ms', 'tree_ms')):.3f}", flush=True)
json.dump(out, open(OUT, "w"), indent=1)
