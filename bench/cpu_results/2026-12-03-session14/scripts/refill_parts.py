"""What a load run's refill time (prefill_s) holds beyond the prefill forward: AR at the knee-like rate, the
verifier's prefill_rows / move_row timed inside the run (wrapped), against timed prefills, interleaved."""
import json, sys, time, types
from pathlib import Path
import numpy as np, torch
sys.path.insert(0, "/work/main")
from bench.bench_load import _prompt_ids, _stream, _specs, _profile
from bench.load_calibrate import run_once
from saguaro_sim.load import write_trace
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_exec.model import load_model
from saguaro_exec.measure.prefill import time_prefills
from saguaro_exec.engine import cached_model as cm
torch.set_num_threads(1)
prof = _profile(sys.argv[1])
qps = float(sys.argv[2]) if len(sys.argv) > 2 else 90.0
ids = _prompt_ids(); lens = [len(p) for p in ids]
specs = _specs(prof, ["ar"], 3, 4, 32, round(float(np.mean(lens))))
args = types.SimpleNamespace(protocol="reply", threads=1, seed=0)
rec = {"prefill_rows": [], "move_row": []}
orig_p, orig_m = cm.CachedModel.prefill_rows, cm.CachedModel.move_row
def p(self, rows, chunks):
    t0 = time.perf_counter(); orig_p(self, rows, chunks); rec["prefill_rows"].append((len(rows), time.perf_counter() - t0))
def m(self, a, b):
    t0 = time.perf_counter(); orig_m(self, a, b); rec["move_row"].append(time.perf_counter() - t0)
tgt = load_model(tiny_pair_paths()[0])
out = []
for rep in range(4):
    timed = time_prefills(tgt, ids, (1, 2, 3, 4), repeats=5)
    cm.CachedModel.prefill_rows, cm.CachedModel.move_row = p, m
    for k in rec: rec[k].clear()
    tr = write_trace(_stream(qps, 96, lens, 32, rep), Path(f"/tmp/s14/tr_{rep}.jsonl"))
    r = run_once(specs["ar"], prof, ids, 32, args, tr)
    cm.CachedModel.prefill_rows, cm.CachedModel.move_row = orig_p, orig_m
    rows = [x for x in r.measurements.rounds if x.get("refill")]
    pre_s = [float(x["prefill_s"]) for x in rows]
    by = {}
    for n, s in rec["prefill_rows"]: by.setdefault(n, []).append(s)
    res = dict(refills=len(rows), refill_s_med=float(np.median(pre_s)), refill_s_sum=sum(pre_s),
               prefill_rows_sum=sum(s for _, s in rec["prefill_rows"]), moves=len(rec["move_row"]),
               move_sum=sum(rec["move_row"]),
               prefill_by_rows={n: [float(np.median(v)) * 1e3, len(v)] for n, v in sorted(by.items())},
               timed_ms={b: s * 1e3 for b, _, s in timed})
    out.append(res)
    print(rep, json.dumps(res), flush=True)
json.dump(out, open("/tmp/s14/refill_parts.json", "w"), indent=1)
