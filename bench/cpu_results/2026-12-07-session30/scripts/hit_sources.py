"""Out-of-sample check of the hit curve by backup source (session 30): each autotune folder's hit curve is fitted
on its calibration runs alone, as the optimizer sees them, and predicts every real SSD run's per-row hits at the
fan-out it ran. "merged" = fast-backup rows counted as the neural backup's (before session 30); "split" = their
own "fast" source (calibration.fit_hits now); "pooled" = split, with the neural backup's table fitted on the
primary's rows as well as its own. Prints bias (predicted - measured hit rate) and Brier score by
source and temperature. Usage: PYTHONPATH=. python hit_sources.py AUTOTUNE_DIR..."""
import collections
import glob
import sys

import numpy as np

import calibration.fit_hits as fh
from calibration.fit import run_of
from calibration.measurements import Measurements

split_collect = fh.collect_ranks


def merged_collect(run):
    out = split_collect(run)
    out["backup"] += out.pop("fast")
    out["fast"] = []
    return out


def pooled_collect(run):
    out = split_collect(run)
    out["backup"] += out["primary"]
    return out


tot = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])   # (variant, T, source) -> sum pred, meas, sq err, n
for d in sys.argv[1:]:
    runs = {p: run_of(Measurements.from_json(p)) for p in sorted(glob.glob(f"{d}/measurements/*.json"))
            if not p.endswith("grid.json")}
    calib = [r for p, r in runs.items() if "calibration_" in p and r is not None and r.mode != "ar"]
    tests = [r for p, r in runs.items() if "/ssd" in p and r is not None]
    for variant, collect in (("merged", merged_collect), ("split", split_collect),
                              ("pooled", pooled_collect)):
        fh.collect_ranks = collect
        try:
            hits, _ = fh.fit_hits(calib)
        except Exception as e:   # a folder whose calibration runs recorded no ranks
            print(d, "skipped:", str(e)[:60])
            break
        for run in tests:
            fast = run.backup == "fast"
            for r in run.rounds:
                for a, h, fb in zip(r["accepted"], r["hit"], r["from_backup"]):
                    if h is None:
                        continue
                    f = (run.fanout_miss if fb and run.fanout_miss else run.fanout)[a]
                    p = hits.hit(f, a, run.temperature, bool(fb), run.sampler_c, run.k, fast and bool(fb))
                    src = ("fast" if fast else "neural") + ("-backup" if fb else "-primary")
                    for key in ((variant, run.temperature, src), (variant, run.temperature, "all")):
                        t = tot[key]
                        t[0] += p; t[1] += float(bool(h)); t[2] += (p - float(bool(h))) ** 2; t[3] += 1
for (variant, temp, src), (sp, sm, se, n) in sorted(tot.items()):
    print(f"T={temp:<4} {src:15s} {variant:6s}: pred {sp / n:.3f} meas {sm / n:.3f} bias {(sp - sm) / n:+.4f} "
          f"brier {se / n:.4f} n {n}")
