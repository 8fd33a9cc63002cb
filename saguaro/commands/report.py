"""`saguaro report`: re-render an autotune folder's report, or summarize one run's Measurements file."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from calibration.errors import ConfigError
from saguaro.commands.common import print_json, table


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = subparsers.add_parser("report", help="tables and plots from a run or autotune folder",
                              description="With an autotune folder: rebuild report.md and its plots from "
                                          "autotune.json and print the report. With a Measurements JSON "
                                          "(a run): print acceptance, hit rate and phase times.")
    p.add_argument("path", metavar="DIR|FILE", help="autotune report folder, or a run's Measurements JSON")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    return p


def run_summary(meas) -> dict:
    """Headline numbers of one run's Measurements: acceptance histogram, hit rate, median phase times."""
    rounds = meas.rounds
    if not rounds:
        raise ConfigError("measurements.rounds", "this file has no run rounds", "a Measurements file of a run")
    acc = [a for r in rounds for a in r.get("accepted", [])]
    hits = [h for r in rounds for h in r.get("hit", []) if h is not None]
    phases = {k: float(np.median([r.get(k) or 0.0 for r in rounds]))
              for k in ("verify_s", "wait_s", "msg_s", "glue_s", "fork_s", "tree_s", "backup_s")}
    return {"spec": meas.meta.get("spec"), "rounds": len(rounds), "tokens_per_round": float(np.mean(acc)) + 1 if acc else None,
            "accepted_histogram": np.bincount(acc).tolist() if acc else [], "hit_rate": float(np.mean(hits)) if hits else None,
            "median_phase_s": phases, "totals": meas.totals}


def main(args: argparse.Namespace) -> int:
    """Dispatch on the path: folder -> re-render the autotune report; file -> summarize the run."""
    from calibration import Measurements
    from saguaro.autotune_report import load_report, render_markdown, write_report

    path = Path(args.path)
    if path.is_dir():
        doc = load_report(path)
        write_report(doc, path)
        if args.json:
            print_json(doc)
        else:
            print(render_markdown(doc))
        return 0
    if not path.is_file():
        raise ConfigError("path", f"{path} does not exist", "an autotune folder or a Measurements JSON file")
    s = run_summary(Measurements.from_json(path))
    if args.json:
        print_json(s)
        return 0
    print(f"{path}: {s['rounds']} rounds; spec {s['spec']}")
    print(f"tokens per round {s['tokens_per_round']}; hit rate {s['hit_rate']}; "
          f"accepted lengths {s['accepted_histogram']}")
    print(table([[k, v * 1e3] for k, v in s["median_phase_s"].items()], ["phase", "median ms"]))
    return 0
