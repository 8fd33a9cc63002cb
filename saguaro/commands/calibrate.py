"""`saguaro calibrate`: fit a Profile from Measurements files (microbenchmark grids and executor runs)."""

from __future__ import annotations

import argparse

from calibration.errors import ConfigError
from saguaro.commands.common import StagedFile, load_profile, number, print_json, table


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("calibrate", help="fit a profile from measurements",
                              description="Fit latency models (cross-validated), link latency, acceptance per "
                                          "position and hit curves (tables + power law) from Measurements JSON "
                                          "files, and write a profile JSON with its provenance.")
    p.add_argument("measurements", nargs="+", metavar="FILE",
                   help="Measurements JSON files: a `saguaro profile` grid and one file per run")
    p.add_argument("-o", "--out", default="profile.json", metavar="FILE", help="profile JSON to write (default profile.json)")
    p.add_argument("--name", help="profile name (default fit-<host>)")
    p.add_argument("--base", metavar="NAME|PATH", help="profile supplying parts the measurements lack")
    p.add_argument("--mode", choices=("ssd", "sd", "ar"),
                   help="calibrate executor costs (and acceptance) on the runs of this mode (default: all runs)")
    p.add_argument("--temperature", type=number(0.0, 10.0), help="calibrate executor costs on the runs nearest this temperature")
    p.add_argument("--bare", action="store_true", help="microbenchmark latencies only, no executor calibration")
    p.add_argument("--json", action="store_true", help="print the fitted profile as JSON")
    return p


def main(args: argparse.Namespace) -> int:
    """Read the files, fit, write the profile atomically and print a summary."""
    from calibration import Measurements
    from calibration.fit import fit
    from saguaro.autotune_report import profile_rows

    out = StagedFile(args.out, "-o")      # checked before reading or fitting anything
    base = load_profile(args.base, "--base") if args.base else None
    meas = []
    for path in args.measurements:
        try:
            meas.append(Measurements.from_json(path))
        except ConfigError as e:
            raise ConfigError(f"measurements {e.field}", e.problem, e.allowed) from None
    with out as tmp:
        profile = fit(*meas, name=args.name, base=base, executor=not args.bare, mode=args.mode,
                      temperature=args.temperature)
        profile.to_json(tmp)
    if args.json:
        print_json(profile.to_dict())
        return 0
    print(table(profile_rows(profile), ["part", "fit", "n", "cv error"]))
    print(f"wrote {args.out}")
    return 0
