"""The optimizer's SSD choice on an autotune folder's own calibration (its measurements refitted as autotune
fits them) with and without the build margin, and each choice's predicted T_p (build / verification)."""
import json, sys
sys.path.insert(0, ".")
from saguaro.pipeline import by_mode, fit_modes, load_measurements, pin  # noqa: E402
from saguaro_sim import SpecConfig, Workload  # noqa: E402
from saguaro_sim.analytic import mean_context, round_times  # noqa: E402
from saguaro_sim.optimize import optimize  # noqa: E402
from saguaro_sim.search import Constraints  # noqa: E402

folder, b = sys.argv[1], int(sys.argv[2])
doc = json.load(open(f"{folder}/autotune.json"))
ms = load_measurements(folder)
grid = ms[0]
calib = [m for m, p in zip(ms, sorted(__import__("pathlib").Path(folder, "measurements").glob("*.json"),
                                      key=lambda p: (p.name != "grid.json", p.name))) if p.name.startswith("calibration")]
profiles = fit_modes(grid, calib, "margin-check", doc["temperature"])
wl = Workload(**doc["workload"])
pred, sim = by_mode(profiles)
out = {}
for m in (0.0, 0.15):
    cons = Constraints(k_range=(1, 8), max_budget=64, top_n=8, modes=("ssd",), build_margin=m)
    plan = optimize(profiles["ssd"], wl, batch_size=b, temperature=doc["temperature"], constraints=cons,
                    predictor=pred, simulator=sim)
    spec = pin(plan.best, profiles["ssd"], wl)
    rt = round_times(profiles["ssd"], spec, b, mean_context(wl), spec.backup == "fast")
    r = plan.table[0]
    out[m] = {"spec": spec.to_dict(), "T_p": (rt.build + rt.msg_cache) / (rt.verify + rt.msg_up),
              "sim": r["tokens_per_s_per_seq"], "sim_margin": r["margin_tokens_per_s_per_seq"]}
    print(f"margin {m}: k{spec.k} F={spec.fanout} miss={spec.fanout_miss} {spec.backup} budget {spec.budget} "
          f"pred T_p {out[m]['T_p']:.2f} sim {r['tokens_per_s_per_seq']:.0f} (with slow builds {r['margin_tokens_per_s_per_seq']:.0f})")
print(json.dumps({str(k): v for k, v in out.items()}))
