import sys, time, json
sys.path.insert(0, sys.argv[1])
from calibration import load_preset
from calibration.profile import Profile
from saguaro_sim.load import Lengths, best_schedule, poisson_stream, simulate_load
out = {}
for name in ("h100-llama70b-tp4-llama1b", "/work/main/bench/cpu_results/2026-12-03-session17/refit-profiles/cpu-tinypair.json"):
    p = Profile.from_json(name) if name.endswith(".json") else load_preset(name)
    sched = best_schedule(p, "ssd", 64, 512, 256)
    qps = 8.0 if "h100" in name else 40.0
    st = poisson_stream(qps, 10_000, Lengths(512, "lognormal", 0.5), Lengths(256, "lognormal", 0.5), seed=0)
    t0 = time.perf_counter(); r = simulate_load(p, sched, st, max_batch=64, seed=0); w = time.perf_counter() - t0
    out["gpu" if "h100" in name else "cpu-refit"] = (w, r.rounds, r.tpot_s["p50"])
print(json.dumps(out))
