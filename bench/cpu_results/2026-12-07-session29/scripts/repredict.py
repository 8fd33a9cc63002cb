"""Re-predict a bench_load result's cells with this checkout's load simulator and with another engine file
(the A/B of a simulator change on the same measurements). Usage: PYTHONPATH=.:bench python repredict.py
BENCH_LOAD_JSON OLD_ENGINE_PY (the JSON must carry predict_profiles: bench_load since session 29)."""
import importlib.util
import json
import sys
import types
from pathlib import Path

from bench_load import _predict
from load_compare import compare_row, target_counts

import saguaro_sim.load.serve as serve
from calibration.profile import Profile
from saguaro_sim.config import SpecConfig
from saguaro_sim.load.stream import load_trace

d = json.load(open(sys.argv[1]))
spec_old = importlib.util.spec_from_file_location("engine_old", sys.argv[2])
old = importlib.util.module_from_spec(spec_old)
sys.modules["engine_old"] = old   # dataclasses look their module up
spec_old.loader.exec_module(old)
new_replica = serve.Replica
profiles = {m: Profile.from_dict(p) for m, p in d["predict_profiles"].items()}
specs = {m: SpecConfig(**s) for m, s in d["specs"].items()}
args = types.SimpleNamespace(batch=d["batch"], seed=0, ssd_width=d["ssd_width"])
out = {}
for name, replica in (("boundary (new)", new_replica), ("eager (old)", old.Replica)):
    serve.Replica = replica
    rows = []
    for r in d["rows"]:
        m, lvl = r["mode"], r["level"]
        pred = _predict(profiles[m], specs[m], load_trace(Path(d["traces"][lvl])), args)
        meas = {k: r[k]["measured"] for k in ("tpot_p50_s", "tpot_p99_s", "throughput")}
        spread = {k: r[k]["spread"] for k in meas}
        row = compare_row(m, lvl, r["qps"], pred, meas, spread, r["repeats"])
        rows.append(row)
        print(f"{name:15s} {m:4s} {lvl:10s} " + " ".join(
            f"{k}: {row[k]['predicted'] * (1e3 if 'tpot' in k else 1):8.3f}/{meas[k] * (1e3 if 'tpot' in k else 1):8.3f} "
            f"{100 * row[k]['rel_error']:+6.1f}%" for k in meas) + f" prefills {pred['phases']['prefills']}")
    c = target_counts(rows)
    out[name] = {"plain": c["plain"], "beyond_noise": c["plain_beyond_noise"],
                 "cells": [{k: r[k] for k in ("mode", "level")} | {m: r[m]["rel_error"] for m in
                           ("tpot_p50_s", "tpot_p99_s", "throughput")} for r in rows]}
    print(name, "plainly", c["plain"], "beyond noise", c["plain_beyond_noise"])
serve.Replica = new_replica
if len(sys.argv) > 3:
    json.dump(out, open(sys.argv[3], "w"), indent=1)
