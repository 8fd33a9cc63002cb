"""Load-run prefills (AR and SD, knee-like rate) against timed prefills, interleaved A B A B in one process."""
import json, sys, time, types
from pathlib import Path
import numpy as np, torch
sys.path.insert(0, "/work/main")
from bench.bench_load import _prompt_ids, _stream, _specs, _profile
from bench.load_calibrate import run_once
from calibration.fit import run_of
from calibration.fit_prefill import prefill_rows
from saguaro_sim.load import write_trace
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_exec.model import load_model
from saguaro_exec.measure.prefill import time_prefills
torch.set_num_threads(1)
prof = _profile("/work/main/bench/cpu_results/2026-12-02-session13/refit-profiles/cpu-tinypair.json")
ids = _prompt_ids(); lens = [len(p) for p in ids]
specs = _specs(prof, ["ar", "sd"], 3, 4, 32, round(float(np.mean(lens))))
args = types.SimpleNamespace(protocol="reply", threads=1, seed=0)
tgt = load_model(tiny_pair_paths()[0])
out = {"timed": [], "load": {"ar": [], "sd": []}}
for rep in range(4):
    out["timed"].append(time_prefills(tgt, ids, (1, 2, 3, 4), repeats=5))
    for m in ("ar", "sd"):
        tr = write_trace(_stream(40.0, 96, lens, 32, rep), Path(f"/tmp/s13/tr_{rep}.jsonl"))
        rep_ = run_once(specs[m], prof, ids, 32, args, tr)
        rr = run_of(rep_.measurements)
        pts = prefill_rows(rr)
        by = {}
        for b, n, s in pts: by.setdefault(b, []).append(s)
        out["load"][m].append({b: [float(np.median(v)), len(v)] for b, v in sorted(by.items())})
        print(rep, m, out["load"][m][-1], flush=True)
    print(rep, "timed", [(b, round(s * 1e3, 2)) for b, _, s in out["timed"][-1]], flush=True)
json.dump(out, open("/tmp/s13/prefill_ab.json", "w"), indent=1)
