"""`saguaro plan`: GPUs, mode and configuration per load level (requests/s) under latency SLOs."""

from __future__ import annotations

import argparse
import sys

from calibration.errors import ConfigError, check_choice, check_number
from saguaro.commands import common

FLAGS = {"qps": "--qps", "slo_tpot_ms": "--slo-tpot-ms", "slo_ttft_ms": "--slo-ttft-ms",
         "slo_percentile": "--slo-percentile", "gpu_hour_usd": "--gpu-hour-usd", "num_requests": "--requests",
         "max_batch": "--max-batch", "max_replicas": "--max-replicas", "temperature": "--temperature",
         "draft_devices": "--draft-devices", "seed": "--seed", "mean": "--output-tokens", "shape": "--length-shape",
         "spread": "--length-spread", "modes": "--modes", "workers": "--workers", "target_devices": "--target-devices"}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("plan", help="GPUs and mode needed per load level under latency SLOs",
                              description="Simulate AR, SD and SSD serving a request stream at each load, find the "
                                          "fewest replicas meeting the SLOs, the cheapest mode per load and the "
                                          "crossover loads.")
    common.add_profile_arg(p)
    p.add_argument("--qps", default="1,2,4,8,16", help="load levels in requests/s, comma-separated (default 1,2,4,8,16)")
    p.add_argument("--slo-tpot-ms", type=common.number(), default=30.0, help="time-per-output-token target, ms (default 30)")
    p.add_argument("--slo-ttft-ms", type=common.number(), default=500.0, help="time-to-first-token target, ms (default 500)")
    p.add_argument("--slo-percentile", type=common.number(), default=99.0, help="percentile the SLOs apply to (default 99)")
    p.add_argument("--gpu-hour-usd", type=common.number(), default=2.0, help="price of one GPU-hour in USD (default 2)")
    w = p.add_argument_group("request stream (ignored with --trace, which gives arrivals and lengths)")
    w.add_argument("--trace", metavar="FILE", help="JSONL trace: {arrival_s, prompt_tokens, output_tokens} per line; "
                                                   "its clock is rescaled to each --qps level")
    w.add_argument("--prompt-tokens", type=common.integer(), default=512, help="mean prompt length (default 512)")
    w.add_argument("--output-tokens", type=common.integer(), default=256, help="mean output length (default 256)")
    w.add_argument("--length-shape", default="lognormal", help="fixed | uniform | lognormal | exponential (default "
                                                               "lognormal)")
    w.add_argument("--length-spread", type=common.number(), default=0.5, help="coefficient of variation (default 0.5)")
    w.add_argument("--requests", type=common.integer(), default=1000, help="requests simulated per replica and load (default 1000)")
    d = p.add_argument_group("deployment")
    d.add_argument("--modes", default="ar,sd,ssd", help="modes compared (default ar,sd,ssd)")
    d.add_argument("--max-batch", type=common.integer(), default=64, help="most rows a replica decodes together (default 64)")
    d.add_argument("--max-replicas", type=common.integer(), default=256, help="most replicas tried (default 256)")
    d.add_argument("--target-devices", type=common.integer(), help="GPUs of the target (default: from the profile)")
    d.add_argument("--draft-devices", type=common.integer(), default=1, help="GPUs of SSD's draft (default 1)")
    common.add_placement_args(d)
    d.add_argument("--temperature", type=common.number(), default=0.0, help="sampling temperature (default 0)")
    d.add_argument("--draft-model", default="DRAFT_MODEL", help="draft model name written into the vLLM / SGLang "
                                                                "settings of --out (default DRAFT_MODEL)")
    p.add_argument("--seed", type=common.integer(), default=0, help="random seed (default 0)")
    p.add_argument("--workers", type=common.integer(), help="processes for the sweep (default: every core)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")
    common.add_output_args(p)
    return p


def _qps(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ConfigError("--qps", f"expected comma-separated numbers, got {text!r}", "e.g. 1,2,4,8,16") from None
    if not vals:
        raise ConfigError("--qps", "is empty", "e.g. 1,2,4,8,16")
    for v in vals:
        check_number("--qps", v, 0.0, 1e7, lo_open=True)
    return vals


def _inputs(args: argparse.Namespace) -> dict:
    """Validated plan() keywords from the flags; errors name the flag."""
    from saguaro_sim.load import SLO, Lengths, load_trace

    try:
        slo = SLO(args.slo_tpot_ms, args.slo_ttft_ms, args.slo_percentile)
        lengths = {k: Lengths(getattr(args, f"{k}_tokens"), args.length_shape, args.length_spread)
                   for k in ("prompt", "output")}
    except ConfigError as e:
        if e.field == "mean":
            raise ConfigError("--prompt-tokens / --output-tokens", e.problem, e.allowed) from None
        raise ConfigError(FLAGS.get(e.field, e.field), e.problem, e.allowed) from None
    modes = tuple(m for m in args.modes.replace(" ", "").split(",") if m)
    for m in modes or ("",):
        if m not in ("ar", "sd", "ssd"):
            raise ConfigError("--modes", f"unknown mode {m!r}", "comma list of ar,sd,ssd")
    for name, lo, hi in (("requests", 10, 10_000_000), ("max_batch", 1, 4096), ("max_replicas", 1, 100_000),
                         ("draft_devices", 1, 64), ("seed", 0, None)):
        check_number(f"--{name.replace('_', '-')}", getattr(args, name), lo, hi, integer=True)
    check_number("--gpu-hour-usd", args.gpu_hour_usd, 0.0)
    check_number("--temperature", args.temperature, 0.0, 10.0)
    if args.workers is not None:
        check_number("--workers", args.workers, 1, 1024, integer=True)
    if args.target_devices is not None:
        check_number("--target-devices", args.target_devices, 1, 4096, integer=True)
    trace = load_trace(args.trace, field="--trace") if args.trace else None
    from saguaro_sim.config import PLACEMENTS, SHARINGS

    placement = args.placement or "separate"
    check_choice("--placement", placement, PLACEMENTS)
    if args.sharing is not None:
        check_choice("--sharing", args.sharing, SHARINGS)
        if placement != "shared":
            raise ConfigError("--sharing", f"{args.sharing!r} given without --placement shared",
                              "--sharing only with --placement shared")
    return {"qps": _qps(args.qps), "slo": slo, "trace": trace, "prompt": lengths["prompt"], "output": lengths["output"],
            "num_requests": args.requests, "max_batch": args.max_batch, "modes": modes, "gpu_hour_usd": args.gpu_hour_usd,
            "max_replicas": args.max_replicas, "temperature": args.temperature, "draft_devices": args.draft_devices,
            "target_devices": args.target_devices, "seed": args.seed, "workers": args.workers,
            "placement": placement, "sharing": args.sharing}


def config_text(cfg: dict) -> str:
    """Short description of a row's configuration: K, and for SSD the budget and backup."""
    if cfg["mode"] == "ar":
        return "-"
    if cfg["mode"] == "sd":
        return f"K={cfg['k']}"
    return f"K={cfg['k']} B={cfg['budget']} {cfg['backup']}"


def summary(plan) -> str:
    """The human-readable report: per load and mode the deployment, then the cheapest and the crossovers."""
    rows = []
    for r in plan.rows:
        if r["replicas"] is None:
            rows.append([f"{r['qps']:g}", r["mode"], "-", "-", "-", "-", "-", "-",
                         f"no (> {plan.settings['max_replicas']})"])
            continue
        rows.append([f"{r['qps']:g}", r["mode"], r["replicas"], r["gpus"], r["tpot_ms"]["p99"], r["ttft_ms"]["p99"],
                     r["usd_per_million_tokens"], config_text(r["config"]), "yes"])
    head = ["req/s", "mode", "replicas", "GPUs", "p99 TPOT ms", "p99 TTFT ms", "$/M tok", "config", "meets SLO"]
    out = [common.table(rows, head), "", "cheapest per load:"]
    for b, q in zip(plan.best, plan.qps):
        out.append(f"  {q:g} req/s: none meets the SLOs" if b is None else
                   f"  {q:g} req/s: {b['mode'].upper()} {config_text(b['config'])}, {b['replicas']} replica(s), "
                   f"{b['gpus']} GPUs, ${b['usd_per_million_tokens']:.3f} per million tokens")
    if plan.crossovers:
        out.append("crossovers:")
        out += [f"  {c['pair']}: {c['from'].upper()} cheaper up to {c['between_qps'][0]:g} req/s, {c['to'].upper()} "
                f"from {c['between_qps'][1]:g} req/s" for c in plan.crossovers]
    else:
        out.append("crossovers: none on this load grid (the cheaper mode of each pair is the same at every load)")
    return "\n".join(out)


def _write(d, plan, profile, draft_model: str) -> None:
    from calibration.jsonio import dump_json, write_atomic
    from saguaro.export import export_texts
    from saguaro_sim.config import SpecConfig
    from saguaro_sim.load import plots

    dump_json(d / "plan.json", plan.to_dict())
    profile.to_json(d / "profile.json")
    plots.plot_tpot_vs_load(plan, d / "tpot_vs_load.png")
    plots.plot_gpus_vs_load(plan, d / "gpus_vs_load.png")
    plots.plot_cost_vs_load(plan, d / "cost_vs_load.png")
    for b in plan.best:
        if b is None:
            continue
        spec = SpecConfig.from_dict(b["config"])
        note = (f"saguaro plan: {b['qps']:g} req/s on {profile.name}: {b['mode'].upper()}, {b['replicas']} replica(s), "
                f"{b['gpus']} GPUs")
        for suffix, text in export_texts(spec, draft_model, note).items():
            write_atomic(d / f"recommended-{b['qps']:g}qps{suffix}", text)


def main(args: argparse.Namespace) -> int:
    """Validate, plan, print, write --out."""
    from saguaro_sim.load import plan as plan_loads

    profile = common.profile_from_args(args)
    kw = _inputs(args)
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    with common.StagedDir(args.out) as d:   # checked and staged before the sweep; renamed into place after
        result = plan_loads(profile, progress=progress, **kw)
        if d is not None:
            _write(d, result, profile, args.draft_model)
    if args.json:
        common.print_json(result.to_dict())
        return 0
    s = result.slo
    print(f"profile {profile.name}; SLOs p{s['percentile']:g} TPOT <= {s['tpot_ms']:g} ms, TTFT <= {s['ttft_ms']:g} ms; "
          f"${result.gpu_hour_usd:g} per GPU-hour; {result.settings['num_requests']} requests per simulation")
    print(summary(result))
    if args.out:
        print(f"\nwrote {args.out}/ (plan.json, profile.json, tpot_vs_load / gpus_vs_load / cost_vs_load .png + "
              f".json, recommended-<load>qps.toml (+ .vllm.txt / .sglang.txt for SD))")
    return 0
