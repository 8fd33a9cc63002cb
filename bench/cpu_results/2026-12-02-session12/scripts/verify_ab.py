"""Interleaved SD@K vs SSD@K (draft process) vs SSD@K inline: median per-round verify time, deep pair b1 T0."""
import sys, statistics as st
sys.path.insert(0, '.')
from saguaro_exec import RunConfig, run
from saguaro_sim.config import SpecConfig
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
B = int(sys.argv[3]) if len(sys.argv) > 3 else 1
K = int(sys.argv[1]) if len(sys.argv) > 1 else 6
R = int(sys.argv[2]) if len(sys.argv) > 2 else 5
DEEP = "saguaro_exec/assets/tiny/target-deep"
prompts = list(BUILTIN_PROMPTS[:4 * B])
fan = tuple([3] * (K + 1))
cfgs = {
  "sd": RunConfig(spec=SpecConfig(mode="sd", k=K, batch_size=B), prompts=prompts, max_new_tokens=128, target=DEEP, threads=1),
  "ssd": RunConfig(spec=SpecConfig(mode="ssd", k=K, fanout=fan, batch_size=B, backup="neural"), prompts=prompts, max_new_tokens=128, target=DEEP, threads=1),
  "ssd-inline": RunConfig(spec=SpecConfig(mode="ssd", k=K, fanout=fan, batch_size=B, backup="neural"), prompts=prompts, max_new_tokens=128, target=DEEP, threads=1, inline_draft=True),
}
res = {m: [] for m in cfgs}
for m, c in cfgs.items():
    run(c)
for i in range(R):
    for m, c in cfgs.items():
        rep = run(c)
        rows = rep.measurements.rounds
        res[m].append((st.median(r["verify_s"] for r in rows if r.get("width", 1) == B) * 1e3, st.mean(r["verify_s"] for r in rows) * 1e3, rep.tokens_per_s))
for m in res:
    print(f"{m:11} verify median-of-medians {st.median(x[0] for x in res[m]):.3f} ms, mean {st.median(x[1] for x in res[m]):.3f} ms; tok/s {st.median(x[2] for x in res[m]):.1f}  per repeat: " + " ".join(f"{x[0]:.2f}" for x in res[m]))
