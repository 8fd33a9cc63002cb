"""Session 31: one SSD run (deep pair, push over shm, T and config of session 30's round-1 autotune choice) and
the verifier's hand-off gaps from its own events: a hit round's outcome-sent -> next verify start, and a miss
round's split into the draft's backup and the rest (reply end -> verify start). Run from the checkout under test."""
import collections
import json
import statistics as st
import sys

from saguaro_exec import RunConfig, run
from saguaro_exec.io.prompts import BUILTIN_PROMPTS as P
from saguaro_sim import SpecConfig

T = float(sys.argv[1])
spec = SpecConfig(mode="ssd", k=7, batch_size=1, temperature=T, fanout=(9, 6, 4, 2, 3, 1, 2, 5),
                  fanout_miss=(9, 6, 4, 3, 2, 1, 2, 5), backup="neural", sampler_c=1.0)
rep = run(RunConfig(spec=spec, target="saguaro_exec/assets/tiny/target-deep", prompts=P[:4], max_new_tokens=128,
                    ssd_protocol="push", transport="shm", seed=int(sys.argv[2])))
by = collections.defaultdict(dict)
for e in rep.events:
    if "round" in e["args"]:
        by[e["args"]["round"]][(e["track"], e["name"])] = (e["start_s"], e["start_s"] + e["dur_s"])
gaps = collections.defaultdict(list)
for r in sorted(by):
    a, b = by[r], by.get(r + 1, {})
    send, verify = a.get(("verifier", "send")), b.get(("verifier", "verify"))
    if not send or not verify:
        continue
    if ("speculator", "backup") in b:
        rep_ = b[("speculator", "reply")]
        gaps["miss_backup_ms"].append(b[("speculator", "backup")][1] - b[("speculator", "backup")][0])
        gaps["miss_rest_ms"].append((verify[0] - send[1]) - (gaps["miss_backup_ms"][-1]))
        gaps["miss_reply_end_to_verify_ms"].append(verify[0] - rep_[1])
    else:
        gaps["hit_gap_ms"].append(verify[0] - send[1])
out = {k: 1e3 * st.median(v) for k, v in gaps.items()}
out.update(n_hit=len(gaps["hit_gap_ms"]), n_miss=len(gaps["miss_backup_ms"]), tokens_per_s=rep.throughput)
print(json.dumps(out))
