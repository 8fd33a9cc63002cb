"""`saguaro autotune`: profile, fit, optimize in simulation, run for real, compare, refit, write a report."""

from __future__ import annotations

import argparse
import sys

from saguaro.commands.common import check_checkpoint_flags, flag_errors, integer, number, print_json, table


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("autotune", help="profile, fit, optimize, run and compare in one loop",
                              description="Calibrate on this machine (microbenchmarks + a short SSD run), fit a "
                                          "profile, pick the best SSD configuration in simulation, run it and "
                                          "the AR / SD baselines for real, compare predicted with measured, "
                                          "refit, and write a report folder (report.md, plots, autotune.json).")
    p.add_argument("--out", default="autotune-report", metavar="DIR",
                   help="report folder, replaced atomically (default autotune-report)")
    p.add_argument("--target", metavar="DIR", help="target checkpoint folder (default: the shipped tiny target)")
    p.add_argument("--draft", metavar="DIR", help="draft checkpoint folder (default: the shipped tiny draft)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--batch-size", type=integer(), default=1, help="sequences decoded together (default 1)")
    p.add_argument("--temperature", type=number(), default=0.0, help="sampling temperature (default 0)")
    p.add_argument("--prompt", action="append", help="a prompt to tune for (repeatable; default: the built-in set)")
    p.add_argument("--prompt-file", metavar="FILE",
                   help="prompts to tune for, as `saguaro run` reads them: .json list, .jsonl, or one per line")
    p.add_argument("--max-new-tokens", type=integer(), help="tokens generated per prompt (default 96; 20 with --quick)")
    p.add_argument("--objective", default="latency", help="latency | throughput (default latency)")
    p.add_argument("--threads", type=integer(1, 1024), default=1, help="torch threads per process in all runs (default 1)")
    p.add_argument("--seed", type=integer(0, 2**62), default=0, help="random seed (default 0)")
    p.add_argument("--repeats", type=integer(1, 50),
                   help="real runs of each checked config, interleaved; the median run counts (default 3; 1 with "
                        "--quick)")
    p.add_argument("--build-margin", type=number(0.0, 1.0), default=None,
                   help="rank SSD configs as if the draft's cache builds ran this share slower than profiled, so "
                        "that a slower moment of the draft does not stall the verifier (default 0.15)")
    p.add_argument("--quick", action="store_true", help="reduced grid and few tokens (a smoke test, ~1 minute)")
    p.add_argument("--json", action="store_true", help="print autotune.json on stdout instead of the summary")
    return p


def prompts_from(args: argparse.Namespace) -> list | None:
    """The --prompt / --prompt-file prompts (read as `saguaro run` reads them), None for the built-in set: the
    optimizer picks K and fan-out for this workload, whose context lengths set the verification's cost."""
    if args.prompt is None and args.prompt_file is None:
        return None
    from calibration.errors import ConfigError
    from saguaro_exec import RunConfig

    if args.prompt is not None and args.prompt_file is not None:
        raise ConfigError("--prompt-file", "given together with --prompt", "one of --prompt | --prompt-file")
    with flag_errors({"prompts": "--prompt" if args.prompt_file is None else "--prompt-file",
                      "prompt_file": "--prompt-file"}):
        return RunConfig(prompts=args.prompt, prompt_file=args.prompt_file).load_prompts()


def main(args: argparse.Namespace) -> int:
    """Run the loop and print the predicted-vs-measured table."""
    from calibration.errors import ConfigError
    from saguaro.pipeline import autotune

    check_checkpoint_flags(args)
    if args.objective not in ("latency", "throughput"):
        raise ConfigError("--objective", f"unknown value {args.objective!r}", "latency | throughput")
    prompts = prompts_from(args)
    with flag_errors(("batch_size", "temperature", "max_new_tokens", "threads", "seed", "repeats", "build_margin")):
        rep = autotune(args.out, target=args.target, draft=args.draft, device=args.device, quick=args.quick,
                       batch_size=args.batch_size, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                       prompts=prompts,
                       seed=args.seed, threads=args.threads, objective=args.objective,
                       progress=not args.json and sys.stderr.isatty(), repeats=args.repeats,
                       **({} if args.build_margin is None else {"build_margin": args.build_margin}))
    if args.json:
        print_json(rep.doc)
        return 0
    rows = []
    for c in rep.configs:
        p, m = c["predicted"], c["measured"]
        rows.append([c["name"], p["tokens_per_s"], m["tokens_per_s"], c["predicted_refit"]["tokens_per_s"],
                     p.get("hit_rate"), m.get("hit_rate"), p["tokens_per_round"], m["tokens_per_round"]])
    print(table(rows, ["config", "pred tok/s", "meas tok/s", "refit tok/s", "pred hit", "meas hit",
                       "pred tok/rnd", "meas tok/rnd"]))
    e = rep.doc["errors"]
    for which in ("fit", "refit"):
        if e.get(which):
            print(f"{which}: median |error| {100 * e[which]['median_abs']:.1f}%, worst {100 * e[which]['max_abs']:.1f}%")
    print(f"recommended ({rep.doc['recommended_name']}):\n{rep.doc['recommended_toml'].rstrip()}")
    print(f"wrote {args.out}/ (report.md, autotune.json, recommended.toml, profiles, plots, measurements)")
    return 0
