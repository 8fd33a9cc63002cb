"""Interleaved A/B of the optimizer's choices fitted the old way and the new way (tile_choice.py's JSON): SSD
old, SSD new, and SD at each way's best K (and K +- 1 of the new one), the deep pair, bench_exec's 4 prompts x
128 tokens, T = 0, one run of every config per round, R rounds; medians, paired ratios to the round's best SD.
Usage: python ab_tile.py CHOICES.json BATCH ROUNDS OUT.json"""
import json
import statistics
import sys
import time

sys.path.insert(0, ".")
from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_exec.io.prompts import BUILTIN_PROMPTS  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

T, D = "saguaro_exec/assets/tiny/target-deep", "saguaro_exec/assets/tiny/draft"
choices, b, rounds, out = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
specs = {}
for way in ("old", "new"):
    d = {k: v for k, v in choices[way]["best"].items() if v is not None}
    specs[f"ssd_{way}"] = SpecConfig.from_dict({**d, "batch_size": b, "temperature": 0.0})
specs["ssd_old_again"] = specs["ssd_old"]   # an A/A pair: the noise floor of the new / old ratio, same run
sd_ks = sorted({int(k) for k in (5, 6, 7, 8)})
for k in sd_ks:
    specs[f"sd@{k}"] = SpecConfig(mode="sd", k=k, batch_size=b, temperature=0.0)
for n, s in specs.items():
    print(n, s.to_dict())
rows = []
for r in range(rounds):
    for n, s in specs.items():
        rep = run(RunConfig(spec=s, target=T, draft=D, prompts=BUILTIN_PROMPTS[:4], max_new_tokens=128, threads=1))
        rows.append({"round": r, "config": n, "tokens_per_s": rep.tokens_per_s, "hit_rate": rep.hit_rate,
                     "tokens_per_round": rep.mean_tokens_per_round, "ceiling": rep.ceiling_tokens_per_s,
                     "t": time.time()})
    print(f"round {r + 1}/{rounds} done", flush=True)
med = {n: statistics.median(x["tokens_per_s"] for x in rows if x["config"] == n) for n in specs}
sd = max(v for n, v in med.items() if n.startswith("sd"))
for n in specs:
    hits = [x["hit_rate"] for x in rows if x["config"] == n and x["hit_rate"] is not None]
    paired = statistics.median(x["tokens_per_s"] / max(y["tokens_per_s"] for y in rows if y["round"] == x["round"]
                                                       and y["config"].startswith("sd"))
                               for x in rows if x["config"] == n)
    print(f"b{b} {n:>8}: {med[n]:7.1f} tok/s median  x{med[n] / sd:.3f} best SD (paired x{paired:.3f})"
          + (f"  hit {statistics.median(hits):.3f}" if hits else ""))
pairs = [x["tokens_per_s"] / y["tokens_per_s"] for x in rows if x["config"] == "ssd_new"
         for y in rows if y["config"] == "ssd_old" and y["round"] == x["round"]]
print(f"ssd new / old, paired by round: median x{statistics.median(pairs):.3f} ({' '.join(f'{p:.2f}' for p in pairs)})")
aa = [x["tokens_per_s"] / y["tokens_per_s"] for x in rows if x["config"] == "ssd_old_again"
      for y in rows if y["config"] == "ssd_old" and y["round"] == x["round"]]
print(f"A/A (old again / old), paired by round: median x{statistics.median(aa):.3f}, median |log| "
      f"{statistics.median(abs(__import__('math').log(a)) for a in aa):.3f} ({' '.join(f'{a:.2f}' for a in aa)})")
json.dump({"batch": b, "rounds": rounds, "rows": rows, "median": med, "specs": {n: s.to_dict() for n, s in
                                                                                specs.items()}}, open(out, "w"),
          indent=1)
