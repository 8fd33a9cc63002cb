"""Optimizer wall time: a full search (closed-form pruning + simulator confirmation) on a preset profile.

Target on the 2-core dev machine: under 10 s per optimization. Writes bench/results/optimize.json.
Run: .venv/bin/python bench/bench_optimize.py [--preset NAME] [--out PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calibration import load_preset  # noqa: E402
from calibration.jsonio import dump_json  # noqa: E402
from saguaro_sim import Workload  # noqa: E402
from saguaro_sim.optimize import optimize  # noqa: E402
from saguaro_sim.search import Constraints  # noqa: E402

CASES = [  # (label, batch, temperature, objective, constraints)
    ("b1 T0 latency", 1, 0.0, "latency", None),
    ("b16 T0 latency", 16, 0.0, "latency", None),
    ("b1 T0.7 latency (C searched)", 1, 0.7, "latency", None),
    ("b16 T0.7 throughput (C searched)", 16, 0.7, "throughput", None),
    ("b16 T0.7 throughput, 1-4 draft devices, Pareto over b=1,4,16,64", 16, 0.7, "throughput",
     Constraints(max_draft_devices=4, batch_sizes=(1, 4, 16, 64))),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="h100-llama70b-tp4-llama1b")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; best and median are reported")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                                  "optimize.json"))
    args = ap.parse_args()
    profile = load_preset(args.preset)
    workload = Workload(num_sequences=128, output_tokens=512, prompt_tokens=128)
    optimize(profile, workload, constraints=Constraints(k_range=(1, 2), top_n=1))  # warm imports
    rows = []
    for label, batch, temperature, objective, cons in CASES:
        walls = []
        for _ in range(max(1, args.repeat)):
            t0 = time.perf_counter()
            plan = optimize(profile, workload, batch_size=batch, temperature=temperature, objective=objective,
                            constraints=cons)
            walls.append(time.perf_counter() - t0)
        wall, median = min(walls), statistics.median(walls)
        best = plan.table[0]
        rows.append({"case": label, "batch_size": batch, "temperature": temperature, "objective": objective,
                     "wall_s": round(wall, 3), "wall_s_median": round(median, 3), "searched": plan.searched, "confirmed": len(plan.table),
                     "pareto_points": len(plan.pareto), "best": plan.best.to_dict(), "best_shape": best["shape"],
                     "best_tokens_per_s_per_seq": round(best["tokens_per_s_per_seq"], 2),
                     "best_throughput_per_device": round(best["throughput_per_device"], 2),
                     "speedup_vs_sd": round(best["speedup_vs_sd"], 3),
                     "speedup_vs_ar": round(best["speedup_vs_ar"], 3)})
        b = plan.best
        print(f"{label:<64} {wall:6.2f}s ({median:5.2f})  searched={plan.searched:5d}  best={b.mode} k={b.k} "
              f"budget={b.budget} {best['shape']} C={b.sampler_c} {b.backup} dev={b.draft_devices}  "
              f"x{best['speedup_vs_sd']:.2f} vs SD")
    dump_json(args.out, {"benchmark": "optimize", "preset": args.preset, "workload": workload.__dict__,
                         "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                     "platform": platform.platform()},
                         "load_average": os.getloadavg(), "repeat": args.repeat, "target_wall_s": 10.0,
                         "cases": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
