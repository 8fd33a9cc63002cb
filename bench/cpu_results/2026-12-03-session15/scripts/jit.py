import sys, glob, numpy as np
sys.path.insert(0, '.')
from calibration.fit import run_of
from calibration.fit_acceptance import steady_rounds
from calibration.fit_ssd_round import _ratios, JITTER_WINDOW
from calibration.measurements import Measurements
by = {}
for f in sorted(glob.glob(sys.argv[1] + '/*.json')):
    try:
        rr = run_of(Measurements.from_json(f))
    except Exception as e:
        continue
    if rr is None: continue
    rows = [r for r in steady_rounds(rr) if (r.get('verify_s') or 0) > 0]
    if len(rows) < JITTER_WINDOW: continue
    v = np.asarray([r['verify_s'] for r in rows])
    key = (rr.mode, rr.temperature > 0)
    by.setdefault(key, []).extend(_ratios(v).tolist())
for k, v in sorted(by.items()):
    v = np.asarray(v); v = v / v.mean()
    print(k, len(v), 'std %.3f p90 %.3f p99 %.3f' % (v.std(), np.quantile(v, .9), np.quantile(v, .99)))
