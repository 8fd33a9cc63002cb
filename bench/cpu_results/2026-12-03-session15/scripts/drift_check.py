import sys, dataclasses, json, numpy as np
sys.path.insert(0, '.')
from bench.bench_load import _profile, _stream, _specs, _prompt_ids
from saguaro_sim.load import simulate_load
prof = _profile(sys.argv[1])
ids = _prompt_ids(); lens = [len(p) for p in ids]
specs = _specs(prof, ["ar", "sd", "ssd"], 3, 4, 32, round(float(np.mean(lens))))
levels = json.load(open(sys.argv[2]))["levels_qps"]
ex = prof.executor
print("drift series:", len(ex.drift), "std %.3f" % np.std(ex.drift) if ex.drift else "")
for m, s in specs.items():
    for lvl, q in levels.items():
        out = []
        for variant, p in (("as is", prof), ("no drift", dataclasses.replace(prof, executor=ex.with_drift(()))),
                           ("no jitter/drift", None)):
            vals = []
            for seed in range(8):
                st = _stream(q, 96, lens, 32, seed)
                r = simulate_load(p or prof, s, st, max_batch=4, seed=seed, ssd_width="prefix", jitter=p is not None)
                vals.append((r.tpot_s["p50"], r.tpot_s["p99"]))
            a = np.median(np.asarray(vals), axis=0) * 1e3
            out.append(f"{variant}: p50 {a[0]:.2f} p99 {a[1]:.2f}")
        print(m, lvl, " | ".join(out))
