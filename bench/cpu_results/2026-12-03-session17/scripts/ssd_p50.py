"""Why is SSD's p50 TPOT under load predicted 5-15% fast even at its rounds' own speed (sessions 14-16)?
Per request, measured vs simulated: TPOT, decode rounds after the first token, round seconds, and what else
sits between a request's first token and its finish (other rows' prefills, gaps). bench_load's own set-up.

    .venv/bin/python bench/cpu_results/2026-12-03-session17/scripts/ssd_p50.py PROFILE.json OUT.json [REPEATS]
"""

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))

from bench.bench_load import (IDLE_LONGER, IDLE_MIN_REQUESTS, IDLE_SEED, SIM_SEEDS, _profile,  # noqa: E402
                              _prompt_ids, _specs, _stream, fit_after_idle, load_levels, parse, run_once,
                              simulate_load, timed_prefills, workload_run, write_trace)
from saguaro_sim.load import load_trace  # noqa: E402
from saguaro_sim.load.costs import round_cost  # noqa: E402


def per_request(rep, n: int) -> list[dict]:
    rounds = rep.measurements.rounds
    pr = rep.per_request
    out = []
    for i in range(n):
        mine = [r for r in rounds if i in r["seq"]]
        if not mine:
            out.append({})
            continue
        first, last = mine[0], mine[-1]
        after = [r for r in rounds if first["t1"] < r["t1"] <= last["t1"]]    # rounds after the first token
        mine_after = [r for r in after if i in r["seq"]]
        out.append({"tpot": pr["tpot_s"][i], "prompt": i % 8,
                    "span": last["t1"] - first["t1"],
                    "rounds_after": len(mine_after),
                    "round_s": sum(r["t1"] - r["t0"] for r in mine_after),
                    "others_prefill_s": sum(float(r.get("prefill_s", 0.0)) for r in after),
                    "width_mean": float(np.mean([r["width"] for r in mine_after])) if mine_after else 0.0,
                    "acc": [r["accepted"][r["seq"].index(i)] for r in mine],
                    "backup": [bool(r["from_backup"][r["seq"].index(i)]) for r in mine]})
    return out


def main() -> None:
    prof_path, out_path = sys.argv[1], Path(sys.argv[2])
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    args = parse(["--profile", prof_path, "--modes", "sd,ssd", "--no-progress"])
    profile = _profile(args.profile)
    ids = _prompt_ids()
    lens = [len(p) for p in ids]
    specs = _specs(profile, args.modes, args.k, args.batch, args.tokens, round(float(np.mean(lens))))
    prefills = timed_prefills(ids, args.batch, args.threads)
    profiles = {m: workload_run(profile, s, ids, args.tokens, prefills, ssd_protocol=args.protocol,
                                threads=args.threads, seed=args.seed)[0] for m, s in specs.items()}
    capacity = {m: simulate_load(profiles[m], s, _stream(float("inf"), args.requests, lens, args.tokens, args.seed),
                                 max_batch=args.batch, seed=args.seed, ssd_width=args.ssd_width).throughput / args.tokens
                for m, s in specs.items()}
    levels = load_levels(capacity, args.fractions)
    cal = _stream(levels["light"] / IDLE_LONGER, max(IDLE_MIN_REQUESTS, args.requests // IDLE_LONGER), lens,
                  args.tokens * IDLE_LONGER, args.seed + IDLE_SEED)
    profiles, idle = fit_after_idle(profiles, specs, ids, cal, args)
    trace = write_trace(_stream(levels["light"], args.requests, lens, args.tokens, args.seed), out_path.with_suffix(".jsonl"))
    stream = load_trace(trace)
    result = {"levels": levels, "after_idle": idle, "modes": {}}
    for m in args.modes:
        sims = [simulate_load(profiles[m], specs[m], stream, max_batch=args.batch, seed=args.seed + i,
                              ssd_width=args.ssd_width) for i in range(SIM_SEEDS)]
        tp = np.array([s.per_request["tpot_s"] for s in sims], float)
        result["modes"][m] = {"sim_tpot_p50": [float(np.nanmedian(t)) for t in tp],
                              "sim_tpot_mean": [float(np.nanmean(t)) for t in tp],
                              "sim_tpot_by_request": np.nanmedian(tp, axis=0).tolist(),
                              "sim_rounds": [int(s.rounds) for s in sims], "runs": []}
    for _ in range(repeats):
        for m in args.modes:
            rep = run_once(specs[m], profiles[m], ids, args.tokens, args, trace)
            result["modes"][m]["runs"].append({"tpot_p50": rep.tpot_s["p50"], "tpot_mean": rep.tpot_s["mean"],
                                               "requests": per_request(rep, args.requests),
                                               "rounds": [{k: r.get(k) for k in ("t0", "t1", "width", "batch", "from_backup",
                                                                                  "prefill_s", "refill", "verify_s",
                                                                                  "draft_reply_s", "backup_s", "context")}
                                                          for r in rep.measurements.rounds]})
        costs = {}
        for w in range(1, args.batch + 1):
            c = round_cost(profiles[m], specs[m], w, float(np.mean(lens)) + 16, specs[m].backup == "fast")
            costs[w] = {"base_s": c.base_s, "miss_s": c.miss_s, "floor_s": c.floor_s, "verify_s": c.verify_s,
                        "side_s": c.side_s, "side_miss_s": c.side_miss_s, "up_s": c.up_s, "down_s": c.down_s,
                        "backup_s": c.backup_s, "loop_s": c.loop_s}
        result["modes"][m]["costs"] = costs
        result["modes"][m]["after_idle_cold"] = list(profiles[m].executor.after_idle or [])
    out_path.write_text(json.dumps(result))
    for m in args.modes:
        profiles[m].to_json(out_path.with_name(out_path.stem + f"-profile-{m}.json"))
    for m, d in result["modes"].items():
        print(m, "sim p50 %.3f mean %.3f ms" % (1e3 * np.median(d["sim_tpot_p50"]), 1e3 * np.median(d["sim_tpot_mean"])))
        for r in d["runs"]:
            reqs = [q for q in r["requests"] if q and q["tpot"]]
            span = np.array([q["span"] for q in reqs])
            rs = np.array([q["round_s"] for q in reqs])
            pf = np.array([q["others_prefill_s"] for q in reqs])
            nr = np.array([q["rounds_after"] for q in reqs])
            print("  meas p50 %.3f mean %.3f ms | per request: rounds after first %.2f, round share %.3f, "
                  "others' prefill share %.3f, rest %.3f, mean round %.3f ms" % (
                      1e3 * r["tpot_p50"], 1e3 * r["tpot_mean"], nr.mean(), rs.sum() / span.sum(),
                      pf.sum() / span.sum(), 1 - (rs.sum() + pf.sum()) / span.sum(), 1e3 * rs.sum() / nr.sum()))


if __name__ == "__main__":
    main()
