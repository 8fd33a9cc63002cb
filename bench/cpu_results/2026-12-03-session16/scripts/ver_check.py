import glob, json, sys, os, numpy as np
from calibration.profile import Profile
D = sys.argv[1]; prof = Profile.from_dict(json.load(open(sys.argv[2])))
acc = {}
for f in sorted(glob.glob(D + "/*.json")):
    d = json.load(open(f))
    if "meta" not in d: continue
    m = d["meta"]; mode = m.get("mode"); k = (m.get("spec") or {}).get("k", 0) or 0; T = (m.get("spec") or {}).get("temperature")
    n = 1 if mode == "ar" else k + 1
    for r in d["rounds"]:
        if r.get("fallback"): continue
        w = r["width"]
        x = r["verify_s"] - prof.target(w, n, float(np.mean(r["context"])))
        acc.setdefault((mode, T == 0, w), []).append(x)
for key in sorted(acc):
    v = np.array(acc[key])
    if len(v) > 50: print(key, len(v), f"verify - micro median {1e3*np.median(v):+.3f} ms")
