"""`saguaro run`: run one AR / SD / SSD configuration on real models (the executor), print what it measured."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from calibration.errors import ConfigError
from saguaro.commands.common import (
    StagedDir,
    add_output_args,
    add_spec_args,
    add_synthetic_args,
    check_checkpoint_flags,
    flag,
    flag_errors,
    integer,
    number,
    print_json,
    spec_overrides,
    synthetic_flag,
    synthetic_from_args,
    table,
)

RUN_FLAGS = ("target", "draft", "prompt_file", "max_new_tokens", "device", "draft_device", "dtype", "seed",
             "threads", "draft_timeout_s", "start_timeout_s", "fallback", "hardware", "cuda_graphs", "attention",
             "ssd_protocol", "transport", "check_lossless", "draft_placement")


LOAD_FLAGS = {"arrivals.qps": "--qps", "arrivals.trace": "--trace", "arrivals.seed": "--seed"}


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("run", help="run a configuration on real models (executor)",
                              description="Run AR / SD / SSD for real (default: the shipped tiny pair on CPU); "
                                          "flags override --config.")
    p.add_argument("--config", metavar="FILE", help="RunConfig .toml (top-level RunConfig keys, [spec] table)")
    g = p.add_argument_group("configuration (SpecConfig)")
    add_spec_args(g, show_draft_devices=False)  # one draft process, whatever draft_devices says
    r = p.add_argument_group("models, prompts, devices (RunConfig)")
    r.add_argument("--target", metavar="DIR", help="target checkpoint (Hugging Face safetensors folder)")
    r.add_argument("--draft", metavar="DIR", help="draft checkpoint")
    r.add_argument("--prompt", action="append", help="a prompt (repeatable; default: the built-in set)")
    r.add_argument("--prompt-file", metavar="FILE", help="prompts: .json list, .jsonl, or one per line")
    r.add_argument("--max-new-tokens", type=integer(), help="tokens generated per prompt (default 64)")
    r.add_argument("--device", help="cpu | cuda | cuda:N (default cpu)")
    r.add_argument("--draft-device", help="device of the draft (default: the target's)")
    r.add_argument("--target-devices", metavar="LIST",
                   help="tensor-parallel target over these, e.g. cuda:0,cuda:1 or cpu,cpu (default: --device alone; "
                        "--device defaults to the first)")
    r.add_argument("--dtype", help="float32 | bfloat16 | float16")
    r.add_argument("--seed", type=integer(), help="random seed (default 0)")
    r.add_argument("--threads", type=integer(), help="torch threads per process (default 1)")
    r.add_argument("--draft-timeout-s", type=number(), help="seconds the verifier waits for a draft reply, and the "
                   "longest a draft process may stay stopped, start-up included (default 5)")
    r.add_argument("--start-timeout-s", type=number(), help="seconds a child process (the SSD draft, a tensor-"
                   "parallel worker) may take to start (interpreter, torch import, connect, load its weights), "
                   "then it is killed; for the draft a fault like any other (default 60 + 20 per GB of weights)")
    r.add_argument("--fallback", help="after a draft fault: sd | ar | none (default sd)")
    r.add_argument("--hardware", help="hardware preset for the achieved-vs-peak shares: a100 | h100 | h200 | "
                                      "b200 | mi300x (default: detected on CUDA; on CPU peak unknown)")
    r.add_argument("--cuda-graphs", help="auto | on | off: replay decode/verify/tree steps from CUDA graphs "
                                         "(default auto: on exactly when the device is CUDA)")
    r.add_argument("--attention", help="auto | sdpa | flash: flash-attn for decode and verify (default auto: "
                                       "flash when flash_attn imports, on CUDA with bf16/fp16)")
    r.add_argument("--ssd-protocol", help="auto | push | reply: push = the draft sends each built speculation "
                                          "cache and the verifier looks hits up itself; reply = the draft answers "
                                          "each outcome (default auto: push unless the cache's q rows exceed 4 MiB)")
    r.add_argument("--transport", help="auto | shm | gloo: what carries the SSD messages; shm = shared memory on "
                                       "this host, gloo = a gloo group (default auto: shm when target and draft "
                                       "run on the CPU)")
    r.add_argument("--draft-placement", help="SSD: process (the draft in its own process; default) | stream (in "
                                             "this process, building on a side CUDA stream beside the verification; "
                                             "the draft device defaults to the target's; on CPU a helper thread)")
    r.add_argument("--check-lossless", action="store_true", default=None,
                   help="at temperature 0, compare every output with the target's greedy decoding; fail on a "
                        "difference")
    add_synthetic_args(p.add_argument_group("synthetic acceptance (timing only, not lossless)"))
    ld = p.add_argument_group("load mode (AR / SD / SSD): requests arrive on the wall clock, rows refilled as they finish")
    ld.add_argument("--qps", type=float, help="Poisson arrivals at this many requests/s (inf: all at once); "
                                              "with --trace, the trace's clock rescaled to this rate")
    ld.add_argument("--trace", metavar="FILE", help="JSONL trace: {arrival_s, prompt_tokens, output_tokens} per line, "
                                                    "one request each (prompts taken in turn, cut or repeated)")
    add_output_args(p)
    return p


def config_from(args: argparse.Namespace):
    """RunConfig from --config and the flags; errors name the flag (or the file and key)."""
    from saguaro_exec import RunConfig
    from saguaro_exec.devices import is_device
    from saguaro_sim.config import SpecConfig

    base = RunConfig.from_toml(args.config) if args.config else RunConfig()
    spec_over = spec_overrides(args)
    spec_d = base.spec.to_dict()
    if "k" in spec_over and "fanout" not in spec_over:
        spec_d["fanout"] = spec_d["fanout_miss"] = None
        spec_d["budget"] = None if "budget" not in spec_over else spec_d["budget"]
    try:
        spec = SpecConfig.from_dict({**spec_d, **spec_over})
    except ConfigError as e:
        field = flag(e.field) if e.field in spec_over else f"{args.config}: spec.{e.field}" if args.config \
            else e.field
        raise ConfigError(field, e.problem, e.allowed) from None
    over = {n: getattr(args, n) for n in RUN_FLAGS if getattr(args, n) is not None}
    if args.prompt is not None:
        over["prompts"] = list(args.prompt)
    if args.target_devices is not None:
        over["target_devices"] = [d.strip() for d in args.target_devices.split(",")]
        if is_device(over["target_devices"][0]):             # else RunConfig names the bad entry
            over.setdefault("device", over["target_devices"][0])
    synthetic = synthetic_from_args(args)
    if synthetic is not None:
        over["synthetic"] = synthetic
    if args.qps is not None or args.trace is not None:
        over["arrivals"] = {"qps": args.qps, "trace": args.trace, "seed": over.get("seed", base.seed)}
    kept = {f.name: getattr(base, f.name) for f in fields(RunConfig)}
    if "prompts" in over:
        kept["prompt_file"] = None
    if "prompt_file" in over:
        kept["prompts"] = None
    try:
        return RunConfig(**{**kept, **over, "spec": spec})
    except ConfigError as e:
        if e.field.startswith("arrivals") and "arrivals" in over:
            raise ConfigError(LOAD_FLAGS.get(e.field, "--qps"), e.problem, e.allowed) from None
        field = "--prompt" if e.field == "prompts" and "prompts" in over else \
            synthetic_flag(e.field, args) if synthetic is not None and synthetic_flag(e.field, args) else \
            flag(e.field) if e.field in over else f"{args.config}: {e.field}" if args.config else e.field
        raise ConfigError(field, e.problem, e.allowed) from None


def main(args: argparse.Namespace) -> int:
    """Validate, run, then print and write outputs (nothing is written unless the run completes)."""
    from saguaro_exec import run
    from saguaro_exec.faults import RunError

    check_checkpoint_flags(args)         # folders or cached hub ids, usable devices
    config = config_from(args)
    flags = {n: flag(n) for n in RUN_FLAGS if getattr(args, n) is not None}
    if args.prompt is not None:
        flags["prompts"] = "--prompt"
    try:
        with StagedDir(args.out) as d:   # checked and staged before the run; renamed into place after it
            with flag_errors(flags):
                report = run(config)
            doc = {"spec": config.spec.to_dict(), **report.summary(), "texts": report.texts}
            if d is not None:
                report.to_json(d / "report.json")
                config.spec.save(d / "spec.toml")
                report.chrome_trace(d / "trace.json")
    except RunError as e:                # raised through the staging, which removes the staged folder
        done = 0 if e.partial is None else len(e.partial.token_ids)
        print(f"saguaro run: failed: {' '.join(str(e).split())} ({done} sequences were complete)", file=sys.stderr)
        return 1
    if args.json:
        print_json(doc)
        return 0
    print(f"spec: {config.spec.to_toml().strip().replace(chr(10), ', ')}")
    if config.spec.mode == "ssd":
        print(f"draft placement: {report.measurements.meta.get('draft_placement')}")
    if report.synthetic is not None:
        print(f"TIMING ONLY: {report.synthetic['label']}, from {report.synthetic['source']}")
    s = report.summary()
    rows = [[k, s[k]] for k in ("tokens_per_s", "mean_tokens_per_round", "hit_rate", "wait_share",
                                "ceiling_tokens_per_s", "wall_s", "tokens")]
    rows[1:1] = report.achieved_rows()          # next to tokens/s
    if config.arrivals is not None:
        rows += [[f"{name} p{q} ms", getattr(report, f"{name}_s")[f"p{q}"] * 1e3]
                 for name in ("ttft", "tpot", "latency") for q in (50, 90, 99)]
        rows += [["throughput tokens/s", report.throughput], ["requests/s", report.request_throughput]]
    print(table(rows, ["metric", config.spec.mode]))
    for f in report.faults:
        print(f"draft fault: {f['kind']} in batch {f['batch']} round {f['round']} at {f['time_s']:.2f}s "
              f"(noticed after {f['waited_s']:.2f}s); finished by {f['fallback']}")
    if args.out:
        print(f"wrote {args.out}/ (report.json, spec.toml, trace.json)")
    return 0
