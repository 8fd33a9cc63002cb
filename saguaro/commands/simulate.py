"""`saguaro simulate`: run the discrete-event simulator for one configuration (plus AR / SD baselines)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict

from calibration.errors import ConfigError
from saguaro.commands.common import (
    StagedDir,
    add_output_args,
    add_profile_arg,
    add_spec_args,
    add_workload_args,
    flag,
    integer,
    print_json,
    profile_from_args,
    spec_overrides,
    table,
    workload_from,
)
from saguaro_sim.config import SpecConfig

METRICS = ("tokens_per_s_per_seq", "throughput", "tokens_per_round", "hit_rate", "verifier_idle_frac",
           "draft_utilization", "rounds", "sim_time_s")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("simulate", help="simulate one AR / SD / SSD configuration on a profile",
                              description="Simulate one decoding configuration (discrete-event) on a profile; "
                                          "spec flags override --config.")
    add_profile_arg(p)
    g = p.add_argument_group("configuration (SpecConfig)")
    g.add_argument("--config", metavar="FILE", help="SpecConfig .toml or .json (flags below override it)")
    add_spec_args(g)
    add_workload_args(p)
    p.add_argument("--seed", type=integer(0, 2**62), default=0, help="random seed (default 0)")
    p.add_argument("--no-baselines", action="store_true", help="skip the AR / SD baseline simulations")
    add_output_args(p)
    return p


def spec_from(args: argparse.Namespace) -> SpecConfig:
    """SpecConfig from --config and the spec flags; errors name the flag (or the file and key)."""
    base = SpecConfig.load(args.config).to_dict() if args.config else {}
    over = spec_overrides(args)
    if "k" in over and "fanout" not in over and base.get("fanout") is not None:
        base["fanout"] = base["fanout_miss"] = None  # a new K invalidates the file's fan-out lists
    if "budget" not in over and ("k" in over or "fanout" in over) and not args.config:
        base["budget"] = None
    try:
        return SpecConfig.from_dict({**base, **over})
    except ConfigError as e:
        if e.field in over:
            raise ConfigError(flag(e.field), e.problem, e.allowed) from None
        if args.config:
            raise ConfigError(f"{args.config}: {e.field}", e.problem, e.allowed) from None
        raise


def main(args: argparse.Namespace) -> int:
    """Validate everything, simulate, then print and write outputs."""
    profile = profile_from_args(args)
    spec = spec_from(args)
    workload = workload_from(args)
    with StagedDir(args.out) as d:   # checked and staged before the work; renamed into place after it
        doc, runs, res = _simulate(args, profile, spec, workload)
        if d is not None:
            _write(d, doc, spec, profile, res)
    if args.json:
        print_json(doc)
        return 0
    _print(args, doc, runs, res, profile, spec, workload)
    return 0


def _simulate(args: argparse.Namespace, profile, spec: SpecConfig, workload):
    """The run and its baselines -> (doc, runs by mode, the run's result)."""
    from saguaro_sim.simulate import simulate

    res = simulate(profile, spec, workload, seed=args.seed, trace=bool(args.out),
                   progress=not args.json and sys.stderr.isatty())
    runs = {spec.mode: res}
    if not args.no_baselines:
        for mode in ("sd", "ar"):
            if mode != spec.mode and not (mode == "sd" and spec.mode == "ar"):
                runs[mode] = simulate(profile, spec.replace(mode=mode), workload, seed=args.seed)
    doc = {"profile": profile.name, "spec": spec.to_dict(), "workload": asdict(workload), "seed": args.seed,
           "result": res.to_dict(), "baselines": {m: r.to_dict() for m, r in runs.items() if m != spec.mode}}
    for m in ("ar", "sd"):
        if m in runs and m != spec.mode:
            doc[f"speedup_vs_{m}"] = res.tokens_per_s_per_seq / runs[m].tokens_per_s_per_seq
    return doc, runs, res


def _write(d, doc: dict, spec: SpecConfig, profile, res) -> None:
    from calibration.jsonio import dump_json
    from saguaro_sim import plots

    dump_json(d / "result.json", doc)
    spec.save(d / "spec.toml")
    profile.to_json(d / "profile.json")
    res.to_chrome_trace(d / "trace.json")
    plots.plot_timeline(res.events, d / "timeline.png",
                        title=f"{spec.mode.upper()} timeline, {profile.name} (first rounds)")


def _print(args: argparse.Namespace, doc: dict, runs: dict, res, profile, spec: SpecConfig, workload) -> None:
    print(f"profile {profile.name}; {workload.num_sequences} sequences x {workload.output_tokens} tokens "
          f"(prompt {workload.prompt_tokens}); seed {args.seed}")
    print(f"spec: {spec.to_toml().strip().replace(chr(10), ', ')}")
    if spec.mode == "ssd" and spec.backup == "auto":
        print(f"backup auto -> {res.backup} at batch {spec.batch_size}")
    modes = list(runs)
    rows = [[m] + [getattr(runs[mode], m) for mode in modes] for m in METRICS]
    print(table(rows, ["metric"] + modes))
    for m in ("ar", "sd"):
        if f"speedup_vs_{m}" in doc:
            print(f"speedup vs {m.upper()}: {doc[f'speedup_vs_{m}']:.2f}x")
    if args.out:
        print(f"wrote {args.out}/ (result.json, spec.toml, profile.json, trace.json, timeline.png)")
