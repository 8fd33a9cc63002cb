"""The load simulator's cost of after_idle: 10,000 SSD requests at 1 req/s (most start after an idle gap) with the
shipped cpu-tinypair and with it plus the AR fit of 15:09 as after_idle, interleaved, 3 each."""
import dataclasses, time, statistics as st
from calibration import load_preset
from saguaro_sim import SpecConfig
from saguaro_sim.load import poisson_stream, simulate_load
base = load_preset("cpu-tinypair")
cold = dataclasses.replace(base, executor=base.executor.with_after_idle([0.58, 0.47, 0.40, 0.14, 0.18, 0.14]))
spec = SpecConfig(mode="ssd", k=3, budget=8, backup="neural")
st_ = poisson_stream(1.0, 10_000, 48, 64, seed=0)
res = {"without": [], "with": []}
for _ in range(3):
    for k, p in (("without", base), ("with", cold)):
        t = time.perf_counter(); r = simulate_load(p, spec, st_, max_batch=8, seed=0); res[k].append(time.perf_counter() - t)
        res[k + " tpot"] = r.tpot_s["p50"]
print({k: (round(st.median(v), 3) if isinstance(v, list) else round(v * 1e3, 4)) for k, v in res.items()})
