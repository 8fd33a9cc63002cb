"""Simulator speed: simulated tokens per wall-second for 128 sequences x 512 tokens, batch 1 and 16, SD and SSD;
and the load simulator: 10,000 requests through SSD (Poisson at 8 req/s, near one replica's knee) and AR.

Targets on the 2-core dev machine: one simulation of 65,536 tokens in under 1 s; the 10,000-request SSD stream
in under 5 s. Writes bench/results/sim.json.
Run: .venv/bin/python bench/bench_sim.py [--preset NAME] [--repeat N] [--out PATH]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from calibration import load_preset  # noqa: E402
from calibration.jsonio import dump_json  # noqa: E402
from saguaro_sim import SpecConfig, Workload  # noqa: E402
from saguaro_sim.analytic import predict  # noqa: E402
from saguaro_sim.load import Lengths, best_schedule, poisson_stream, simulate_load  # noqa: E402
from saguaro_sim.simulate import simulate  # noqa: E402

CASES = [  # (label, spec)
    ("AR  b=1", SpecConfig(mode="ar", k=0, budget=0, batch_size=1)),
    ("SD  b=1 k=4", SpecConfig(mode="sd", k=4, batch_size=1)),
    ("SSD b=1 k=4 B=20 neural", SpecConfig(mode="ssd", k=4, budget=20, batch_size=1)),
    ("SD  b=16 k=4", SpecConfig(mode="sd", k=4, batch_size=16)),
    ("SSD b=16 k=4 B=20 fast", SpecConfig(mode="ssd", k=4, budget=20, batch_size=16, backup="fast")),
    ("SSD b=16 k=4 B=20 neural, 2 draft devices", SpecConfig(mode="ssd", k=4, budget=20, batch_size=16,
                                                             draft_devices=2)),
]

LOAD_CASES = [  # (label, mode, requests/s): 10,000 requests, lognormal prompts (mean 512) and outputs (mean 256)
    ("load SSD 10k requests @ 8 req/s", "ssd", 8.0),
    ("load SSD 10k requests @ 1 req/s", "ssd", 1.0),
    ("load AR  10k requests @ 8 req/s", "ar", 8.0),
]


def load_rows(profile, repeat: int) -> list[dict]:
    """Wall time of the load simulator on LOAD_CASES (the schedule is built once, outside the timing)."""
    rows = []
    for label, mode, qps in LOAD_CASES:
        sched = best_schedule(profile, mode, 64, 512, 256)
        stream = poisson_stream(qps, 10_000, Lengths(512, "lognormal", 0.5), Lengths(256, "lognormal", 0.5), seed=0)
        walls = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            res = simulate_load(profile, sched, stream, max_batch=64, seed=0)
            walls.append(time.perf_counter() - t0)
        rows.append({"case": label, "requests": len(stream), "tokens": res.output_tokens, "rounds": res.rounds,
                     "wall_s_min": round(min(walls), 4), "wall_s_median": round(statistics.median(walls), 4),
                     "mean_batch": round(res.mean_batch, 2), "p99_tpot_ms": round(res.tpot_s["p99"] * 1e3, 2)})
        print(f"{label:<44} {rows[-1]['wall_s_min']:>8.3f}s {rows[-1]['wall_s_median']:>8.3f}s "
              f"{res.output_tokens / min(walls):>15,.0f} {res.rounds:>7}   mean batch {res.mean_batch:.1f}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="h100-llama70b-tp4-llama1b")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "sim.json"))
    args = ap.parse_args()
    profile = load_preset(args.preset)
    workload = Workload(num_sequences=128, output_tokens=512, prompt_tokens=128)
    simulate(profile, CASES[1][1], Workload(4, 64))  # warm imports
    rows = []
    print(f"{'case':<44} {'wall min':>9} {'wall med':>9} {'sim tok/wall-s':>15} {'rounds':>7} "
          f"{'tok/s/seq sim':>14} {'predicted':>10}")
    for label, spec in CASES:
        walls = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            res = simulate(profile, spec, workload, seed=0)
            walls.append(time.perf_counter() - t0)
        pred = predict(profile, spec, workload)
        row = {"case": label, "spec": spec.to_dict(), "tokens": res.tokens, "rounds": res.rounds,
               "wall_s_min": round(min(walls), 4), "wall_s_median": round(statistics.median(walls), 4),
               "sim_tokens_per_wall_s": round(res.tokens / min(walls)),
               "tokens_per_s_per_seq": round(res.tokens_per_s_per_seq, 2),
               "predicted_tokens_per_s_per_seq": round(pred.tokens_per_s_per_seq, 2),
               "hit_rate": round(res.hit_rate, 4), "backup": res.backup}
        rows.append(row)
        print(f"{label:<44} {row['wall_s_min']:>8.3f}s {row['wall_s_median']:>8.3f}s "
              f"{row['sim_tokens_per_wall_s']:>15,} {res.rounds:>7} {row['tokens_per_s_per_seq']:>14.1f} "
              f"{row['predicted_tokens_per_s_per_seq']:>10.1f}")
    rows += load_rows(profile, args.repeat)
    dump_json(args.out, {"benchmark": "simulate", "preset": args.preset, "workload": workload.__dict__,
                         "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                         "machine": f"{platform.machine()} {os.cpu_count()} CPUs, Python {platform.python_version()}",
                         "repeat": args.repeat, "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
