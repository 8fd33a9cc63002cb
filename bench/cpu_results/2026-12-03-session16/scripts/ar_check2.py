import glob, json, sys, os, numpy as np
from calibration.profile import Profile
D = sys.argv[1]; prof = Profile.from_dict(json.load(open(sys.argv[2])))
out = {}
files = sorted(glob.glob(D + "/*.json"), key=os.path.getmtime)
for f in files:
    d = json.load(open(f))
    if "meta" not in d or d["meta"].get("mode") != "ar": continue
    rs = d["rounds"]; w = rs[len(rs)//2]["width"]
    v = np.median([r["verify_s"] - prof.target(r["width"], 1, float(np.mean(r["context"]))) for r in rs])
    m = np.median([r["verify_s"] for r in rs])
    print(f"{os.path.getmtime(f)%86400/3600:6.3f}h {f.split('/')[-1]:24s} w~{w} verify {1e3*m:.3f} minus micro {1e3*v:+.3f} probe {1e3*d['meta'].get('speed_probe_s',0):.3f}")
