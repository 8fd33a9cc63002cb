"""Cross-validate the roofline's stack levels: fit on all groups but one, predict the held-out measured points.

    python bench/bench_presets.py                       # table + bench/cpu_results/presets_cv.json
    python bench/bench_presets.py --json out.json       # elsewhere
    python bench/bench_presets.py --print-stacks        # the fitted terms, to paste into calibration/stack.py

No timing is taken here: the points are recorded measurements (calibration/stack_points.py), so the output is the
same on any machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration.jsonio import dump_json  # noqa: E402
from calibration.stack import FITTED  # noqa: E402
from calibration.stack_fit import cross_validate, fit_level, median_abs_error  # noqa: E402

LEVELS = ("serving", "saguaro")
TARGET = 0.15


def main(argv: list[str] | None = None) -> int:
    """Print the held-out table and the median error per level; write the rows as JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=str(Path(__file__).parent / "cpu_results" / "presets_cv.json"),
                    help="where to write the rows (default bench/cpu_results/presets_cv.json)")
    ap.add_argument("--print-stacks", action="store_true", help="print the terms fitted on all points")
    args = ap.parse_args(argv)
    out = {"target_median_abs_error": TARGET, "levels": {}}
    for level in LEVELS:
        rows = cross_validate(level)
        med = median_abs_error(rows)
        out["levels"][level] = {"median_abs_error": med, "rows": rows,
                                "fitted_on_all": {k: getattr(fit_level(level), k) for k in FITTED}}
        print(f"\n{level}: held-out median |error| {100 * med:.1f}% (target <= {100 * TARGET:.0f}%)")
        print(f"  {'held-out group':<26} {'kind':<5} {'model':<14} {'tp':>2} {'hw':<10} {'b':>3} {'new':>4} "
              f"{'ctx':>5} {'measured ms':>11} {'predicted ms':>12} {'error':>7}")
        for r in rows:
            print(f"  {r['group']:<26} {r['kind']:<5} {r['model']:<14} {r['tp']:>2} {r['hardware']:<10} "
                  f"{r['batch']:>3} {r['new']:>4} {r['context']:>5.0f} {1e3 * r['measured_s']:>11.3f} "
                  f"{1e3 * r['predicted_s']:>12.3f} {100 * r['error']:>6.1f}%")
        if args.print_stacks:
            print("  fitted on all points:", ", ".join(f"{k}={v:.4g}" for k, v in
                                                    out["levels"][level]["fitted_on_all"].items()))
    dump_json(args.json, out)
    print(f"\nwrote {args.json}")
    return 0 if all(v["median_abs_error"] <= TARGET for v in out["levels"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
