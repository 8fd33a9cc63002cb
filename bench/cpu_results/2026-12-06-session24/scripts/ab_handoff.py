"""One SD@5 and one SSD run (pass-1 optimizer config: k8 neural) on the deep pair, b1 T0, 4 builtin prompts x 128,
from the checkout on PYTHONPATH; prints one JSON line: tok/s and the SSD hand-off medians (ms)."""
import json, statistics, sys
from saguaro_exec import RunConfig, run
from saguaro_exec.io.prompts import BUILTIN_PROMPTS
from saguaro_sim import SpecConfig
sys.path.insert(0, "/work/main")            # bench.handoff_stats from the current tree (the same for both)
from bench.handoff_stats import run_handoffs, summarize
T = "saguaro_exec/assets/tiny/target-deep"
P = list(BUILTIN_PROMPTS[:4])
ssd = SpecConfig(mode="ssd", k=8, fanout=(3, 3, 2, 3, 2, 2, 0, 1, 2), fanout_miss=(5, 1, 5, 1, 1, 1, 0, 1, 3),
                 backup="neural", batch_size=1)
sd = SpecConfig(mode="sd", k=5, batch_size=1)
for s in (sd, ssd):
    run(RunConfig(spec=s, target=T, prompts=P[:1], max_new_tokens=8))
out = {}
for name, s in (("sd", sd), ("ssd", ssd)):
    rep = run(RunConfig(spec=s, target=T, prompts=P, max_new_tokens=128))
    out[name] = rep.tokens_per_s
    if name == "ssd":
        rows = rep.measurements.rounds
        h = summarize(run_handoffs(rows, rep.events))
        out.update({m: h[m]["p50_ms"] for m in ("draft_gap", "verifier_gap", "wait", "outcome_send", "outcome_wake",
                                                "draft_lag", "cache_transit", "verify_lag") if m in h})
        out["stalled"] = h["stalled"]
        out["msg_ms"] = 1e3 * statistics.median(r["msg_s"] for r in rows)
        out["verify_ms"] = 1e3 * statistics.median(r["verify_s"] for r in rows)
        out["hit"] = rep.summary().get("hit_rate")
print(json.dumps(out))
