"""Out-of-sample check of the hit curve an autotune fits: fit on its calibration runs only (as the optimizer
sees them), predict each real SSD run's per-row hits at the fan-out it ran, compare with what it measured.
Prints bias (predicted - measured hit rate) and Brier score per SHRINK value. Usage:
PYTHONPATH=. python hit_holdout.py AUTOTUNE_DIR... [--shrink 10,20,40,80]"""
import glob
import sys

import numpy as np

import calibration.fit_hits as fh
from calibration.fit import run_of
from calibration.measurements import Measurements

args = [a for a in sys.argv[1:] if not a.startswith("--")]
shrinks = [10, 20, 40, 80, 1000]
if "--shrink" in sys.argv:
    shrinks = [float(x) for x in sys.argv[sys.argv.index("--shrink") + 1].split(",")]
    args = [a for a in args if a != sys.argv[sys.argv.index("--shrink") + 1]]
tot = {s: [0.0, 0.0, 0.0, 0] for s in shrinks}   # sum pred, sum meas, sum sq err, n
for d in args:
    calib = [run_of(Measurements.from_json(p)) for p in sorted(glob.glob(f"{d}/measurements/calibration_*.json"))]
    calib = [r for r in calib if r is not None and r.mode != "ar"]
    tests = [run_of(Measurements.from_json(p)) for p in sorted(glob.glob(f"{d}/measurements/ssd*_run.json"))]
    for s in shrinks:
        fh.SHRINK = s
        try:
            hits, _ = fh.fit_hits(calib)
        except Exception as e:   # a folder whose calibration runs recorded no ranks
            print(d, "skipped:", str(e)[:60])
            break
        line = []
        for run in tests:
            pred, meas = [], []
            for r in run.rounds:
                for a, h, fb in zip(r["accepted"], r["hit"], r["from_backup"]):
                    if h is None:
                        continue
                    f = (run.fanout_miss if fb and run.fanout_miss else run.fanout)[a]
                    pred.append(hits.hit(f, a, run.temperature, bool(fb), run.sampler_c, run.k))
                    meas.append(float(bool(h)))
            p, m = np.array(pred), np.array(meas)
            t = tot[s]
            t[0] += p.sum(); t[1] += m.sum(); t[2] += ((p - m) ** 2).sum(); t[3] += len(p)
            line.append(f"pred {p.mean():.3f} meas {m.mean():.3f} (n {len(p)})")
        print(f"{'/'.join(d.split('/')[-3:])} shrink {s:g}: " + "; ".join(line))
for s, (sp, sm, se, n) in tot.items():
    print(f"ALL shrink {s:g}: bias {(sp - sm) / n:+.4f} brier {se / n:.4f} n {n}")
