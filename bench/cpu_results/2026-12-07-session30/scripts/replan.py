"""Re-run an autotune's fit and optimize stages on its stored calibration runs with this checkout's code (the
offline A/B of a fit change: run it in a worktree of the old commit and in this one). Prints, per folder, the
config the optimizer picks, its predicted hit and tokens/s, and the predicted hit of the config the autotune ran.
Usage: PYTHONPATH=. python replan.py AUTOTUNE_DIR..."""
import glob
import json
import sys

from calibration.measurements import Measurements
from saguaro.pipeline import FULL, by_mode, fit_modes, pin, predicted, spec_of_row
from saguaro_sim.config import SpecConfig
from saguaro_sim.optimize import optimize
from saguaro_sim.search import Constraints
from saguaro_sim.workload import Workload

for d in sys.argv[1:]:
    doc = json.load(open(f"{d}/autotune.json"))
    grid = Measurements.from_json(f"{d}/measurements/grid.json")
    calib = [Measurements.from_json(p) for p in sorted(glob.glob(f"{d}/measurements/calibration_*.json"))]
    w = doc["workload"]
    workload = Workload(num_sequences=w["num_sequences"], output_tokens=w["output_tokens"],
                        prompt_tokens=w["prompt_tokens"])
    t, b = doc["temperature"], doc["batch_size"]
    profiles = fit_modes(grid, calib, "replan", t)
    cons = Constraints(k_range=(1, max(FULL["ks"])), max_budget=max(FULL["budgets"]), top_n=8, modes=("ssd",),
                       build_margin=doc.get("build_margin", 0.15))
    predictor, simulator = by_mode(profiles)
    plan = optimize(profiles["ssd"], workload, batch_size=b, temperature=t, objective=doc["objective"],
                    constraints=cons, seed=doc["seed"], predictor=predictor, simulator=simulator)
    best = pin(spec_of_row(plan.table[0]), profiles["ssd"], workload)
    pred, _ = predicted(profiles["ssd"], best, workload, doc["seed"])
    ran = SpecConfig.from_dict(doc["ssd_choice_spec"])
    pred_ran, _ = predicted(profiles["ssd"], ran, workload, doc["seed"])
    meas = next(c for c in doc["configs"] if c["name"] == doc["ssd_choice"])["measured"]
    sd = next(c for c in doc["configs"] if c["name"] == "SD")
    pred_sd, _ = predicted(profiles["sd"], SpecConfig.from_dict(sd["spec"]), workload, doc["seed"])
    print(json.dumps({"folder": "/".join(d.rstrip("/").split("/")[-3:]),
                      "pick": {"k": best.k, "fanout": list(best.fanout), "budget": best.budget, "backup": best.backup,
                               "hit": round(pred["hit_rate"], 3), "tok_s": round(pred["tokens_per_s"], 1)},
                      "ran": {"k": ran.k, "fanout": list(ran.fanout), "backup": ran.backup,
                              "pred_hit": round(pred_ran["hit_rate"], 3), "meas_hit": meas["hit_rate"],
                              "pred_tok_s": round(pred_ran["tokens_per_s"], 1), "meas_tok_s": round(meas["tokens_per_s"], 1)},
                      "sd": {"pred_tok_s": round(pred_sd["tokens_per_s"], 1),
                             "meas_tok_s": round(sd["measured"]["tokens_per_s"], 1)}}), flush=True)
