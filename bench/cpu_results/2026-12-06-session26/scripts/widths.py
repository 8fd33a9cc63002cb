"""The deep target's forward at batch 1 against the number of new tokens (1..16), context 256, 1 thread:
interleaved passes (every width once per pass), medians. Is the verification's cost smooth in K+1, as the
profile's piecewise fit between the grid's widths 1, 3, 5, 7, 9 assumes?"""
import json
import os
import sys
import time

import numpy as np
import torch

from saguaro_exec.measure.microbench import forward_call
from saguaro_exec.model.loading import load_model

torch.set_num_threads(1)
which = sys.argv[1] if len(sys.argv) > 1 else "target-deep"
ctx = int(sys.argv[2]) if len(sys.argv) > 2 else 256
model = load_model(f"saguaro_exec/assets/tiny/{which}", device="cpu", dtype=torch.float32)
widths = list(range(1, int(os.environ.get("WMAX", "16")) + 1))
calls = {w: forward_call(model, 1, w, ctx, "cpu") for w in widths}
for c in calls.values():
    for _ in range(3):
        c()
times = {w: [] for w in widths}
for p in range(40):
    order = widths if p % 2 == 0 else widths[::-1]
    for w in order:
        t0 = time.perf_counter()
        calls[w]()
        times[w].append(time.perf_counter() - t0)
med = {w: float(np.median(v)) * 1e3 for w, v in times.items()}
for w in widths:
    print(f"{w:3d} {med[w]:.3f} ms  per token {med[w] / w:.3f}  p10 {np.percentile(times[w], 10) * 1e3:.3f} p90 {np.percentile(times[w], 90) * 1e3:.3f}")
print("load", os.getloadavg())
json.dump({"model": which, "context": ctx, "median_ms": med}, open(sys.argv[3], "w") if len(sys.argv) > 3 else sys.stdout)
