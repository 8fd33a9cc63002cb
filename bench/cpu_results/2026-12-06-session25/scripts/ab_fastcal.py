"""Interleaved A/B of the optimizer's SSD choice before and after the fast-backup calibration run (session 25):
the same pair, prompts (bench_exec's 4 x 128) and seed, one run of every config per round, R rounds; prints each
config's median tokens/s, hit rate, and the ratios to the best SD, and writes the rows as JSON.
Usage: python ab_fastcal.py b1|b4 ROUNDS OUT.json"""
import json, statistics, sys, time

sys.path.insert(0, ".")
from saguaro_exec import RunConfig, run  # noqa: E402
from saguaro_exec.io.prompts import BUILTIN_PROMPTS  # noqa: E402
from saguaro_sim import SpecConfig  # noqa: E402

T, D = "saguaro_exec/assets/tiny/target-deep", "saguaro_exec/assets/tiny/draft"
CASES = {   # the choices autotune printed: pass 1 (without the fast run) and pass 3 (with it)
    "b4": {"ssd_before": dict(k=5, fanout=(3, 3, 13, 3, 2, 8), fanout_miss=(32, 0, 0, 0, 0, 0), backup="fast"),
           "ssd_after": dict(k=5, fanout=(3, 3, 13, 3, 2, 8), fanout_miss=(6, 5, 1, 12, 5, 3), backup="fast"),
           "sd@3": dict(k=3), "sd@5": dict(k=5)},
    "b1": {"ssd_before": dict(k=8, fanout=(3, 3, 2, 3, 2, 2, 0, 1, 2), fanout_miss=(5, 1, 5, 1, 1, 1, 0, 1, 3),
                              backup="neural"),
           "ssd_after": dict(k=8, fanout=(3, 3, 7, 3, 2, 9, 0, 1, 4), fanout_miss=(6, 5, 1, 12, 1, 1, 1, 2, 3),
                             backup="fast"),
           "sd@5": dict(k=5), "sd@6": dict(k=6)},
    # the build margin (scripts/margin_choice.py on pass 6's autotune folder): margin 0 against 0.15
    "margin": {"ssd_margin0": dict(k=8, fanout=(3, 3, 13, 3, 2, 9, 0, 1, 2), fanout_miss=(6, 5, 1, 12, 1, 5, 1, 2, 3),
                                   backup="fast"),
               "ssd_margin15": dict(k=8, fanout=(4, 3, 7, 3, 2, 2, 0, 2, 4), fanout_miss=(6, 1, 1, 12, 1, 1, 1, 1, 3),
                                    backup="fast"),
               "sd@5": dict(k=5), "sd@6": dict(k=6)},
}
case, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
b = 4 if case == "b4" else 1
specs = {n: SpecConfig(mode="sd" if n.startswith("sd") else "ssd", batch_size=b, temperature=0.0,
                       **({**c, "budget": sum(c["fanout"])} if "fanout" in c else c)) for n, c in CASES[case].items()}
rows = []
for r in range(rounds):
    for n, s in specs.items():
        rep = run(RunConfig(spec=s, target=T, draft=D, prompts=BUILTIN_PROMPTS[:4], max_new_tokens=128, threads=1))
        rows.append({"round": r, "config": n, "tokens_per_s": rep.tokens_per_s, "hit_rate": rep.hit_rate,
                     "tokens_per_round": rep.mean_tokens_per_round, "ceiling": rep.ceiling_tokens_per_s,
                     "t": time.time()})
med = {n: statistics.median(x["tokens_per_s"] for x in rows if x["config"] == n) for n in specs}
sd = max(v for n, v in med.items() if n.startswith("sd"))
for n in specs:
    hits = [x["hit_rate"] for x in rows if x["config"] == n and x["hit_rate"] is not None]
    paired = statistics.median(x["tokens_per_s"] / max(y["tokens_per_s"] for y in rows if y["round"] == x["round"]
                                                       and y["config"].startswith("sd"))
                               for x in rows if x["config"] == n)
    print(f"{case} {n:>11}: {med[n]:7.1f} tok/s median  x{med[n] / sd:.3f} best SD (paired x{paired:.3f})"
          + (f"  hit {statistics.median(hits):.3f}" if hits else ""))
json.dump({"case": case, "rounds": rounds, "rows": rows, "median": med}, open(out, "w"), indent=1)
