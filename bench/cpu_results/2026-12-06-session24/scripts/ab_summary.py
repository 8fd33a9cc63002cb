"""Medians per version of an ab_loop.sh JSONL (tok/s, paired SSD/SD per run, hand-off p50s in ms, stalls)."""
import json, statistics as st, sys
L = [json.loads(line) for line in open(sys.argv[1])]
out = {}
for v in ("old", "new"):
    R = [x["r"] for x in L if x["v"] == v]
    m = lambda k: st.median(r[k] for r in R)  # noqa: E731
    keys = ("draft_gap", "verifier_gap", "wait", "outcome_send", "outcome_wake", "draft_lag", "cache_transit",
            "verify_lag", "msg_ms", "verify_ms", "hit")
    o = out[v] = {"runs": len(R), "sd": m("sd"), "ssd": m("ssd"), "ssd_over_sd": st.median(r["ssd"] / r["sd"] for r in R),
                  **{k: m(k) for k in keys},
                  "stalled_hit_rounds": st.median(r["stalled"]["hit_rounds"] for r in R),
                  "stalled_miss_rounds": st.median(r["stalled"]["miss_rounds"] for r in R),
                  "stalled_all": st.median(r["stalled"]["all"] for r in R)}
    print(v, " ".join(f"{k} {x:.4g}" for k, x in o.items()))
json.dump(out, open(sys.argv[1].replace(".jsonl", "_summary.json"), "w"), indent=1)
