"""Which leg of the hand-off makes a deep b1 T0 SSD hit round stall (> 1 ms of verifier wait): runs round 2's
autotuned configuration N times and, for every hit round of every run (not only the median one), splits the
wait into the draft's build running past the verification (build - verify) and the legs of
bench/handoff_stats.py; a long build is then compared with the run's median build.
Usage: stall_probe.py N OUT.json"""
import json
import statistics
import sys

sys.path.insert(0, "/work/main")
from bench.handoff_stats import events_by_batch, round_handoffs, split_batches  # noqa: E402
from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_exec.io.prompts import BUILTIN_PROMPTS  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

DEEP = "saguaro_exec/assets/tiny/target-deep"
spec = SpecConfig(mode="ssd", k=7, fanout=(4, 3, 7, 3, 2, 9, 0, 4), fanout_miss=(6, 6, 6, 6, 2, 2, 1, 3),
                  backup="fast", temperature=0.0, batch_size=1)
cfg = RunConfig(spec=spec, target=DEEP, prompts=list(BUILTIN_PROMPTS[:4]), max_new_tokens=128, threads=None)
run(RunConfig(spec=spec, target=DEEP, prompts=list(BUILTIN_PROMPTS[:1]), max_new_tokens=8))   # warm-up
n, out = int(sys.argv[1]), sys.argv[2]
stalled, counts = [], []
for i in range(n):
    rep = run(cfg)
    batches = split_batches(rep.measurements.rounds)
    sp, ve = events_by_batch(rep.events, "speculator"), events_by_batch(rep.events, "verifier")
    hs = [dict(h, batch_index=bi, prev_row=rows[h["round"] - 1])
          for bi, (rows, s, v) in enumerate(zip(batches, sp, ve)) for h in round_handoffs(rows, s, v)]
    hits = [h for h in hs if not h["miss"]]
    med_build = statistics.median(h["build"] for h in hits)
    med_verify = statistics.median(h["verify"] for h in hits)
    bad = [h for h in hits if h["wait"] > 1e-3]
    for h in hits:
        if h["wait"] <= 1e-3:
            h.pop("prev_row")
    counts.append({"run": i, "tok_s": rep.tokens_per_s, "hit_rounds": len(hits), "stalled": len(bad),
                   "median_build_ms": 1e3 * med_build, "median_verify_ms": 1e3 * med_verify})
    for h in bad:
        prev = h.pop("prev_row")
        rec = {k: (1e3 * v if isinstance(v, float) else v) for k, v in h.items()}
        rec.update(run=i, over_ms=1e3 * (h["build"] - h["verify"]), build_vs_median=h["build"] / med_build,
                   verify_vs_median=h["verify"] / med_verify,
                   prev_verify_cpu_share=(prev.get("verify_cpu_s") or 0.0) / max(prev["verify_s"], 1e-9))
        stalled.append(rec)
    print(f"run {i}: {rep.tokens_per_s:.0f} tok/s, {len(bad)} of {len(hits)} hit rounds stalled", flush=True)
json.dump({"spec": spec.__dict__ if hasattr(spec, "__dict__") else str(spec), "runs": counts, "stalled": stalled},
          open(out, "w"), indent=1, default=str)
tot = sum(c["stalled"] for c in counts), sum(c["hit_rounds"] for c in counts)
print(f"stalled hit rounds: {tot[0]} of {tot[1]} ({100 * tot[0] / max(tot[1], 1):.1f}%)")
for s in stalled:
    print(f"  run {s['run']} round {s['round']}: wait {s['wait']:.2f} ms, build {s['build']:.2f} "
          f"(x{s['build_vs_median']:.2f} median) vs verify {s['verify']:.2f} (x{s['verify_vs_median']:.2f}); "
          f"draft_gap {s['draft_gap']:.3f} verifier_gap {s['verifier_gap']:.3f} "
          f"outcome_transit {s.get('outcome_transit', float('nan')):.3f} cache_transit "
          f"{s.get('cache_transit', float('nan')):.3f}; prev verify cpu share {s['prev_verify_cpu_share']:.2f}")
