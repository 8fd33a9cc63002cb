"""The optimizer's choices on one autotune folder's measurements, fitted two ways (session 27):
 new: as autotune fits them now (every verify width 1..9 in the grid; the fit's attention-pair term and the
      partial-block tail, calibration/latency.py);
 old: as before: the grid's odd widths only (1, 3, 5, 7, 9 and the draft's tree widths), no pair term, no tail.
Prints the SD and SSD choices, the predicted verify time per K at batch 1 and the SD prediction per K.
Usage: python tile_choice.py AUTOTUNE_FOLDER BATCH OUT.json"""
import json
import sys
from functools import partial

sys.path.insert(0, ".")
import calibration.fit  # noqa: E402,F401
import calibration.fit_latency as fl  # noqa: E402
from calibration import Measurements  # noqa: E402
from saguaro.pipeline import by_mode, fit_modes, load_measurements, pin  # noqa: E402
from saguaro_sim import SpecConfig, Workload  # noqa: E402
from saguaro_sim.analytic import predict  # noqa: E402
from saguaro_sim.optimize import optimize  # noqa: E402
from saguaro_sim.search import Constraints  # noqa: E402

folder, b, out_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
doc = json.load(open(f"{folder}/autotune.json"))
ms = load_measurements(folder)
grid, runs = ms[0], ms[1:]
wl = Workload(**doc["workload"])
T = doc["temperature"]
design = fl._design


def old_design(x, z, knots, tile=None):
    a = design(x, z, knots, tile)
    a[:, -1] = 0.0          # no pair term: lsq leaves a zero column out
    return a


def odd_grid(g: Measurements) -> Measurements:
    keep = {"target": {1, 3, 5, 7, 9}, "draft": {1, 3, 5, 7, 9, 8, 16, 32, 64}}
    d = g.to_dict()
    d["latency"] = [r for r in d["latency"] if r["new_tokens"] in keep[r["who"]]]
    return Measurements.from_dict(d)


cfit = sys.modules["calibration.fit"]   # the module: the package's `fit` attribute is the function
res = {}
for way in ("old", "new"):
    if way == "old":
        fl._design = old_design
        cfit.fit_latency = partial(fl.fit_latency, tiles=False)
        g = odd_grid(grid)
    else:
        fl._design = design
        cfit.fit_latency = fl.fit_latency
        g = grid
    profiles = fit_modes(g, runs, f"tile-{way}", T)
    fl._design = design
    pred, sim = by_mode(profiles)
    cons = Constraints(k_range=(1, 8), max_budget=64, top_n=8, modes=("ssd", "sd"), build_margin=0.15)
    plan = optimize(profiles["ssd"], wl, batch_size=b, temperature=T, constraints=cons, predictor=pred,
                    simulator=sim)
    best = {m: next((r for r in plan.table if r["mode"] == m), None) for m in ("ssd", "sd")}
    tgt = profiles["ssd"].target
    verify = {k: tgt(b, k + 1, 256) * 1e3 for k in range(1, 9)}
    sd_pred = {k: predict(profiles["sd"], SpecConfig(mode="sd", k=k, batch_size=b, temperature=T), wl).throughput
               for k in range(2, 9)}
    spec = pin(plan.best, profiles["ssd"], wl)
    res[way] = {"fit": profiles["ssd"].provenance.get("target_fit"), "verify_ms_ctx256": verify,
                "sd_pred_tokens_per_s": sd_pred, "best": spec.to_dict(),
                "table_top": [{k: v for k, v in r.items() if k in ("mode", "k", "fanout", "budget", "backup",
                                                                    "tokens_per_s_per_seq")} for r in plan.table[:6]]}
    print(f"{way}: target fit {res[way]['fit'].get('form')} knots {res[way]['fit'].get('knots')} "
          f"tile {res[way]['fit'].get('tile')} cv {res[way]['fit'].get('cv_mape'):.3f}")
    print("  verify ms (b%d, ctx 256) by K: " % b + " ".join(f"K{k} {v:.3f}" for k, v in verify.items()))
    print("  SD predicted tok/s by K: " + " ".join(f"K{k} {v:.0f}" for k, v in sd_pred.items()))
    print(f"  best: {spec.mode} k{spec.k} F={spec.fanout} miss={spec.fanout_miss} {spec.backup}")
    for r in res[way]["table_top"]:
        print("   ", r)
json.dump(res, open(out_path, "w"), indent=1, default=str)
