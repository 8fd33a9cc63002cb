"""Medians per (T, side) of the miss-path A/B's runs, and new/old ratios of tokens/s paired by seed."""
import collections
import json
import statistics as st
import sys

rows = [json.loads(x) for f in sys.argv[1:] for x in open(f)]
by = collections.defaultdict(list)
for r in rows:
    by[r["T"], r["side"]].append(r)
for T in sorted({r["T"] for r in rows}, reverse=True):
    for side in ("old", "new"):
        rs = by[T, side]
        print(f"T={T} {side}: n={len(rs)} " + " ".join(f"{k} {st.median(r[k] for r in rs):.3f}" for k in
              ("hit_gap_ms", "miss_backup_ms", "miss_rest_ms", "miss_reply_end_to_verify_ms", "tokens_per_s")))
    old = {(r["seed"], i): r for i, r in enumerate(by[T, "old"])}
    pairs = [n["tokens_per_s"] / o["tokens_per_s"] for o, n in zip(by[T, "old"], by[T, "new"])]
    print(f"T={T} tokens/s new/old paired: median {st.median(pairs):.3f} ({', '.join(f'{p:.2f}' for p in pairs)})")
