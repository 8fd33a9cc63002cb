"""SSD load rounds per forwarded width: measured phases against the load simulator's charge (session 29).

Usage: PYTHONPATH=. python ssd_widths.py PROFILE TRACE_DIR [repeats] [levels] [mode] [fixed_tokens]
Levels are interleaved per repeat (knee, overloaded, fixed, knee, ...); fixed: a fixed-batch run of 4 prompts."""
import sys
import types
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, "bench")
from bench_load import _prompt_ids, _specs  # noqa: E402
from load_calibrate import run_once  # noqa: E402

from calibration.profile import Profile  # noqa: E402
from saguaro_sim.load.costs import round_cost  # noqa: E402

prof = Profile.from_json(sys.argv[1])
tdir = Path(sys.argv[2])
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
levels = sys.argv[4].split(",") if len(sys.argv) > 4 else ["knee", "overloaded"]
ids = _prompt_ids()
mode = sys.argv[5] if len(sys.argv) > 5 else "ssd"
ftok = int(sys.argv[6]) if len(sys.argv) > 6 else 32
spec = _specs(prof, [mode], 3, 4, 32, round(float(np.mean([len(p) for p in ids]))))[mode]
args = types.SimpleNamespace(protocol="reply", threads=1, seed=0)
fast = spec.backup == "fast"
print(spec)
KEYS = ("wait_s", "verify_s", "msg_s", "draft_reply_s", "backup_s", "glue_s", "fork_s", "tree_s")
allby = {lvl: defaultdict(list) for lvl in levels + ["fixed"]}
for _ in range(reps):
    for lvl in allby:
        rep = run_once(spec, prof, ids[:4] if lvl == "fixed" else ids, ftok if lvl == "fixed" else 32, args,
                       None if lvl == "fixed" else tdir / f"{lvl}.jsonl")
        for r in rep.measurements.rounds[(8 if lvl == "fixed" else 0):]:   # fixed: past the cold first rounds
            allby[lvl][int(r.get("width") or r["batch"])].append(r)
for lvl, by in allby.items():
    print(f"== {lvl}")
    print("w     n  meas_ms charged  ratio | " + " ".join(f"{k[:-2]:>7}" for k in KEYS) + " | ch_verify ch_build ch_backup miss%")
    for w in sorted(by):
        rs = by[w]
        meas = np.mean([r["t1"] - r["t0"] for r in rs]) * 1e3
        ch, miss = [], []
        for r in rs:
            ctx = float(np.mean(r["context"])) if r["context"] else 60.0
            c = round_cost(prof, spec, w, ctx, fast)
            m = any(not h for h in r.get("hit", [True]))
            miss.append(m)
            ch.append(c.base_s - c.loop_s + (c.miss_s if m else 0.0))
        c = round_cost(prof, spec, w, float(np.mean([np.mean(r["context"]) for r in rs if r["context"]])), fast)
        ph = " ".join(f"{np.mean([r.get(k, 0.0) for r in rs]) * 1e3:7.3f}" for k in KEYS)
        print(f"{w} {len(rs):5d} {meas:8.3f} {np.mean(ch) * 1e3:7.3f} {meas / (np.mean(ch) * 1e3):6.3f} | {ph} | "
              f"{c.verify_s * 1e3:8.3f} {c.side_s * 1e3:8.3f} {c.backup_s * 1e3:8.3f} {100 * np.mean(miss):4.0f}")
