"""`saguaro profile`: microbenchmark target/draft forward latency and the link on this machine -> Measurements."""

from __future__ import annotations

import argparse
import sys

from calibration.errors import ConfigError
from saguaro.commands.common import StagedFile, check_checkpoint_flags, int_list, integer, table


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("profile", help="measure forward latencies and the link on this machine",
                              description="Time the target and draft forward passes over a grid of batch sizes, "
                                          "new tokens per sequence (verify widths K+1, tree widths) and context "
                                          "lengths, and the message round trip between two processes; write "
                                          "Measurements JSON (input of `saguaro calibrate`).")
    p.add_argument("--target", metavar="DIR", help="target checkpoint folder (default: the shipped tiny target)")
    p.add_argument("--draft", metavar="DIR", help="draft checkpoint folder (default: the shipped tiny draft)")
    p.add_argument("--device", default="cpu", help="torch device of the models (default cpu)")
    p.add_argument("-o", "--out", default="measurements.json", metavar="FILE",
                   help="Measurements JSON to write, atomically (default measurements.json)")
    g = p.add_argument_group("grid")
    g.add_argument("--ks", default="2,4,6,8", help="lookaheads K whose verify widths K+1 to time (default 2,4,6,8)")
    g.add_argument("--budgets", default="8,16,32,64", help="tree budgets (draft widths) to time (default 8,16,32,64)")
    g.add_argument("--batches", default="1,2,4", help="batch sizes (default 1,2,4)")
    g.add_argument("--contexts", default="64,256,640", help="context lengths (default 64,256,640)")
    g.add_argument("--draft-devices", type=integer(1, 64), default=1, help="draft devices the tree is split over (default 1)")
    g.add_argument("--warmup", type=integer(0, 1000), default=2, help="untimed forwards per shape (default 2)")
    g.add_argument("--repeats", type=integer(1, 10000), default=5, help="timed forwards per shape; the median is kept (default 5)")
    g.add_argument("--threads", type=integer(1, 1024), default=1,
                   help="torch CPU threads while timing (default 1, as saguaro autotune runs every process)")
    g.add_argument("--quick", action="store_true", help="a reduced grid (seconds; for smoke tests)")
    p.add_argument("--no-link", action="store_true", help="skip the two-process message round-trip benchmark")
    p.add_argument("--no-beside", action="store_true",
                   help="skip timing the target beside a busy draft process (CPU; the profile's beside_slowdown)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _grid_arg(name: str, text: str, lo: int) -> tuple[int, ...]:
    vals = int_list(f"--{name}", text)
    if not vals or min(vals) < lo:
        raise ConfigError(f"--{name}", f"got {text!r}", f"comma-separated integers >= {lo}")
    return vals


def main(args: argparse.Namespace) -> int:
    """Validate the flags, run the microbenchmarks, write the Measurements file and print a summary."""
    ks = _grid_arg("ks", args.ks, 1)
    budgets = _grid_arg("budgets", args.budgets, 1)
    batches = _grid_arg("batches", args.batches, 1)
    contexts = _grid_arg("contexts", args.contexts, 0)
    check_checkpoint_flags(args)      # folders or cached hub ids, and a usable --device
    out = StagedFile(args.out, "-o")  # checked before any timing
    from saguaro_exec.io.assets import tiny_pair_paths
    from saguaro_exec.measure.microbench import profile_pair

    target, draft = args.target, args.draft
    if target is None or draft is None:
        t, d = tiny_pair_paths()
        target, draft = target or t, draft or d
    with out as tmp:
        meas = profile_pair(target, draft, device=args.device, ks=ks, budgets=budgets, batches=batches,
                            contexts=contexts, draft_devices=args.draft_devices, warmup=args.warmup,
                            repeats=args.repeats, link=not args.no_link, quick=args.quick,
                            progress=not args.no_progress and sys.stderr.isatty(), threads=args.threads,
                            beside=False if args.no_beside else None)
        meas.to_json(tmp)
    rows = []
    for who in ("target", "draft"):
        mine = [r for r in meas.latency if r["who"] == who]
        one = min(mine, key=lambda r: (r["batch"] * r["new_tokens"], r["context"]))
        big = max(mine, key=lambda r: (r["batch"] * r["new_tokens"], r["context"]))
        rows.append([who, len(mine), one["median_s"] * 1e3, big["median_s"] * 1e3,
                     f"{big['batch']}x{big['new_tokens']}@{big['context']}"])
    print(table(rows, ["model", "shapes", "smallest ms", "largest ms", "largest shape"]))
    for r in meas.link:
        print(f"link round trip {r['bytes']:>8d} B: {r['round_trip_s'] * 1e6:8.1f} us")
    if b := meas.meta.get("beside"):
        print(f"target beside a busy draft process: x{b['raw']:.3f} per forward (median of {b['cycles']} window "
              f"pairs, quartiles {b['q1']:.3f}-{b['q3']:.3f}; {b['target_tokens']} vs {b['draft_tokens']} tokens)")
    print(f"wrote {args.out}")
    return 0
