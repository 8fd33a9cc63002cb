"""Interleaved: the executor's AR step (CachedModel.last_logits) vs the microbenchmark's forward, at 1 and 2 rows."""
import time, torch, numpy as np
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_exec.model import load_model
from saguaro_exec.engine.cached_model import CachedModel
from saguaro_exec.measure.microbench import forward_call
torch.set_num_threads(1)
tgt = load_model(str(tiny_pair_paths()[0]))
ctx = 100
def ex_call(b):
    cm = CachedModel(tgt, b, 256)
    cm.extend([[1] * ctx] * b, [0] * b)
    return lambda: cm.last_logits([[5]] * b, torch.full((b,), ctx))
def ex_mask(b):
    from saguaro_exec.model import causal_mask
    from saguaro_exec.model.lean_forward import additive_mask
    return lambda: additive_mask(causal_mask(torch.tensor([ctx] * b), 1, ctx + 1), torch.float32)
calls = {f"exec b{b}": ex_call(b) for b in (1, 2, 4)} | {f"micro b{b}": forward_call(tgt, b, 1, ctx, "cpu") for b in (1, 2, 4)} | {f"mask b{b}": ex_mask(b) for b in (2,)}
t = {k: [] for k in calls}
with torch.inference_mode():
    for k, c in calls.items():
        for _ in range(20): c()
    for rep in range(300):
        for k, c in calls.items():
            t0 = time.perf_counter(); c(); t[k].append(time.perf_counter() - t0)
for k, v in t.items():
    print(f"{k:10s} median {1e3*np.median(v):.3f} ms  p10 {1e3*np.percentile(v,10):.3f}")
