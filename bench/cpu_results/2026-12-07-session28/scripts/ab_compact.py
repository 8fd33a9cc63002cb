"""A/B of SSD's row compaction (session 28) on the deep pair at batch 4, T = 0, bench_exec's workload (4 built-in
prompts x 128 tokens): SSD with live rows moved over finished ones (new) vs rows kept in place (old: the run's
SAGUARO_SSD_COMPACT=0, which both sides then follow; the run happens in a child process, so a monkeypatch of
WorkerSpec here does not reach it: the first A/B, ab1, made that mistake and so measured new against new, an A/A), beside SD at K 4 and 5, interleaved (the order
rotates each repeat). Prints one JSON line per run and a summary: medians, paired new/old ratios, and the A/A-free
noise read as the spread of the paired ratios.

Usage: python ab_compact.py OUT.json [repeats] [k] [fanout] [fanout_miss] [backup]"""

import json
import os
import statistics as st
import sys
import time

sys.path.insert(0, ".")

from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_exec.io.prompts import BUILTIN_PROMPTS  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

DEEP, DRAFT = "saguaro_exec/assets/tiny/target-deep", "saguaro_exec/assets/tiny/draft"
out = sys.argv[1]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 7
k = int(sys.argv[3]) if len(sys.argv) > 3 else 5
fan = tuple(int(x) for x in (sys.argv[4] if len(sys.argv) > 4 else "4,3,13,3,3,4").split(","))
miss = tuple(int(x) for x in (sys.argv[5] if len(sys.argv) > 5 else "6,6,1,12,2,3").split(","))
backup = sys.argv[6] if len(sys.argv) > 6 else "fast"
prompts = BUILTIN_PROMPTS[:4]
ssd = SpecConfig(mode="ssd", k=k, fanout=fan, fanout_miss=miss, backup=backup, batch_size=4, budget=None)
specs = {"sd@4": SpecConfig(mode="sd", k=4, batch_size=4), "sd@5": SpecConfig(mode="sd", k=5, batch_size=4),
         "ssd_new": ssd, "ssd_old": ssd}


def one(name: str, max_new: int = 128) -> dict:
    os.environ["SAGUARO_SSD_COMPACT"] = "0" if name == "ssd_old" else "1"
    rep = run(RunConfig(spec=specs[name], target=DEEP, draft=DRAFT, prompts=prompts, max_new_tokens=max_new,
                        seed=0, threads=1))
    rows = rep.measurements.rounds
    live = sum(len(r["slot"]) for r in rows)
    return {"mode": name, "tokens_per_s": rep.tokens_per_s, "rounds": len(rows),
            "forwarded_per_live": sum(r.get("width", len(r["slot"])) for r in rows) / live,
            "verify_ms_median": 1e3 * st.median(r["verify_s"] for r in rows),
            "verify_ms_total": 1e3 * sum(r["verify_s"] for r in rows),
            "tokens": sum(len(t) for t in rep.token_ids), "ids": rep.token_ids,
            # (live rows, forwarded rows) -> median verification: the tail's price inside one run
            "verify_ms_by_rows": {f"{lv}/{w}": 1e3 * st.median(r["verify_s"] for r in rows
                                                              if (len(r["slot"]), r.get("width", len(r["slot"]))) == (lv, w))
                                  for lv, w in {(len(r["slot"]), r.get("width", len(r["slot"]))) for r in rows}}}


names = list(specs)
for n in names:
    one(n, 8)                                     # warm-up
runs = []
for i in range(reps):
    order = names[i % len(names):] + names[:i % len(names)]
    for n in order:
        r = one(n)
        r["repeat"], r["t"] = i, time.time()
        runs.append(r)
        print(json.dumps({x: v for x, v in r.items() if x != "ids"}), flush=True)
ids = {n: [r["ids"] for r in runs if r["mode"] == n] for n in names}
same = all(x == ids["sd@4"][0] for n in names for x in ids[n])
med = {n: st.median(r["tokens_per_s"] for r in runs if r["mode"] == n) for n in names}
by = {(r["repeat"], r["mode"]): r for r in runs}
paired = [by[(i, "ssd_new")]["tokens_per_s"] / by[(i, "ssd_old")]["tokens_per_s"] for i in range(reps)]
best_sd = [max(by[(i, "sd@4")]["tokens_per_s"], by[(i, "sd@5")]["tokens_per_s"]) for i in range(reps)]
summary = {"median_tokens_per_s": med, "outputs_equal": same,
           "paired_new_over_old": paired, "paired_new_over_old_median": st.median(paired),
           "ssd_new_over_best_sd_paired_median": st.median(by[(i, "ssd_new")]["tokens_per_s"] / best_sd[i]
                                                          for i in range(reps)),
           "ssd_old_over_best_sd_paired_median": st.median(by[(i, "ssd_old")]["tokens_per_s"] / best_sd[i]
                                                          for i in range(reps)),
           "forwarded_per_live": {n: st.median(r["forwarded_per_live"] for r in runs if r["mode"] == n) for n in names},
           "verify_ms_median": {n: st.median(r["verify_ms_median"] for r in runs if r["mode"] == n) for n in names},
           "verify_ms_total": {n: st.median(r["verify_ms_total"] for r in runs if r["mode"] == n) for n in names},
           "spec": {"k": k, "fanout": fan, "fanout_miss": miss, "backup": backup}}
print(json.dumps(summary, indent=1))
json.dump({"runs": [{x: v for x, v in r.items() if x != "ids"} for r in runs], "summary": summary},
          open(out, "w"), indent=1)
