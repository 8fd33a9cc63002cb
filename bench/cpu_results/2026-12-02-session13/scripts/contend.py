"""Does the draft child's instruction set change how much it slows the target beside it?"""
import json, os, subprocess, sys, time
import torch
from saguaro_exec.measure.beside import beside_slowdown
A = "saguaro_exec/assets/tiny"
VARIANTS = {
    "default": {},
    "avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"},
    "sse": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41", "ATEN_CPU_CAPABILITY": "default"},
}
ALONE = r'''
import time, torch, numpy as np
from pathlib import Path
from saguaro_exec.measure.microbench import forward_call
from saguaro_exec.model import load_model
torch.set_num_threads(1)
f = forward_call(load_model(Path("%s/draft"), device="cpu", dtype=torch.float32), 1, 64, 128, "cpu")
for _ in range(10): f()
ts=[]
for _ in range(200):
    a=time.perf_counter(); f(); ts.append(time.perf_counter()-a)
print(np.median(ts)*1e3)
''' % A
torch.matmul(torch.randn(64, 64), torch.randn(64, 64))
base = dict(os.environ)
out = []
for rep in range(3):
    for name, env in VARIANTS.items():
        os.environ.clear(); os.environ.update(base); os.environ.update(env)
        alone = float(subprocess.run([sys.executable, "-c", ALONE], capture_output=True, text=True,
                                     env=dict(os.environ)).stdout.strip())
        r = beside_slowdown(f"{A}/target-deep", f"{A}/draft", target_tokens=6, draft_tokens=64, context=128)
        row = {"rep": rep, "variant": name, "draft64_alone_ms": alone, "slowdown_raw": r["raw"],
               "q1": r["q1"], "q3": r["q3"], "idle_ms": r["idle_s"] * 1e3, "busy_ms": r["busy_s"] * 1e3}
        print(json.dumps(row), flush=True); out.append(row)
os.environ.clear(); os.environ.update(base)
json.dump(out, open("/tmp/s13/contend.json", "w"), indent=1)
