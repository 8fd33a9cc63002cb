"""The draft-beside-target slowdown (saguaro_exec/measure/beside.py) at batch 1 and 4, interleaved: deep target,
6-token verification, 24-token tree step per row (the deep pair's b1 choice k5 budget 24)."""
import json, sys
from saguaro_exec.io.assets import tiny_pair_paths
from saguaro_exec.measure.beside import beside_slowdown
A = str(tiny_pair_paths()[0].parent)
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
out = {1: [], 4: []}
for r in range(rounds):
    for b in (1, 4) if r % 2 == 0 else (4, 1):
        got = beside_slowdown(f"{A}/target-deep", f"{A}/draft", target_tokens=6, draft_tokens=24, context=128, batch=b)
        out[b].append(got)
        print(f"batch {b}: slowdown {got['raw']:.3f} (q1 {got['q1']:.3f} q3 {got['q3']:.3f}) busy {1e3*got['busy_s']:.3f} idle {1e3*got['idle_s']:.3f} ms", flush=True)
import numpy as np
for b, v in out.items():
    print(f"batch {b}: median slowdown {np.median([x['raw'] for x in v]):.3f} over {len(v)}")
json.dump({str(k): v for k, v in out.items()}, open(sys.argv[2], "w"), indent=1) if len(sys.argv) > 2 else None
