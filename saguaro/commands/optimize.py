"""`saguaro optimize`: search K, budget, fan-out shape, C, backup and draft devices for a profile."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from calibration.errors import ConfigError
from saguaro.commands import common

CONSTRAINT_FLAGS = {"k_range": "--k-range", "max_budget": "--max-budget", "max_draft_devices": "--max-draft-devices",
                    "target_devices": "--target-devices", "modes": "--modes", "backups": "--backups",
                    "batch_sizes": "--pareto-batch-sizes", "top_n": "--top-n", "placement": "--placement",
                    "sharing": "--sharing", "build_margin": "--build-margin"}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("optimize", help="find the best AR / SD / SSD configuration for a profile",
                              description="Prune the search space with the closed forms, confirm the best "
                                          "candidates with the simulator, print the ranked table and Pareto frontier.")
    common.add_profile_arg(p)
    p.add_argument("--batch-size", type=common.integer(), default=1, help="sequences decoded together (default 1)")
    p.add_argument("--temperature", type=common.number(), default=0.0, help="sampling temperature (default 0)")
    p.add_argument("--objective", default="latency",
                   help="latency (per-sequence tokens/s) | throughput (tokens/s per device); default latency")
    g = p.add_argument_group("search space (Constraints)")
    g.add_argument("--k-range", help="K_min,K_max (default 1,10)")
    g.add_argument("--max-budget", type=common.integer(), help="largest budget per sequence (default 256)")
    g.add_argument("--max-draft-devices", type=common.integer(), help="most draft devices for SSD (default 1)")
    g.add_argument("--target-devices", type=common.integer(), help="devices the target occupies (default: from the profile)")
    g.add_argument("--modes", help="comma list of ar,sd,ssd (default all)")
    g.add_argument("--backups", help="comma list of neural,fast,auto (default neural,fast)")
    g.add_argument("--pareto-batch-sizes", help="extra batch sizes the Pareto frontier spans, e.g. 1,4,16")
    g.add_argument("--top-n", type=common.integer(), help="candidates confirmed by simulation (default 8)")
    g.add_argument("--build-margin", type=common.number(0.0, 1.0),
                   help="rank SSD as if its cache builds ran this share slower than profiled (default 0; "
                        "autotune uses 0.15)")
    common.add_placement_args(g)
    common.add_workload_args(p)
    p.add_argument("--seed", type=common.integer(0, 2**62), default=0, help="random seed of the confirming simulations (default 0)")
    p.add_argument("--top", type=common.integer(1), default=10, help="rows of the ranked table to print (default 10)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    common.add_output_args(p)
    return p


def constraints_from(args: argparse.Namespace):
    """Constraints from the flags; errors name the flag."""
    from saguaro_sim.search import Constraints

    d = {}
    for key, flag in CONSTRAINT_FLAGS.items():
        v = getattr(args, key if key != "batch_sizes" else "pareto_batch_sizes")
        if v is None:
            continue
        if key in ("k_range", "batch_sizes"):
            v = common.int_list(flag, v)
        elif key in ("modes", "backups"):
            v = tuple(x for x in v.replace(" ", "").split(",") if x)
        d[key] = v
    try:
        return Constraints.from_dict(d)
    except ConfigError as e:
        key = e.field.removeprefix("constraints.").split("[")[0]
        raise ConfigError(CONSTRAINT_FLAGS.get(key, e.field), e.problem, e.allowed) from None


def main(args: argparse.Namespace) -> int:
    """Validate, optimize, print, write --out."""
    from saguaro import figures as plan_figures
    from saguaro_sim.optimize import OBJECTIVES, optimize
    from saguaro_sim.simulate import simulate

    profile = common.profile_from_args(args)
    workload = common.workload_from(args)
    cons = constraints_from(args)
    if args.objective not in OBJECTIVES:
        raise ConfigError("--objective", f"unknown objective {args.objective!r}", " | ".join(OBJECTIVES))
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    with common.StagedDir(args.out) as d:   # checked and staged before the search; renamed into place after
        with common.flag_errors(("batch_size", "temperature", "seed")):
            plan = optimize(profile, workload, batch_size=args.batch_size, temperature=args.temperature,
                            objective=args.objective, constraints=cons, progress=progress, seed=args.seed)
        doc = {"profile": profile.name, "workload": asdict(workload), **plan.to_dict()}
        if d is not None:
            from calibration.jsonio import dump_json

            dump_json(d / "plan.json", doc)
            plan.best.save(d / "best.toml")
            profile.to_json(d / "profile.json")
            k_lo, k_hi = plan.constraints.k_range
            plan_figures.pareto(plan.table, plan.pareto, d / "pareto.png",
                                f"Latency vs throughput per device ({profile.name})")
            plan_figures.speedup_vs_k(profile, plan.best, workload, range(k_lo, k_hi + 1), d / "speedup_vs_k.png")
            plan_figures.speedup_vs_batch(profile, plan.best, workload, d / "speedup_vs_batch.png")
            plan_figures.fanout(profile, plan.best, d / "fanout.png")
            plan_figures.hit_vs_fanout(profile, plan.best, d / "hit_vs_fanout.png")
            from saguaro_sim.optimize import confirm_workload

            res = simulate(profile, plan.best, confirm_workload(workload, plan.best.batch_size), seed=args.seed,
                           trace=True)
            res.to_chrome_trace(d / "trace.json")
            from saguaro_sim import plots

            plots.plot_timeline(res.events, d / "timeline.png",
                                title=f"Best plan ({plan.best.mode.upper()} K={plan.best.k}) timeline, first rounds")
    if args.json:
        common.print_json(doc)
        return 0
    print(f"profile {profile.name}; workload {workload.num_sequences} x {workload.output_tokens} tokens "
          f"(prompt {workload.prompt_tokens})")
    print(plan.summary(top=args.top))
    b = plan.best_result
    print(f"best (simulated): {b.tokens_per_s_per_seq:.1f} tokens/s per sequence, {b.throughput:.1f} tokens/s, "
          f"{b.tokens_per_round:.2f} tokens/round, hit rate {b.hit_rate:.3f}")
    print("\nPareto frontier (per-sequence tokens/s vs tokens/s per device):")
    rows = [[r["mode"], r["k"], r["budget"] if r["mode"] == "ssd" else "-", r.get("backup") if r["mode"] == "ssd"
             else "-", r["batch_size"], r["devices"], r["tokens_per_s_per_seq"], r["throughput_per_device"]]
            for r in plan.pareto]
    print(common.table(rows, ["mode", "k", "budget", "backup", "batch", "devices", "tok/s/seq", "tok/s/device"]))
    if args.out:
        print(f"\nwrote {args.out}/ (plan.json, best.toml, profile.json, trace.json, pareto / speedup_vs_k / "
              f"speedup_vs_batch / fanout / hit_vs_fanout / timeline .png + .json)")
    return 0
